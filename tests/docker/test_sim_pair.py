# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""The real compose.yaml, run as a two-node cluster on one Docker engine (compose.sim.yaml):
head and worker in two containers with their own addresses, the cluster forms, vLLM serves
the tiny model with TP=2 across the containers on CPU, and the `health` container turns
healthy only after the functional suite passed, with the head's kernel plan in its report
(compose's shared ``sparkpair-state`` volume, the gateway's ``SPARKPAIR_PLAN_PATH``).

The same pair (one bring-up for the module, the tests run in order) then shows what
docs/observability.md promises, with what a user adds to turn it on (:data:`OBSERVE`: the
Docker socket and the stability nodes for the ``health`` service, ``SPARKPAIR_RECOVERY``):

- a real Prometheus (the shipped config, pointed at the head's API and the gateway) scrapes
  the pair and a query returns the canary-latency series; the status page's screenshot in
  headless Chromium shows the green verdict;
- wedge recovery: the head's engine core is frozen (SIGSTOP: /health still answers, tokens
  stop), then killed (SIGKILL: the engine dies); each time the gateway restarts the pair in
  order and the verdict returns to ready; a third wedge finds the budget spent, and the pair
  stays down with a verdict naming the budget and the wedge, in /readyz, in Prometheus and
  on the status page.

The executor is vLLM's multi-node ``mp`` (the only one: Ray was removed).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import obslib
import pytest
from dockerlib import FABRIC_PREFIX, REPO, sh

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

NET = FABRIC_PREFIX["test_sim_pair"]
SUBNET, HEAD_IP, WORKER_IP, HEALTH_IP = NET + "0/24", NET + "11", NET + "12", NET + "13"
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
    extra: list[Path] = field(default_factory=list)
    """More override files after compose.sim.yaml (a test's own additions)."""
    seen: list[tuple[float, str, str, str]] = field(default_factory=list)

    def compose(
        self, *args: str, node: str = "all", timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``docker compose <args>`` as the node runs it on its own machine: ``worker`` with its
        env file and profile, ``head`` with its own and ``head`` + ``health``; ``all`` (for
        ``down``) with the head's file and every profile."""
        import os

        from compose_rules import compose_binary

        env = dict(os.environ) | self.env
        files = ["-f", str(REPO / "compose.yaml"), "-f", str(REPO / "tests" / "docker" / "compose.sim.yaml")]
        for f in self.extra:
            files += ["-f", str(f)]
        env_file, profiles = {
            "worker": (self.worker_env, ["worker"]),
            "head": (self.head_env, ["head", "health"]),
            "all": (self.head_env, ["head", "worker", "health"]),
        }[node]
        prof = [x for p in profiles for x in ("--profile", p)]
        return sh(*compose_binary(), "-p", self.project, "--project-directory", str(REPO), *files,
                  "--env-file", str(env_file), *prof, *args, timeout=timeout, check=check, env=env)  # fmt: skip

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


def new_sim(image: str, cache: Path, workdir: Path) -> Sim:
    """A simulation project with its two node env files under ``workdir``."""
    head = write_env(workdir / "head.env", name="sim-head", rank=0, ip=HEAD_IP, image=image, cache=cache)
    worker = write_env(
        workdir / "worker.env", name="sim-worker", rank=1, ip=WORKER_IP, image=image, cache=cache
    )
    sim = Sim(f"spsim{uuid.uuid4().hex[:6]}", head, worker)
    sim.env = {
        "SIM_SUBNET": SUBNET,
        "SIM_HEAD_IP": HEAD_IP, "SIM_WORKER_IP": WORKER_IP, "SIM_HEALTH_IP": HEALTH_IP,
        "SIM_MEMLOCK": str(engine_limit("Max locked memory")), "SIM_NOFILE": str(engine_limit("Max open files")),
    }  # fmt: skip
    return sim


def tear_down(sim: Sim, logs: Path) -> None:
    """Keep each service's log under ``logs``, then remove the project (volumes included)."""
    for svc in ("head", "worker", "health"):
        (logs / f"{sim.project}-{svc}.log").write_text(sim.logs(svc))
    sim.compose("down", "-v", "-t", "10", check=False, timeout=300)


@pytest.fixture
def sim_factory(sparkpair_image: str, model_cache: Path, tmp_path: Path) -> Iterator:  # type: ignore[type-arg]
    _require_registered()
    made: list[Sim] = []

    def make() -> Sim:
        made.append(new_sim(sparkpair_image, model_cache, tmp_path))
        return made[-1]

    yield make
    for sim in made:
        tear_down(sim, tmp_path)


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


CANARY_INTERVAL_S, CANARY_TIMEOUT_S = 5.0, 10.0
MAX_RESTARTS, AFTER_FAILURES = 2, 2


def observe_override(sim: Sim, path: Path) -> Path:
    """What a user adds to turn on the stability watch and wedge recovery (docs/observability.md),
    plus the sim's own: a short canary and stability interval, and the gateway bound to every
    address of its container so Prometheus on this host reaches it (on a Spark it shares the
    head's host network)."""
    nodes = {"nodes": [{"name": "head", "containers": [sim.name("head")]},
                       {"name": "worker", "containers": [sim.name("worker")]}]}  # fmt: skip
    env = {
        "SPARKPAIR_HOST": "0.0.0.0",
        "SPARKPAIR_CANARY_INTERVAL_S": f"{CANARY_INTERVAL_S:g}",
        "SPARKPAIR_CANARY_TIMEOUT_S": f"{CANARY_TIMEOUT_S:g}",
        "SPARKPAIR_STABILITY": json.dumps(nodes),
        "SPARKPAIR_STABILITY_INTERVAL_S": "5",
        "SPARKPAIR_RECOVERY": "true",
        "SPARKPAIR_RECOVERY_MAX_RESTARTS": str(MAX_RESTARTS),
        "SPARKPAIR_RECOVERY_AFTER_FAILURES": str(AFTER_FAILURES),
        "SPARKPAIR_RECOVERY_STOP_TIMEOUT_S": "5",
    }
    lines = ["services:", "  health:", "    volumes:", "      - /var/run/docker.sock:/var/run/docker.sock",
             "    environment:"] + [f"      {k}: '{v}'" for k, v in env.items()]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def pair(sparkpair_image: str, model_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    """The module's pair, brought up once: worker first, the head a little later (start order
    must not matter); yields once the ``health`` container is healthy, with ``sim.seen``: the
    (seconds, head, worker, health) states polled on the way."""
    _require_registered()
    work = tmp_path_factory.mktemp("sim-pair")
    sim = new_sim(sparkpair_image, model_cache, work)
    sim.extra = [observe_override(sim, work / "compose.observe.yaml")]
    try:
        sim.compose("up", "-d", node="worker")
        time.sleep(5)
        sim.compose("up", "-d", node="head")
        assert sim.ip("head") == HEAD_IP and sim.ip("worker") == WORKER_IP
        t0 = time.monotonic()

        def health_healthy() -> bool:
            states = (sim.health("head"), sim.health("worker"), sim.health("health"))
            sim.seen.append((time.monotonic() - t0, *states))
            for svc in ("head", "worker", "health"):
                st = sim.state(svc)
                if st.get("Status") == "exited" and st.get("ExitCode", 0) != 0 and svc != "health":
                    raise AssertionError(f"{svc} exited {st.get('ExitCode')}:\n{sim.logs(svc)[-4000:]}")
            return states[2] == "healthy"

        wait_for(health_healthy, 1000, "health container healthy", sim)
        yield sim
    finally:
        tear_down(sim, work)


def test_mp_pair_serves_tp2_across_two_containers_and_health_turns_healthy_after_the_suite(
    pair: Sim,
) -> None:
    sim, seen = pair, pair.seen
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
    # it to the shared state volume, the health service read it through SPARKPAIR_PLAN_PATH.
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


GATEWAY = f"http://{HEALTH_IP}:8080"
"""The health service's gateway, reached from this host on the sim fabric (:func:`observe_override`)."""


def readyz() -> dict:  # type: ignore[type-arg]
    try:
        r = httpx.get(GATEWAY + "/readyz", timeout=5)
        return {"status": r.status_code, "body": r.json()}
    except (httpx.HTTPError, ValueError) as e:
        return {"status": None, "body": {"error": f"{type(e).__name__}: {e}"}}


@pytest.fixture(scope="module")
def prom(pair: Sim, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Prometheus on this host, the shipped config pointed at the pair (1 s scrapes)."""
    with obslib.prometheus(
        f"{HEAD_IP}:8000", f"{HEALTH_IP}:8080", tmp_path_factory.mktemp("prom-sim")
    ) as url:
        yield url


def test_prometheus_scrapes_the_pair_and_the_status_page_shows_it_ready(
    pair: Sim, prom: str, tmp_path: Path
) -> None:
    from sparkpair_health.gateway.status import COLOURS

    n = wait_for(
        lambda: obslib.value(prom, "sparkpair_canary_latency_seconds_count"),
        90,
        "canary latency in Prometheus",
        pair,
        step=1,
    )
    assert n >= 1
    # Each target's health is 'unknown' until its first scrape: wait for both, not just one.
    both_up = [("sparkpair-gateway", "up"), ("vllm", "up")]
    wait_for(lambda: obslib.targets(prom) == both_up, 30, "both targets scraped", pair, step=1)
    assert (obslib.value(prom, "vllm:generation_tokens_total") or 0) > 0
    assert obslib.value(prom, "sparkpair_ready") == 1.0
    # Both nodes' containers, through the gateway's stability look (the worker serves no HTTP).
    restarts = obslib.query(prom, "sparkpair_container_restart_count")["data"]["result"]
    assert sorted(r["metric"]["node"] for r in restarts) == ["head", "worker"], restarts
    img = obslib.screenshot(GATEWAY + "/status", tmp_path / "status-ready.png")
    assert (
        obslib.badge_pixels(img, COLOURS["ready"]) > 5000 and obslib.badge_pixels(img, COLOURS["fail"]) == 0
    )


PLANTED_KEY, PLANTED_SYNC = "sk-simplanted-Rt5Yu7Io9Pa2", "sync-simplanted-Gh4Jk6Lz8X"


def test_the_owners_report_of_the_pair_has_every_section_and_nothing_planted(
    pair: Sim, tmp_path: Path
) -> None:
    """``sparkpair report`` pointed at the pair (both containers on this engine, the head's API, the
    gateway) writes one page the browser renders with every section, in bounded time; an API key and a
    sync token written into both containers' logs and a private host (the head's address: in its env,
    its log and the URLs) appear nowhere in it. About 1-2 minutes."""
    sim = pair
    for svc in ("head", "worker"):  # into the container's own log, as a process in it would print them;
        # a line the log scanner reports as a warning (not fatal: the gateway's own watch reads it too),
        # so its sample carries the planted values into the report's stability section
        line = (
            "Triton kernel JIT compilation during inference: planted Authorization: Bearer "
            f"{PLANTED_KEY} SPARKPAIR_SYNC_TOKEN={PLANTED_SYNC} host {HEAD_IP}"
        )
        sh("docker", "exec", sim.name(svc), "sh", "-c", f"echo '{line}' > /proc/1/fd/1")
    out = tmp_path / "report.html"
    env = {**os.environ, "SPARKPAIR_API_KEY": PLANTED_KEY, "SPARKPAIR_SYNC_TOKEN": PLANTED_SYNC}
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.main", "report", "--node", f"head={sim.name('head')}",
         "--node", f"worker={sim.name('worker')}", "--base-url", f"http://{HEAD_IP}:8000", "--gateway", GATEWAY,
         "--private-host", HEAD_IP, "--window", "5", "--time-limit", "60", "--node-timeout", "120",
         "--out", str(out)],
        capture_output=True, text=True, timeout=420, env=env,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    print(f"sparkpair report took {took:.0f} s: {r.stdout.strip()}")
    assert took < 300, f"the report took {took:.0f} s; its bounds say node-timeout + time-limit + a minute"
    page = out.read_text()
    from sparkpair_serving.apikey import spellings

    assert not [s for x in (PLANTED_KEY, PLANTED_SYNC) for s in spellings(x) if len(s) >= 8 and s in page]
    assert HEAD_IP not in page
    states = obslib.report_sections(obslib.rendered_dom(out.as_uri()))
    from sparkpair_cli.report.html import read_report_data
    from sparkpair_cli.report.model import NO_CUDA, SECTIONS

    assert list(states) == [sid for sid, _ in SECTIONS], states
    secs = {s["id"]: s for s in read_report_data(out)["sections"]}
    # Both nodes read: the image and the vLLM inside it, the same image on both.
    img = {n["node"]: n for n in secs["image"]["data"]["nodes"]}
    assert set(img) == {"head", "worker"} and img["head"]["vllm"] and secs["image"]["data"]["same_image"]
    assert img["head"]["cuda_device"] == NO_CUDA
    # The GPU sections name the missing device; the env is there; preflight ran on both and compared.
    assert secs["gpu"]["state"] == "empty" and all(NO_CUDA in w for w in secs["gpu"]["why"])
    assert set(secs["env"]["data"]["nodes"]) == {"head", "worker"}
    assert (
        set(secs["preflight"]["data"]["nodes"]) == {"head", "worker"} and secs["preflight"]["data"]["compare"]
    )
    # The head's plan: its file and the line its vLLM processes logged.
    kern = secs["kernels"]["data"]["nodes"]["head"]
    assert kern["plan"]["schema"] == "sparkpair-kernel-plan/1" and kern["plan_lines"]
    # The gateway's verdict with every check's evidence, the accuracy set asked, the stability watch.
    health = secs["health"]["data"]
    assert health["readyz"]["status"] == 200 and health["report"]["body"]["checks"]
    assert secs["accuracy"]["data"]["asked"] >= 1
    assert secs["stability"]["data"]["status"] in ("pass", "fail") and secs["stability"]["data"]["containers"]
    # The planted values reached the report (the stability section's samples, the env) and were removed.
    stab = json.dumps(secs["stability"]["data"])
    for mark in ("<redacted-api-key>", "<redacted-token>", "<private-host>"):
        assert mark in stab, stab[:3000]
    assert "<private-host>" in json.dumps(secs["env"]["data"])


def engine_core_pid(sim: Sim) -> str:
    """The host PID of the head's vLLM engine core (its process title names it)."""
    out = sh("docker", "top", sim.name("head"), "-eo", "pid,args").stdout
    pids = [ln.split()[0] for ln in out.splitlines()[1:] if "EngineCore" in ln]
    assert len(pids) == 1, f"wanted one EngineCore process in {sim.name('head')}:\n{out}"
    return pids[0]


def started_at(sim: Sim, service: str) -> str:
    return str(sim.state(service).get("StartedAt"))


def recovery_lines(sim: Sim) -> list[str]:
    return [ln for ln in sim.logs("health").splitlines() if "sparkpair gateway: recovery:" in ln]


def test_a_frozen_then_a_killed_engine_is_restarted_and_a_third_wedge_leaves_the_pair_down(
    pair: Sim, prom: str, tmp_path: Path
) -> None:
    from sparkpair_health.gateway.status import COLOURS

    sim = pair
    wait_for(lambda: readyz()["status"] == 200, 120, "/readyz 200 before the first wedge", sim)
    tick = CANARY_INTERVAL_S + CANARY_TIMEOUT_S

    def wedge_then_back(signal: str, n: int) -> str:
        """Send ``signal`` to the head's engine core; the gateway restarts the pair (its ``n``-th
        restart) and the verdict returns to 200. Returns the restart's log line."""
        head0, worker0 = started_at(sim, "head"), started_at(sim, "worker")
        sh("kill", f"-{signal}", engine_core_pid(sim))
        t0 = time.monotonic()
        if signal == "STOP":  # the field's wedge: the engine stopped, /health still answers
            assert httpx.get(f"http://{HEAD_IP}:8000/health", timeout=5).status_code == 200
        restarts = wait_for(
            lambda: (r := [ln for ln in recovery_lines(sim) if "restarted the pair" in ln])[n - 1 :] and r,
            AFTER_FAILURES * tick + 180, f"restart {n} by wedge recovery", sim, step=1,
        )  # fmt: skip
        line = restarts[n - 1]
        assert (
            f"stop head/{sim.name('head')}; restart worker/{sim.name('worker')}; start head/{sim.name('head')}"
            in line
        )
        assert started_at(sim, "head") != head0 and started_at(sim, "worker") != worker0
        wait_for(lambda: readyz()["status"] == 200, 900, f"/readyz 200 again after {signal}", sim)
        print(f"SIG{signal}: ready again {time.monotonic() - t0:.0f} s later; {line}")
        return line

    frozen = wedge_then_back("STOP", 1)
    assert f"{AFTER_FAILURES} canaries failed in a row" in frozen, frozen
    assert any("the pair serves again" in ln for ln in recovery_lines(sim))
    killed = wedge_then_back("KILL", 2)
    assert "engine dead" in killed or "canaries failed in a row" in killed, killed
    wait_for(
        lambda: obslib.value(prom, "sparkpair_recovery_restarts_total") == 2.0,
        60,
        "2 restarts in Prometheus",
        sim,
        step=1,
    )

    # The third wedge finds the budget spent: no restart, 503 naming the budget and the wedge.
    head2 = started_at(sim, "head")
    sh("kill", "-STOP", engine_core_pid(sim))
    body = wait_for(
        lambda: (r := readyz())["body"].get("failing_check") == "recovery" and "recovery stopped" in r["body"].get("cause", "") and r["body"],
        AFTER_FAILURES * tick + 60, "recovery exhausted", sim, step=1,
    )  # fmt: skip
    assert f"{MAX_RESTARTS} restart(s) within recovery_window_s=3600 s" in body["cause"], body
    assert "canaries failed in a row" in body["cause"], body
    time.sleep(2 * tick)  # the pair stays down: nothing restarts it, the verdict stays
    got = readyz()
    assert got["status"] == 503 and got["body"]["failing_check"] == "recovery", got
    assert started_at(sim, "head") == head2
    assert len([ln for ln in recovery_lines(sim) if "restarted the pair" in ln]) == MAX_RESTARTS
    assert any("recovery stopped" in ln for ln in recovery_lines(sim)), recovery_lines(sim)
    wait_for(
        lambda: obslib.value(prom, "sparkpair_recovery_exhausted") == 1.0,
        60,
        "exhausted in Prometheus",
        sim,
        step=1,
    )
    assert obslib.value(prom, "sparkpair_ready") == 0.0
    html = httpx.get(GATEWAY + "/status", timeout=10).text
    assert "recovery stopped" in html
    img = obslib.screenshot(GATEWAY + "/status", tmp_path / "status-exhausted.png")
    assert (
        obslib.badge_pixels(img, COLOURS["fail"]) > 5000 and obslib.badge_pixels(img, COLOURS["ready"]) == 0
    )
