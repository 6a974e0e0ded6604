"""The node env file: every key validated, every error names node, key, seen and wanted."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import NodeEnvError, load_node_env, load_node_env_file, parse_env_file

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "configs" / "node.env.example"


def example() -> dict[str, str]:
    return parse_env_file(EXAMPLE)


def test_the_example_is_valid_and_documents_every_key() -> None:
    env = load_node_env_file(EXAMPLE)
    assert env.role == "head" and env.hcas == ["rocep1s0f1", "roceP2p1s0f1"]
    text = EXAMPLE.read_text()
    from sparkpair_cli.deploy.nodeenv import NodeEnv
    from sparkpair_cli.deploy.nodeenv_values import WANTED

    for key in NodeEnv.model_fields:
        assert f"\n{key}=" in text, f"{key} is not in {EXAMPLE.name}"
        assert key in WANTED, f"{key} has no wanted-value phrase"


@pytest.mark.parametrize(
    ("key", "value", "wanted"),
    [
        ("SPARKPAIR_NODE_RANK", "2", "an integer below SPARKPAIR_NNODES=2"),
        ("SPARKPAIR_NODE_RANK", "one", "this node's 0-based rank"),
        ("SPARKPAIR_NNODES", "0", "the number of nodes"),
        ("VLLM_HOST_IP", "10.0.0.5", "an address in SPARKPAIR_FABRIC_CIDR=192.168.177.0/24"),
        ("VLLM_HOST_IP", "spark-a.local", "this node's IPv4 address on the fabric subnet"),
        (
            "SPARKPAIR_HEAD_ADDR",
            "192.168.177.12",
            "this node's VLLM_HOST_IP=192.168.177.11 (rank 0 is the head)",
        ),
        ("SPARKPAIR_FABRIC_CIDR", "192.168.177.0", "the fabric (RoCE) subnet in CIDR form"),
        ("SPARKPAIR_FABRIC_IFNAME", "a-very-long-interface-name", "at most 15 characters"),
        ("NCCL_IB_HCA", "rocep1s0f1;roceP2p1s0f1", "both halves of the QSFP port"),
        ("NCCL_IB_GID_INDEX", "v2", "'auto' (resolved per node from sysfs at start) or an integer 0-255"),
        ("SPARKPAIR_EXECUTOR", "torchrun", "empty or 'mp'"),
        ("SPARKPAIR_EXECUTOR", "ray", "Ray was removed"),
        ("SPARKPAIR_API_PORT", "80", "a TCP port 1024-65535"),
        ("SPARKPAIR_GATEWAY_PORT", "8000", "a port other than SPARKPAIR_API_PORT"),
        ("SPARKPAIR_API_HOST", "224.0.0.1", "0.0.0.0, ::, 127.0.0.1 or one unicast address of this node"),
        ("SPARKPAIR_MODEL_CACHE", "models", "an absolute host path"),
        ("SPARKPAIR_PEERS", "spark-b", "name=address"),
        ("SPARKPAIR_PEERS", "spark-b=999.1.1.1", "the other nodes as name=address"),
        ("SPARKPAIR_PEERS", "spark-a=192.168.177.12", "the other nodes only, not this one"),
        ("SPARKPAIR_PEERS", "spark-b=192.168.177.11", "the other nodes only, not this one"),
    ],
)
def test_a_bad_value_names_node_key_seen_and_wanted(key: str, value: str, wanted: str) -> None:
    values = example() | {key: value}
    with pytest.raises(NodeEnvError) as e:
        load_node_env(values, source="node.env")
    msg = str(e.value)
    line = next(x for x in msg.splitlines() if f": {key}=" in x)
    assert line.startswith("node spark-a (node.env): ")
    assert value in line and "wanted" in line and wanted in line, line


def test_a_worker_on_the_head_address_is_refused() -> None:
    values = example() | {"SPARKPAIR_NODE_RANK": "1", "SPARKPAIR_NODE_NAME": "spark-b"}
    with pytest.raises(
        NodeEnvError, match=r"node spark-b .*VLLM_HOST_IP='192.168.177.11'; wanted an address other"
    ):
        load_node_env(values, source="node.env")


def test_a_missing_key_is_named_as_unset() -> None:
    values = {k: v for k, v in example().items() if k != "VLLM_HOST_IP"}
    with pytest.raises(NodeEnvError, match=r"VLLM_HOST_IP='<unset>'; wanted this node's IPv4 address"):
        load_node_env(values)


def test_derived_socket_names_must_not_disagree() -> None:
    values = example() | {"NCCL_SOCKET_IFNAME": "enP7s7"}
    with pytest.raises(
        NodeEnvError, match=r"NCCL_SOCKET_IFNAME='enP7s7'; wanted it unset or equal to 'enp1s0f1np1'"
    ):
        load_node_env(values)


def test_every_problem_is_reported_at_once() -> None:
    values = example() | {"SPARKPAIR_API_PORT": "80", "NCCL_IB_GID_INDEX": "x", "VLLM_HOST_IP": "not-an-ip"}
    lines = str(pytest.raises(NodeEnvError, load_node_env, values).value).splitlines()
    assert len(lines) == 3


def test_four_nodes_use_the_same_schema() -> None:
    values = example() | {
        "SPARKPAIR_NNODES": "4",
        "SPARKPAIR_NODE_RANK": "3",
        "VLLM_HOST_IP": "192.168.177.14",
    }
    env = load_node_env(values)
    assert env.role == "worker" and env.SPARKPAIR_NNODES == 4


@pytest.mark.parametrize(
    ("bind", "probe"), [("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("192.168.177.11", "192.168.177.11")]
)
def test_the_probe_address_follows_the_bind_address(bind: str, probe: str) -> None:
    assert load_node_env(example() | {"SPARKPAIR_API_HOST": bind}).probe_host() == probe


def test_env_file_syntax(tmp_path: Path) -> None:
    p = tmp_path / "n.env"
    p.write_text("# c\n\nexport A=1\nB='two words'\nC=x # tail\nD=\n")
    assert parse_env_file(p) == {"A": "1", "B": "two words", "C": "x", "D": ""}
    p.write_text("not a line\n")
    # Compose's own words, naming the file and the line
    with pytest.raises(NodeEnvError, match=r"n.env: docker compose cannot read it .*line 1: key cannot"):
        parse_env_file(p)


# --- holes in the node env --------------------------------------------------------------


def bad_line(key: str, value: str, **extra: str) -> str:
    """The one error line about ``key`` when ``key=value`` is set in the example."""
    values = example() | extra | {key: value}
    with pytest.raises(NodeEnvError) as e:
        load_node_env(values, source="node.env")
    lines = [x for x in str(e.value).splitlines() if f": {key}=" in x]
    assert len(lines) == 1, str(e.value)
    assert lines[0].startswith("node spark-a (node.env): "), lines[0]
    assert "wanted" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("value", "want_used"),
    [
        ("rocep1s0f1,roceP2p1s0f1", ["rocep1s0f1", "roceP2p1s0f1"]),  # prefixes
        ("=rocep1s0f1:1,roceP2p1s0f1:1", ["rocep1s0f1", "roceP2p1s0f1"]),  # exact, with ports
        ("rocep", ["rocep1s0f0", "rocep1s0f1"]),  # a prefix matches every device it starts
        ("^=rocep1s0f0", ["rocep1s0f1", "roceP2p1s0f1"]),  # exclude one device exactly
        ("^rocep1", ["roceP2p1s0f1"]),  # exclude by prefix: both rocep1* go
        ("^=rocep1s0f1,roceP2p1s0f1", ["rocep1s0f0"]),  # exclude BOTH halves: NCCL uses neither
    ],
)
def test_nccl_ib_hca_is_read_as_nccl_defines_it(value: str, want_used: list[str]) -> None:
    present = ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f1"]
    env = load_node_env(example() | {"NCCL_IB_HCA": value})
    assert env.nccl_hcas(present) == want_used
    # An exclude list names no device to use: nothing may read it as "the devices listed".
    assert env.hca_excludes == value.startswith("^")
    assert (env.hcas == []) == value.startswith("^")


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("=^rocep1s0f1", "'=^' is not NCCL syntax"),
        ("^", "an empty device list"),
        ("rocep1s0f1,,roceP2p1s0f1", "an empty device list or entry"),
        (",".join(f"d{i}" for i in range(33)), "NCCL takes at most 32"),
        ("rocep1s0f1:x", "name or name:port"),
    ],
)
def test_nccl_ib_hca_syntax_errors_say_what_nccl_takes(value: str, why: str) -> None:
    line = bad_line("NCCL_IB_HCA", value)
    assert why in line and "'^' (exclude the listed devices)" in line, line


def test_a_profile_path_outside_the_profiles_is_refused_without_reading_it(tmp_path: Path) -> None:
    secret = tmp_path / "passwd"
    secret.write_text("root:SECRET-FIRST-LINE:0:0\n")
    rel = "../../../../" + str(secret).lstrip("/")
    for value in (rel, "../../../../etc/passwd", str(secret), "configs/profiles/tiny-demo.yaml"):
        line = bad_line("SPARKPAIR_PROFILE", value)
        assert "SECRET-FIRST-LINE" not in line and "root:" not in line, line
        assert "a profile name from configs/profiles/" in line, line
    assert "a path with a '..' component" in bad_line("SPARKPAIR_PROFILE", "/etc/../etc/x.yaml")
    assert "does not end in .yaml" in bad_line("SPARKPAIR_PROFILE", str(secret))
    # names and absolute YAML paths are accepted
    for ok in ("tiny-demo", "deepseek-v4-flash", "/opt/sparkpair/src/configs/profiles/tiny-pair.yaml"):
        assert load_node_env(example() | {"SPARKPAIR_PROFILE": ok}).SPARKPAIR_PROFILE == ok


def test_the_node_cli_does_not_print_the_file_a_profile_path_points_at(tmp_path: Path) -> None:
    from sparkpair_cli.main import app
    from typer.testing import CliRunner

    secret = tmp_path / "passwd"
    secret.write_text("root:SECRET-FIRST-LINE:0:0\n")
    env = tmp_path / "node.env"
    text = EXAMPLE.read_text()
    env.write_text(text.replace("PROFILE=deepseek-v4-flash", f"PROFILE=../../..{secret}"))
    res = CliRunner().invoke(app, ["node", "validate", "--env-file", str(env), "--no-host-paths"])
    assert res.exit_code == 2, res.output
    assert "SECRET-FIRST-LINE" not in res.output and "SPARKPAIR_PROFILE=" in res.output


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("../../etc", "neither a Hugging Face repo id nor an absolute path"),
        ("/models/../../etc", "a path with a '..' component"),
        ("--trust-remote-code", "starts with '-'"),
        ("-x", "starts with '-'"),
        ("x" * (1 << 20), "1048576 characters; at most 4096"),
        ("org/name/extra", "neither a Hugging Face repo id"),
        ("org--x/name", "neither a Hugging Face repo id"),
        ("models/tiny\n--trust-remote-code", "control or non-ASCII"),
    ],
)
def test_sparkpair_model_refuses_paths_out_options_and_megabytes(value: str, why: str) -> None:
    line = bad_line("SPARKPAIR_MODEL", value)
    assert why in line, line
    assert len(line) < 600, f"the error repeats the value: {len(line)} characters"


@pytest.mark.parametrize(
    "value",
    ["", "deepseek-ai/DeepSeek-V4-Flash", "gpt2", "Qwen/Qwen3-0.6B", "/models/tiny", "/models/hub/x_y.z"],
)
def test_sparkpair_model_takes_repo_ids_and_absolute_paths(value: str) -> None:
    assert load_node_env(example() | {"SPARKPAIR_MODEL": value}).SPARKPAIR_MODEL == value


@pytest.mark.parametrize(
    ("cidr", "why"),
    [
        ("0.0.0.0/0", "a /0 is not a fabric subnet"),
        ("128.0.0.0/1", "a /1 is not a fabric subnet"),
        ("10.0.0.0/7", "a /7 is not a fabric subnet"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/24", "multicast"),
        ("240.0.0.0/8", "reserved"),
        ("0.0.0.0/8", "'this network'"),
        ("192.168.177.0/32", "a /32 is not a fabric subnet"),
    ],
)
def test_a_fabric_cidr_that_is_not_a_fabric_fails(cidr: str, why: str) -> None:
    line = bad_line("SPARKPAIR_FABRIC_CIDR", cidr)
    assert why in line and "an IPv4 network of /8 to /31" in line, line


@pytest.mark.parametrize("cidr", ["192.168.177.0/24", "192.168.177.10/31", "10.0.0.0/8", "172.28.0.0/16"])
def test_fabric_like_cidrs_pass(cidr: str) -> None:
    ip = str(next(iter(ipaddress.IPv4Network(cidr))))
    values = {"SPARKPAIR_FABRIC_CIDR": cidr, "VLLM_HOST_IP": ip, "SPARKPAIR_HEAD_ADDR": ip}
    env = load_node_env(example() | values)
    assert str(env.SPARKPAIR_FABRIC_CIDR) == cidr


def test_waiver_ids_are_checked_against_the_known_ids() -> None:
    line = bad_line("SPARKPAIR_PREFLIGHT_WAIVE", "rdma-devices,everything")
    assert "unknown check ids ['everything']" in line and "known: rdma-devices," in line, line
    from sparkpair_cli.preflight.ids import CHECK_IDS

    env = load_node_env(example() | {"SPARKPAIR_PREFLIGHT_WAIVE": ",".join(CHECK_IDS)})
    assert env.waived == set(CHECK_IDS)


@pytest.mark.parametrize(
    "key", ["SPARKPAIR_NNODES", "SPARKPAIR_NODE_RANK", "SPARKPAIR_API_PORT", "SPARKPAIR_JOIN_TIMEOUT_S"]
)
@pytest.mark.parametrize("value", ["\u0661", "\uff11", "1_0", " 1", "+1", "1.0", "\u00b9"])
def test_numbers_are_ascii_digits_only(key: str, value: str) -> None:
    line = bad_line(key, value)
    assert "ASCII digits" in line or "not a plain decimal integer" in line, line


@pytest.mark.parametrize("value", ["\u0661\u0662", "\u00b2", "\uff13"])
def test_the_gid_index_takes_ascii_digits_only(value: str) -> None:
    line = bad_line("NCCL_IB_GID_INDEX", value)
    assert "ASCII digits" in line and ascii(value)[1:-1] in line, line


def test_api_key_settings_never_show_the_key(tmp_path: Path) -> None:
    key = "sk-THE-SECRET-KEY-123"
    line = bad_line("SPARKPAIR_API_KEY", key + " with space")
    assert "THE-SECRET" not in line and "<hidden, 32 characters>" in line, line
    line = bad_line("SPARKPAIR_API_KEY", key, SPARKPAIR_API_KEY_FILE="/run/secrets/k")
    assert "THE-SECRET" not in line and "one source for the key" in line, line
    line = bad_line("VLLM_API_KEY", key)
    assert "THE-SECRET" not in line and "SPARKPAIR_API_KEY_FILE" in line, line
    assert "not an absolute path" in bad_line("SPARKPAIR_API_KEY_FILE", "keys/api-key")
    env = load_node_env(example() | {"SPARKPAIR_API_KEY": key})
    assert key not in repr(env) and key not in str(env)
    assert env.api_key_source()["SPARKPAIR_API_KEY"] == key


def test_a_long_bad_value_is_cut_in_the_message() -> None:
    values = example() | {"SPARKPAIR_NODE_NAME": "n" * 5000}
    msg = str(pytest.raises(NodeEnvError, load_node_env, values).value)
    assert "SPARKPAIR_NODE_NAME='" + "n" * 64 + "'... (5000 characters); wanted a short name" in msg
    assert len(msg) < 400, msg


def test_every_sparkpair_key_the_code_or_compose_reads_is_known_to_node_validate() -> None:
    import re
    import subprocess

    from sparkpair_cli.deploy.nodeenv_keys import known_keys

    repo = Path(__file__).resolve().parents[3]
    files = subprocess.run(
        ["git", "ls-files", "overlay", "healthchecks", "scripts/sparkpair_cli", "compose.yaml", "configs"],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    read = set()
    for f in files:
        # settings_registry.py is the table of every setting, image and tooling ones included (it reads none).
        if f.endswith((".py", ".yaml", ".example")) and not f.endswith("settings_registry.py"):
            read |= set(re.findall(r"SPARKPAIR_[A-Z0-9_]*[A-Z0-9]", (repo / f).read_text()))
    from sparkpair_overlay.envs import RENAMED

    read -= set(RENAMED)  # old names: refused naming the new name (node validate, overlay, gateway)
    assert read - known_keys() == set()


def test_node_validate_names_a_misspelt_key_and_the_one_meant(tmp_path: Path) -> None:
    from sparkpair_cli.deploy.nodeenv import parse_env_file
    from sparkpair_cli.deploy.nodeenv_keys import unknown_key_problems

    env = tmp_path / "node.env"
    env.write_text(
        (
            Path(__file__).resolve().parents[2] / "fixtures" / "hosts" / "spark-head-good" / "node.env"
        ).read_text()
        + "SPARKPAIR_NODE_RANKK=1\n"
    )
    (line,) = unknown_key_problems(parse_env_file(env), str(env))
    assert "SPARKPAIR_NODE_RANKK" in line and "did you mean SPARKPAIR_NODE_RANK?" in line, line


def test_node_validate_names_an_old_setting_name_its_value_and_the_new_name(tmp_path: Path) -> None:
    from sparkpair_cli.deploy.nodeenv import parse_env_file
    from sparkpair_cli.deploy.nodeenv_keys import unknown_key_problems

    env = tmp_path / "node.env"
    env.write_text(
        (
            Path(__file__).resolve().parents[2] / "fixtures" / "hosts" / "spark-head-good" / "node.env"
        ).read_text()
        + "SPARKPAIR_PLAN_FILE=/srv/plan.json\n"
    )
    (line,) = unknown_key_problems(parse_env_file(env), str(env))
    assert line.endswith(
        f"SPARKPAIR_PLAN_FILE='/srv/plan.json' in {env} is no longer read; wanted SPARKPAIR_PLAN_PATH "
        "(the same value, new name)"
    ), line


def _validate(env_file: Path | None, environ: dict[str, str]) -> tuple[int, str]:
    from sparkpair_cli.main import app
    from typer.testing import CliRunner

    args = ["node", "validate", "--no-host-paths"] + (["--env-file", str(env_file)] if env_file else [])
    r = CliRunner().invoke(app, args, env={"COLUMNS": "300", "SPARKPAIR_NODE_ENV": "", **environ})
    return r.exit_code, " ".join(r.output.split())


def _good(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "node-spark-a.env"
    hosts = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
    p.write_text((hosts / "spark-head-good" / "node.env").read_text() + extra)
    return p


def test_node_validate_names_a_key_no_container_receives(tmp_path: Path) -> None:
    assert _validate(_good(tmp_path, "NCCL_DEBUG=INFO\n"), {})[0] == 0  # compose passes it
    code, text = _validate(_good(tmp_path, "HF_TOKEN=hf_x\n"), {})
    assert code == 2 and "HF_TOKEN in " in text and "is not passed to the containers" in text, text


def test_the_keys_compose_fixes_are_the_ones_compose_yaml_sets_over_the_env_file() -> None:
    """Every setting of compose.yaml's x-settings that a service's environment sets to a value of
    its own (not the env file's ``${KEY...}``) is in COMPOSE_FIXED_KEYS, with that value."""
    import yaml
    from sparkpair_cli.deploy.nodeenv_keys import COMPOSE_FIXED_KEYS

    doc = yaml.safe_load((Path(__file__).resolve().parents[3] / "compose.yaml").read_text())
    settings = set(doc["x-settings"])
    fixed: dict[str, str] = {}
    services = doc["services"].values()
    for env in [doc["x-node"]["environment"], *(s.get("environment") or {} for s in services)]:
        for k, v in env.items():
            if k in settings and v is not None and not str(v).startswith("${" + k):
                fixed[k] = str(v)
    assert fixed == COMPOSE_FIXED_KEYS


def test_node_validate_names_a_setting_compose_fixes_over_the_file(tmp_path: Path) -> None:
    code, text = _validate(_good(tmp_path, "SPARKPAIR_PLAN_PATH=/tmp/my-plan.json\n"), {})
    assert code == 2, text
    assert (
        "node spark-a: SPARKPAIR_PLAN_PATH='/tmp/my-plan.json' in " in text
        and "is ignored: compose.yaml gives the containers "
        "SPARKPAIR_PLAN_PATH=/var/lib/sparkpair/state/kernel-plan.json" in text
    ), text


def test_node_validate_names_a_shell_variable_compose_would_take_over_the_file(tmp_path: Path) -> None:
    code, text = _validate(_good(tmp_path), {"SPARKPAIR_NODE_NAME": "spark-b", "SPARKPAIR_ROUTER": "triton"})
    assert code == 2, text
    said = "is exported in this shell; docker compose would give it to the containers over"
    assert f"SPARKPAIR_NODE_NAME='spark-b' {said} 'spark-a' in" in text
    assert f"SPARKPAIR_ROUTER='triton' {said} nothing in" in text


def test_node_validate_reads_sparkpair_node_env_and_refuses_two_files(tmp_path: Path) -> None:
    good = _good(tmp_path)
    code, text = _validate(None, {"SPARKPAIR_NODE_ENV": str(good)})
    assert code == 0 and str(good) in text, text
    code, text = _validate(tmp_path / "other.env", {"SPARKPAIR_NODE_ENV": str(good)})
    assert (
        code == 2
        and "name two different node env files" in text
        and str(good) in text
        and "other.env" in text
    )


def test_node_validate_names_an_overlay_value_the_overlay_would_refuse(tmp_path: Path) -> None:
    # Said "valid" before: the value stopped every vLLM process of the node at start instead.
    code, text = _validate(_good(tmp_path, "SPARKPAIR_ROUTER=bogus\nSPARKPAIR_O_PROJ_RECIPE=1,2,3\n"), {})
    assert code == 2, text
    assert "node spark-a: SPARKPAIR_ROUTER='bogus' is not valid; wanted one of auto, triton, upstream" in text
    assert "SPARKPAIR_O_PROJ_RECIPE='1,2,3' is not valid; wanted auto, 1,1,128 or 1,128,128" in text
    assert _validate(_good(tmp_path, "SPARKPAIR_ROUTER=triton\n"), {})[0] == 0


def test_node_validate_names_a_gateway_value_the_health_service_would_refuse(tmp_path: Path) -> None:
    # Said "valid" before: the head's health service exited at start on it instead.
    bad = "SPARKPAIR_CANARY_TIMEOUT_S=abc\nSPARKPAIR_ONLY=chat,bogus\n"
    code, text = _validate(_good(tmp_path, bad), {})
    assert code == 2, text
    said = "node spark-a: the health gateway would refuse "
    assert f"{said}SPARKPAIR_CANARY_TIMEOUT_S='abc': Input should be a valid number" in text, text
    assert f"{said}SPARKPAIR_ONLY='chat,bogus': no such check ['bogus']" in text, text
    assert text.count(said) == 2, "one line per setting"
    good = "SPARKPAIR_CANARY_TIMEOUT_S=20\nSPARKPAIR_ONLY=models,chat\n"
    assert _validate(_good(tmp_path, good), {})[0] == 0
    head = _good(tmp_path).read_text()
    # rank 0 written as 00 is the head, as the node reads it
    as_00 = head.replace("SPARKPAIR_NODE_RANK=0", "SPARKPAIR_NODE_RANK=00") + bad
    assert said in _validate(_write(tmp_path, as_00), {})[1]
    worker = head.replace("SPARKPAIR_NODE_RANK=0", "SPARKPAIR_NODE_RANK=1") + bad
    assert "health gateway" not in _validate(_write(tmp_path, worker), {})[1]
    # another problem of the file (an old name, a key in the wrong case) hides none of these
    for extra in ("SPARKPAIR_PLAN_FILE=/x\n", "Sparkpair_Canary_Timeout_S=5\n"):
        code, text = _validate(_good(tmp_path, bad + extra), {})
        assert code == 2 and f"{said}SPARKPAIR_CANARY_TIMEOUT_S='abc'" in text, (extra, text)
        assert "refuse SPARKPAIR_PLAN_FILE" not in text, text


def test_node_validate_names_gateway_settings_the_health_entrypoint_overrides(tmp_path: Path) -> None:
    code, text = _validate(_good(tmp_path, "SPARKPAIR_PORT=abc\nSPARKPAIR_REPORT_JSON=/etc\n"), {})
    assert code == 2, text
    assert "SPARKPAIR_PORT='abc' in " in text and "gives the gateway --port over it" in text, text
    assert "SPARKPAIR_REPORT_JSON='/etc' in " in text and "gives the gateway --report-json" in text, text
    assert "health gateway would refuse" not in text, text


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "node-other.env"
    p.write_text(text)
    return p
