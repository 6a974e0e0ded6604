# ruff: noqa: E501
"""The simulation override changes only what a CPU-only CI engine cannot have: the docker
tier therefore runs the real compose.yaml."""

from __future__ import annotations

from pathlib import Path

import compose_rules as cr

REPO = Path(__file__).resolve().parents[3]
ALLOWED = {
    "head": {"network_mode", "networks", "ipc", "devices", "deploy", "healthcheck", "ulimits"},
    "worker": {
        "network_mode",
        "networks",
        "ipc",
        "devices",
        "deploy",
        "healthcheck",
        "ulimits",
    },
    # Host networking becomes an address on the simulated fabric, as for the nodes.
    "health": {"network_mode", "networks", "healthcheck", "ulimits"},
}


def _env(tmp: Path, name: str, rank: str, ip: str) -> Path:
    text = (REPO / "configs" / "node.env.example").read_text()
    text = text.replace("SPARKPAIR_NODE_NAME=spark-a", f"SPARKPAIR_NODE_NAME={name}")
    text = text.replace("SPARKPAIR_NODE_RANK=0", f"SPARKPAIR_NODE_RANK={rank}")
    text = text.replace("VLLM_HOST_IP=192.168.177.11", f"VLLM_HOST_IP={ip}")
    text = text.replace("SPARKPAIR_MODEL_CACHE=/srv/sparkpair/models", f"SPARKPAIR_MODEL_CACHE={tmp}")
    p = tmp / f"{name}.env"
    p.write_text(text)
    return p


def test_the_simulation_differs_from_compose_yaml_only_where_ci_lacks_hardware(tmp_path: Path) -> None:
    head = _env(tmp_path, "sim-head", "0", "192.168.177.11")
    worker = _env(tmp_path, "sim-worker", "1", "192.168.177.12")
    sim_env = {"SIM_MEMLOCK": "8388608", "SIM_NOFILE": "20000"}
    sim_file = [REPO / "tests" / "docker" / "compose.sim.yaml"]
    real, sim = {}, {}
    # each node renders with its own env file, as `docker compose` runs on each machine
    for env, profiles in ((head, ("head", "health")), (worker, ("worker",))):
        real |= cr.render(REPO, env_file=env, profiles=profiles)["services"]
        sim |= cr.render(REPO, env_file=env, profiles=profiles, files=sim_file, extra_env=sim_env)["services"]
    for name, allowed in ALLOWED.items():
        a, b = real[name], sim[name]
        changed = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
        assert changed <= allowed, f"{name}: the override changes {sorted(changed - allowed)}"
        assert a["command"] == b["command"] and a["image"] == b["image"]
        assert a.get("healthcheck", {}).get("test") == b.get("healthcheck", {}).get("test")
        assert a.get("restart") == b.get("restart") and a.get("cap_add") == b.get("cap_add")
        assert a.get("volumes") == b.get("volumes")
        # the settings are compose.yaml's: the node's own env file, untouched by the simulation
        assert a["environment"] == b["environment"], name
    assert sim["worker"]["environment"]["SPARKPAIR_NODE_RANK"] == "1"
    assert sim["head"]["environment"]["SPARKPAIR_NODE_RANK"] == "0"
    # The start periods are the real ones; only the polling interval is shorter.
    for name in ("head", "worker", "health"):
        assert sim[name]["healthcheck"]["start_period"] == real[name]["healthcheck"]["start_period"]
    # The private IPC namespace gets compose.yaml's shm_size (B17).
    assert sim["head"]["shm_size"] == real["head"]["shm_size"]
    assert sim["head"]["ipc"] == "private" and real["head"]["ipc"] == "host"
