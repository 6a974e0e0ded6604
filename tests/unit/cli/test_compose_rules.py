"""compose.yaml rendered by the real Compose v2 binary, checked against the deployment rules.

Each rule is also shown failing: a small override file breaks exactly one thing and the
rule must name it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import compose_rules as cr
import pytest

REPO = Path(__file__).resolve().parents[3]
PROFILE_SETS = [("head",), ("worker",), ("health",), ("head", "health")]


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """configs/node.env.example with the model cache pointed at a temporary folder."""
    d = tmp_path_factory.mktemp("compose")
    text = (REPO / "configs" / "node.env.example").read_text()
    text = text.replace(
        "SPARKPAIR_MODEL_CACHE=/srv/sparkpair/models", f"SPARKPAIR_MODEL_CACHE={d / 'models'}"
    )
    p = d / "node.env"
    p.write_text(text)
    return p


def _render(
    env_file: Path, profiles: tuple[str, ...], override: str | None = None, tmp: Path | None = None
) -> dict:
    files = []
    if override is not None:
        assert tmp is not None
        f = tmp / "override.yaml"
        f.write_text(textwrap.dedent(override))
        files.append(f)
    return cr.render(REPO, env_file=env_file, profiles=profiles, files=files)


@pytest.mark.parametrize("profiles", PROFILE_SETS, ids=lambda p: "+".join(p))
def test_every_profile_renders_and_keeps_every_rule(env_file: Path, profiles: tuple[str, ...]) -> None:
    cfg = _render(env_file, profiles)
    assert set(cfg["services"]) == set(profiles)
    assert cr.check_config(cfg) == []


def test_the_env_file_reaches_the_containers_and_nothing_else_sets_the_cluster_shape(env_file: Path) -> None:
    cfg = _render(env_file, ("head", "worker"))
    for name in ("head", "worker"):
        env = cfg["services"][name]["environment"]
        assert env["SPARKPAIR_NNODES"] == "2" and env["SPARKPAIR_NODE_RANK"] == "0"
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    assert cr.check_source((REPO / "compose.yaml").read_text()) == []


def test_a_hard_coded_node_count_in_the_file_is_refused() -> None:
    bad = (
        (REPO / "compose.yaml")
        .read_text()
        .replace(
            "command: [node, run, --role, worker]", 'command: [node, run, --role, worker, --nnodes, "2"]'
        )
    )
    v = cr.check_source(bad)
    assert [x.rule for x in v] == ["no-hardcoded-cluster"] and "--nnodes" in str(v[0])
    v = cr.check_source("    environment:\n      SPARKPAIR_NODE_RANK: 1\n")
    assert [x.rule for x in v] == ["no-hardcoded-cluster"]


def test_compose_passes_every_setting_the_schemas_define_and_nothing_else() -> None:
    import yaml
    from sparkpair_cli.deploy.nodeenv_keys import container_keys

    listed = set(yaml.safe_load((REPO / "compose.yaml").read_text())["x-settings"])
    assert listed == set(container_keys()), (
        f"missing from x-settings: {sorted(set(container_keys()) - listed)}; "
        f"not a setting: {sorted(listed - set(container_keys()))}"
    )


def _identity(cfg: dict, service: str) -> dict:
    env = cfg["services"][service]["environment"]
    return {k: env.get(k) for k in ("SPARKPAIR_NODE_NAME", "SPARKPAIR_NODE_RANK", "VLLM_HOST_IP")}


def test_the_worker_gets_the_identity_of_the_env_file_typed_whatever_its_name(tmp_path: Path) -> None:
    """docker compose --env-file <any other name> --profile worker config: that file's identity,
    even with a configs/node.env of another node in the project and SPARKPAIR_NODE_ENV naming it."""
    import shutil

    project = tmp_path / "checkout"
    (project / "configs").mkdir(parents=True)
    shutil.copy2(REPO / "compose.yaml", project / "compose.yaml")
    shutil.copytree(REPO / "configs" / "profiles", project / "configs" / "profiles")
    (project / "models").mkdir()
    head = (
        (REPO / "configs" / "node.env.example")
        .read_text()
        .replace("SPARKPAIR_MODEL_CACHE=/srv/sparkpair/models", f"SPARKPAIR_MODEL_CACHE={project / 'models'}")
    )
    (project / "configs" / "node.env").write_text(head)  # the head's, the old default
    worker = tmp_path / "node-spark-b.env"
    worker.write_text(
        head.replace("SPARKPAIR_NODE_NAME=spark-a", "SPARKPAIR_NODE_NAME=spark-b")
        .replace("SPARKPAIR_NODE_RANK=0", "SPARKPAIR_NODE_RANK=1")
        .replace("VLLM_HOST_IP=192.168.177.11", "VLLM_HOST_IP=192.168.177.12")
    )
    want = {"SPARKPAIR_NODE_NAME": "spark-b", "SPARKPAIR_NODE_RANK": "1", "VLLM_HOST_IP": "192.168.177.12"}
    cfg = cr.render(project, env_file=worker, profiles=("worker",))
    assert _identity(cfg, "worker") == want
    decoy = {"SPARKPAIR_NODE_ENV": str(project / "configs" / "node.env")}
    cfg = cr.render(project, env_file=worker, profiles=("worker",), extra_env=decoy)
    assert _identity(cfg, "worker") == want
    # the head's file, typed for the head, gives the head's identity to head and health
    cfg = cr.render(project, env_file=project / "configs" / "node.env", profiles=("head", "health"))
    assert (
        _identity(cfg, "head")["SPARKPAIR_NODE_NAME"]
        == _identity(cfg, "health")["SPARKPAIR_NODE_NAME"]
        == "spark-a"
    )


def test_without_an_env_file_the_render_stops_naming_the_setting(tmp_path: Path) -> None:
    empty = tmp_path / "empty.env"
    empty.write_text(f"SPARKPAIR_MODEL_CACHE={tmp_path}\n")
    with pytest.raises(
        cr.ComposeRenderError,
        match=r"SPARKPAIR_NODE_(NAME|RANK) is missing a value.*wanted this node's env file given with "
        r"--env-file",
    ):
        cr.render(REPO, env_file=empty, profiles=("worker",))


def test_an_env_file_in_the_source_is_refused() -> None:
    bad = (
        (REPO / "compose.yaml")
        .read_text()
        .replace(
            "x-node: &node\n", "x-node: &node\n  env_file:\n    - ${SPARKPAIR_NODE_ENV:-configs/node.env}\n"
        )
    )
    v = cr.check_source(bad)
    assert [x.rule for x in v] == ["env-file"] and "env_file" in str(v[0])


def test_an_unset_model_cache_stops_the_render_with_the_key_named(env_file: Path, tmp_path: Path) -> None:
    p = tmp_path / "node.env"
    p.write_text(
        "\n".join(x for x in env_file.read_text().splitlines() if not x.startswith("SPARKPAIR_MODEL_CACHE"))
    )
    with pytest.raises(cr.ComposeRenderError, match="SPARKPAIR_MODEL_CACHE"):
        cr.render(REPO, env_file=p, profiles=("head",))


BAD = {
    "privileged": ("head", "no-privileged", "services: {head: {privileged: true}}"),
    "extra-cap": ("worker", "caps", "services: {worker: {cap_add: [SYS_ADMIN]}}"),
    "no-ipc-lock": ("head", "caps", "services: {head: {cap_add: !reset []}}"),
    "bridge-network": ("head", "host-network", "services: {head: {network_mode: bridge}}"),
    "private-ipc-small-shm": ("worker", "shm", "services: {worker: {ipc: private, shm_size: 64m}}"),
    "memlock-limited": ("worker", "memlock", "services: {worker: {ulimits: {memlock: 65536}}}"),
    "nofile-low": ("head", "nofile", "services: {head: {ulimits: {nofile: {soft: 1024, hard: 1024}}}}"),
    "no-infiniband": ("head", "rdma-device", "services: {head: {devices: !reset []}}"),
    "no-gpu": ("worker", "gpu", "services: {worker: {deploy: !reset {}}}"),
    "unless-stopped": ("head", "restart-bounded", "services: {head: {restart: unless-stopped}}"),
    "always": ("worker", "restart-bounded", "services: {worker: {restart: always}}"),
    "on-failure-unbounded": ("head", "restart-bounded", "services: {head: {restart: on-failure}}"),
    "on-failure-50": ("head", "restart-bounded", "services: {head: {restart: 'on-failure:50'}}"),
    "worker-http-probe": (
        "worker",
        "healthcheck",
        "services: {worker: {healthcheck: {test: [CMD, curl, -f, 'http://127.0.0.1:8000/health']}}}",
    ),
    "head-loopback-curl": (
        "head",
        "healthcheck",
        "services: {head: {healthcheck: {test: [CMD-SHELL, 'curl -f http://127.0.0.1:8000/health']}}}",
    ),
    "short-start-period": ("head", "start-period", "services: {head: {healthcheck: {start_period: 60s}}}"),
    "no-init": ("worker", "init", "services: {worker: {init: false}}"),
    "overlay-writable": (
        "head",
        "overlay-ro",
        "services: {head: {volumes: ['./overlay:/opt/sparkpair/src/overlay:rw']}}",
    ),
    "triton-cache-ephemeral": (
        "head",
        "jit-cache",
        "services: {head: {environment: {TRITON_CACHE_DIR: /tmp/triton}}}",
    ),
    "unbounded-grace": ("worker", "stop-grace", "services: {worker: {stop_grace_period: 1h}}"),
    "configs-mounted": (
        "head",
        "configs-mount",
        "services: {head: {volumes: ['./configs:/opt/sparkpair/src/configs:ro']}}",
    ),
    "health-env-file-mounted": (
        "health",
        "configs-mount",
        "services: {health: {volumes: ['./configs/node.env.example:/run/node.env:ro']}}",
    ),
    "no-settings": ("head", "env-file", "services: {head: {environment: {SPARKPAIR_NNODES: ''}}}"),
    "health-without-readyz": ("health", "healthcheck", "services: {health: {healthcheck: {disable: true}}}"),
    "health-restart-loop": ("health", "restart-bounded", "services: {health: {restart: unless-stopped}}"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_rule_fails_on_a_bad_override(case: str, env_file: Path, tmp_path: Path) -> None:
    service, rule, override = BAD[case]
    cfg = _render(env_file, (service,), override, tmp_path)
    violations = cr.check_config(cfg)
    hits = [v for v in violations if v.rule == rule and v.service == service]
    assert hits, f"{case}: rule {rule} did not fire; got {[str(v) for v in violations]}"
    # Only the broken thing is reported, and the message names service, setting, seen, wanted.
    assert {v.rule for v in violations} == {rule}, [str(v) for v in violations]
    msg = str(hits[0])
    assert f"service {service}:" in msg and "wanted" in msg


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45m0s", 2700.0),
        ("1h30m", 5400.0),
        ("30s", 30.0),
        (2_700_000_000_000, 2700.0),
        ("", None),
        (None, None),
    ],
)
def test_compose_durations_are_read_in_seconds(text: object, seconds: float | None) -> None:
    assert cr.duration_s(text) == seconds
