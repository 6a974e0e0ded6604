# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""The real compose.yaml, run as a two-node cluster on one Docker engine (compose.sim.yaml):
head and worker in two containers with their own addresses, the cluster forms, vLLM serves
the tiny model with TP=2 across the containers on CPU, and the `health` container turns
healthy only after the functional suite passed, with the head's kernel plan in its report
(compose's shared ``sparkpair-state`` volume, the gateway's ``SPARKPAIR_PLAN_FILE``).

The executor is vLLM's multi-node ``mp`` (the only one: Ray was removed).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from dockerlib import REPO, sh

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]

SUBNET, HEAD_IP, WORKER_IP, HEALTH_IP = "172.31.77.0/24", "172.31.77.11", "172.31.77.12", "172.31.77.13"
WAIVE = "rdma-devices,gid-index,driver,memory,probe"
"""Preflight checks a CPU container cannot pass (no RDMA device, no NVIDIA driver, and a
unified-memory budget that means nothing on CPU), and the kernel probe (needs a CUDA
device; it exits 2 here). Everything else runs for real."""


def _require_registered() -> None:
    from sparkpair_cli import main

    missing = [
        m for m in ("sparkpair_cli.cmd_node", "sparkpair_cli.cmd_preflight") if m not in main.COMMAND_MODULES
    ]
    if missing:
        pytest.skip(
            f"{missing} not in sparkpair_cli.main.COMMAND_MODULES: the image's entrypoint has no `node`"
        )


def engine_limit(name: str) -> int:
    """The engine's hard limit ``name`` (from /proc/<dockerd>/limits); -1 for unlimited."""
    pid = sh("pgrep", "-xo", "dockerd").stdout.split()[0]
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            hard = line[len(name) :].split()[1]
            return -1 if hard == "unlimited" else int(hard)
    raise AssertionError(f"no {name} in /proc/{pid}/limits")


def write_env(path: Path, *, name: str, rank: int, ip: str, image: str, cache: Path) -> Path:
    """A node env file made from configs/node.env.example, as an operator would fill it in."""
    values = {
        "SPARKPAIR_NODE_NAME": name, "SPARKPAIR_NODE_RANK": str(rank), "SPARKPAIR_FABRIC_CIDR": SUBNET,
        "VLLM_HOST_IP": ip, "SPARKPAIR_HEAD_ADDR": HEAD_IP, "SPARKPAIR_FABRIC_IFNAME": "eth0",
        # The API binds the node's own fabric address, so the health service (its own
        # container here, see compose.sim.yaml) reaches it as it would on the head's host network.
        "SPARKPAIR_API_HOST": ip,
        "SPARKPAIR_PROFILE": "tiny-pair", "SPARKPAIR_MODEL": "/models/tiny", "SPARKPAIR_JOIN_TIMEOUT_S": "600",
        "SPARKPAIR_PREFLIGHT_WAIVE": WAIVE, "SPARKPAIR_IMAGE": image, "SPARKPAIR_MODEL_CACHE": str(cache),
    }  # fmt: skip
    lines = []
    for line in (REPO / "configs" / "node.env.example").read_text().splitlines():
        key = line.split("=", 1)[0]
        lines.append(f"{key}={values.pop(key)}" if key in values else line)
    assert not values, f"keys missing from node.env.example: {values}"
    path.write_text("\n".join(lines) + "\n")
    from sparkpair_cli.deploy.nodeenv import load_node_env_file

    load_node_env_file(path)  # the file the test uses passes the same validation an operator's does
    return path


@dataclass
class Sim:
    """One compose project: compose.yaml + tests/docker/compose.sim.yaml."""

    project: str
    head_env: Path
    worker_env: Path
    env: dict[str, str] = field(default_factory=dict)

    def compose(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        import os

        from compose_rules import compose_binary

        env = dict(os.environ) | self.env
        return sh(*compose_binary(), "-p", self.project, "--project-directory", str(REPO),
                  "-f", str(REPO / "compose.yaml"), "-f", str(REPO / "tests" / "docker" / "compose.sim.yaml"),
                  "--env-file", str(self.head_env), "--profile", "head", "--profile", "worker", "--profile", "health",
                  *args, timeout=timeout, check=check, env=env)  # fmt: skip

    def name(self, service: str) -> str:
        return f"{self.project}-{service}-1"

    def state(self, service: str) -> dict:
        r = sh("docker", "inspect", "-f", "{{json .State}}", self.name(service), check=False)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def health(self, service: str) -> str:
        st = self.state(service)
        return (st.get("Health") or {}).get("Status") or st.get("Status", "absent")

    def logs(self, service: str) -> str:
        r = sh("docker", "logs", self.name(service), check=False)
        return r.stdout + r.stderr

    def ip(self, service: str) -> str:
        r = sh(
            "docker",
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            self.name(service),
        )
        return r.stdout.strip()


@pytest.fixture
def sim_factory(sparkpair_image: str, model_cache: Path, tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    _require_registered()
    made: list[Sim] = []

    def make() -> Sim:
        head = write_env(tmp_path / "head.env", name="sim-head", rank=0, ip=HEAD_IP,
                         image=sparkpair_image, cache=model_cache)  # fmt: skip
        worker = write_env(tmp_path / "worker.env", name="sim-worker", rank=1, ip=WORKER_IP,
                           image=sparkpair_image, cache=model_cache)  # fmt: skip
        sim = Sim(f"spsim{uuid.uuid4().hex[:6]}", head, worker)
        sim.env = {
            "SIM_HEAD_ENV": str(head), "SIM_WORKER_ENV": str(worker), "SIM_SUBNET": SUBNET,
            "SIM_HEAD_IP": HEAD_IP, "SIM_WORKER_IP": WORKER_IP, "SIM_HEALTH_IP": HEALTH_IP,
            "SIM_MEMLOCK": str(engine_limit("Max locked memory")), "SIM_NOFILE": str(engine_limit("Max open files")),
        }  # fmt: skip
        made.append(sim)
        return sim

    yield make
    for sim in made:
        for svc in ("head", "worker", "health"):
            (tmp_path / f"{sim.project}-{svc}.log").write_text(sim.logs(svc))
        sim.compose("down", "-v", "-t", "10", check=False, timeout=300)


def wait_for(pred, timeout_s: float, what: str, sim: Sim, step: float = 3.0):  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        got = pred()
        if got:
            return got
        time.sleep(step)
    tails = "\n".join(
        f"--- {s} ({sim.health(s)}):\n{sim.logs(s)[-3000:]}" for s in ("head", "worker", "health")
    )
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s\n{tails}")


def test_mp_pair_serves_tp2_across_two_containers_and_health_turns_healthy_after_the_suite(
    sim_factory,
) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory()
    # Start order does not matter: the worker first, the head a little later.
    sim.compose("up", "-d", "--no-deps", "worker")
    time.sleep(5)
    sim.compose("up", "-d")
    assert sim.ip("head") == HEAD_IP and sim.ip("worker") == WORKER_IP

    seen: list[tuple[float, str, str, str]] = []
    t0 = time.monotonic()

    def health_healthy() -> bool:
        states = (sim.health("head"), sim.health("worker"), sim.health("health"))
        seen.append((time.monotonic() - t0, *states))
        for svc in ("head", "worker", "health"):
            st = sim.state(svc)
            if st.get("Status") == "exited" and st.get("ExitCode", 0) != 0 and svc != "health":
                raise AssertionError(f"{svc} exited {st.get('ExitCode')}:\n{sim.logs(svc)[-4000:]}")
        return states[2] == "healthy"

    wait_for(health_healthy, 1000, "health container healthy", sim)

    # The verdict came after the head was serving, never before.
    first_head = next(t for t, h, _w, _g in seen if h == "healthy")
    first_health = next(t for t, _h, _w, g in seen if g == "healthy")
    assert first_head <= first_health
    assert all(g != "healthy" for _t, h, _w, g in seen if h != "healthy")

    # The worker's own liveness check (process + connection to the head's store) passes.
    wait_for(lambda: sim.health("worker") == "healthy", 120, "worker healthy", sim)

    # vLLM really spans the two containers: multi-node flags on both, the headless engine on
    # the worker, and a real completion answered by the pair.
    head_log, worker_log = sim.logs("head"), sim.logs("worker")
    assert "--nnodes 2" in head_log and "--node-rank 0" in head_log
    assert "--headless" in worker_log and "--node-rank 1" in worker_log
    assert re.search(r"headless multiproc executor", worker_log), worker_log[-3000:]
    r = httpx.post(f"http://{HEAD_IP}:8000/v1/chat/completions", timeout=120,
                   json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8})  # fmt: skip
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] > 0

    # The gateway's verdict, as the health check sees it.
    r = sh("docker", "exec", sim.name("health"), "sparkpair", "node", "check", "--role", "health")
    assert "/readyz: HTTP 200" in r.stdout

    # The health report carries the head's kernel plan (not a skip): the head's overlay wrote
    # it to the shared state volume, the health service read it through SPARKPAIR_PLAN_FILE.
    head_plan = json.loads(
        sh("docker", "exec", sim.name("head"), "cat", "/var/lib/sparkpair/state/kernel-plan.json").stdout
    )
    assert head_plan["schema"] == "sparkpair-kernel-plan/1", head_plan
    report = json.loads(
        sh("docker", "exec", sim.name("health"), "cat", "/var/lib/sparkpair/reports/report.json").stdout
    )
    (check,) = [c for c in report["checks"] if c["id"] == "overlay_plan"]
    assert check["status"] == "pass", check
    assert report["overlay_plan"] == head_plan
    # The head's server output is on the same volume, for the health service to read.
    head_log_copy = sh(
        "docker", "exec", sim.name("health"), "cat", "/var/lib/sparkpair/state/head.log"
    ).stdout
    assert "sparkpair overlay plan:" in head_log_copy and "Application startup complete" in head_log_copy
    # Read-only for the health service: the plan is the head's to write.
    r = sh("docker", "exec", sim.name("health"), "touch", "/var/lib/sparkpair/state/x", check=False)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r.stderr
