# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""Pause, freeze, then kill the worker of the two-container pair: the verdict names it and how,
and the pair comes back.

The real compose.yaml plus the simulation override (tests/docker/compose.sim.yaml), brought
up as tests/docker/test_sim_pair.py does, plus one more override written by this test: the
``health`` service gets the peer evidence a simulation can have (docs/health-verdict.md,
"A dead peer is named"): the worker's name, address and container in ``SPARKPAIR_PEERS``
and the Docker socket, read-only, for its container state. (On two real boxes the evidence
is the head's log on the shared state volume and a TCP probe; the log lines are pinned by
tests/unit/health/test_gateway_peers.py against a real head log.)

The worker "dies" as a node does: its container's init process is SIGKILLed from the host
(exit 137, which compose's ``restart: on-failure`` restarts, unlike ``docker kill``/``stop``).

First the worker is paused (``docker pause``: its container stays "running", ``State.Paused``)
and then frozen (every process of it stopped with SIGSTOP, as a hung box is): each time
``/readyz`` answers 503 naming the worker and its state (``paused``, ``frozen``) within one
canary interval plus the canary's deadline plus 5 s of polling slack
(:func:`sparkpair_health.gateway.canary.verdict_bound_s`), and after ``docker unpause`` /
SIGCONT it is 200 again within the same bound, with neither container restarted.

Then the kill. Bars: ``/readyz`` answers 503 within one canary interval (plus the canary's
deadline and the time one ``docker exec`` poll takes) with the worker's name in the cause;
then the pair comes back under the restart policy and ``/readyz`` is 200 again. The second
half needs the head to exit non-zero when its peer dies (the node entrypoint's part); without
that it fails here at "head restarted".
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from dockerlib import FABRIC_PREFIX, sh
from sparkpair_health.gateway.canary import POLL_SLACK_S  # one docker exec poll of /readyz and scheduling
from test_sim_pair import WORKER_IP, Sim, sim_factory, wait_for  # noqa: F401  (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

CANARY_INTERVAL_S = 5.0
CANARY_TIMEOUT_S = 10.0

SIM_NET, OWN_NET = FABRIC_PREFIX["test_sim_pair"], FABRIC_PREFIX["test_peer_death"]
"""test_sim_pair.py's fabric prefix, and this test's."""

READYZ = (
    "import json, httpx; r = httpx.get('http://127.0.0.1:8080/readyz', timeout=5); "
    "print(json.dumps({'status': r.status_code, 'body': r.json()}))"
)


def readyz(sim: Sim) -> dict:
    r = sh("docker", "exec", sim.name("health"), "python3", "-c", READYZ, check=False, timeout=30)
    if r.returncode != 0:
        return {"status": None, "body": {"error": (r.stdout + r.stderr)[-300:]}}
    return json.loads(r.stdout.strip().splitlines()[-1])


def lives(sim: Sim) -> list[tuple[str, str]]:
    """(RestartCount, StartedAt) of head and worker: equal before and after means no restart."""
    out = []
    for svc in ("head", "worker"):
        st = sh("docker", "inspect", "-f", "{{.RestartCount}} {{.State.StartedAt}}", sim.name(svc)).stdout
        out.append(tuple(st.split()))
    return out


def signal_all(sim: Sim, service: str, sig: signal.Signals) -> int:
    """Send ``sig`` to every process of ``service``'s container (host PIDs from ``docker top``)."""
    out = sh("docker", "top", sim.name(service), "-eo", "pid").stdout.split()[1:]
    for pid in out:
        sh("kill", f"-{sig.name.removeprefix('SIG')}", pid, check=False)
    return len(out)


def named_within(sim: Sim, state: str, bound: float) -> tuple[float, dict]:
    """Poll /readyz until it is 503 naming the worker ``state``; (seconds taken, body)."""
    t0 = time.monotonic()
    seen: list[tuple[float, dict]] = []
    while True:
        got = readyz(sim)
        seen.append((time.monotonic() - t0, got))
        body = got["body"]
        if (
            got["status"] == 503
            and "'sim-worker'" in body.get("cause", "")
            and f"is {state}" in body["cause"]
        ):
            return time.monotonic() - t0, body
        assert time.monotonic() - t0 < bound, (
            f"/readyz did not name the worker {state} within {bound:.0f} s: {seen[-3:]}"
        )
        time.sleep(0.5)


def ready_within(sim: Sim, bound: float, what: str) -> float:
    t0 = time.monotonic()
    while readyz(sim)["status"] != 200:
        assert time.monotonic() - t0 < bound, f"/readyz not 200 within {bound:.0f} s after {what}"
        time.sleep(0.5)
    return time.monotonic() - t0


def test_killing_the_worker_names_it_in_readyz_within_one_canary_interval_and_the_pair_comes_back(
    sim_factory,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:  # type: ignore[no-untyped-def]
    base = sim_factory()
    # A fabric subnet of its own, so this runs beside test_sim_pair.py on one engine.
    for f in (base.head_env, base.worker_env):
        f.write_text(f.read_text().replace(SIM_NET, OWN_NET))
    base.env = {k: v.replace(SIM_NET, OWN_NET) for k, v in base.env.items()}
    sim = base
    worker_ip = WORKER_IP.replace(SIM_NET, OWN_NET)
    peers = [{"name": "sim-worker", "address": worker_ip, "container": sim.name("worker")}]
    extra = tmp_path / "compose.peer.yaml"
    sim.extra = [extra]
    extra.write_text(
        "services:\n"
        "  health:\n"
        "    volumes:\n"
        "      - /var/run/docker.sock:/var/run/docker.sock:ro\n"
        "    environment:\n"
        f"      SPARKPAIR_PEERS: '{json.dumps(peers)}'\n"
        f"      SPARKPAIR_CANARY_INTERVAL_S: '{CANARY_INTERVAL_S:g}'\n"
        f"      SPARKPAIR_CANARY_TIMEOUT_S: '{CANARY_TIMEOUT_S:g}'\n"
    )
    sim.compose("up", "-d", node="worker")
    time.sleep(5)
    sim.compose("up", "-d", node="head")
    wait_for(lambda: readyz(sim)["status"] == 200, 1200, "/readyz 200 before the pause", sim)
    bound = CANARY_INTERVAL_S + CANARY_TIMEOUT_S + POLL_SLACK_S

    # Paused: Docker says the worker runs (State.Running) and is paused (State.Paused).
    before = lives(sim)
    sh("docker", "pause", sim.name("worker"))
    try:
        took, body = named_within(sim, "paused", bound)
    finally:
        sh("docker", "unpause", sim.name("worker"))
    print(f"paused: /readyz 503 naming it after {took:.1f} s: {body['cause'][:200]}")
    assert body["failing_check"] == "peer" and body["peer_down"]["state"] == "paused", body
    back = ready_within(sim, bound, "docker unpause")
    assert lives(sim) == before, "unpaused: ready again with no restart"
    print(f"unpaused: /readyz 200 after {back:.1f} s, no restart")

    # Frozen: every process of the worker stopped (SIGSTOP), the container still running.
    n = signal_all(sim, "worker", signal.SIGSTOP)
    try:
        took, body = named_within(sim, "frozen", bound)
    finally:
        signal_all(sim, "worker", signal.SIGCONT)
    print(f"frozen ({n} processes): /readyz 503 naming it after {took:.1f} s: {body['cause'][:200]}")
    assert body["peer_down"]["state"] == "frozen", body
    back = ready_within(sim, bound, "SIGCONT")
    assert lives(sim) == before, "thawed: ready again with no restart"
    print(f"thawed: /readyz 200 after {back:.1f} s, no restart")

    head_restarts = int(sh("docker", "inspect", "-f", "{{.RestartCount}}", sim.name("head")).stdout.strip())

    pid = sh("docker", "inspect", "-f", "{{.State.Pid}}", sim.name("worker")).stdout.strip()
    sh("kill", "-KILL", pid)  # the worker container's init: the node is gone
    t_kill = time.monotonic()
    seen: list[tuple[float, dict]] = []
    while True:
        got = readyz(sim)
        seen.append((time.monotonic() - t_kill, got))
        if got["status"] == 503:
            break
        assert time.monotonic() - t_kill < bound, f"/readyz still 200 after {bound:.0f} s: {seen}"
        time.sleep(0.5)
    waited = time.monotonic() - t_kill
    # The first 503 may still name only the canary; the next tick adds the evidence.
    t_end = time.monotonic() + CANARY_INTERVAL_S + CANARY_TIMEOUT_S
    body = seen[-1][1]["body"]
    while "sim-worker" not in json.dumps(body) and time.monotonic() < t_end:
        time.sleep(1.0)
        body = readyz(sim)["body"]
    print(f"/readyz 503 {waited:.1f} s after the worker was killed: {body}")
    assert body["failing_check"] == "peer", body
    assert "'sim-worker'" in body["cause"] and worker_ip in body["cause"], body["cause"]
    assert body["peer_down"]["name"] == "sim-worker"

    # The pair comes back under the restart policy: the worker restarts (exit 137 is a
    # failure), the head exits non-zero once its peer is gone and restarts too, they form
    # the pair again and the verdict turns ready.
    wait_for(
        lambda: (
            int(sh("docker", "inspect", "-f", "{{.RestartCount}}", sim.name("worker")).stdout.strip()) >= 1
        ),
        300,
        "worker restarted by compose",
        sim,
    )
    wait_for(
        lambda: (
            int(sh("docker", "inspect", "-f", "{{.RestartCount}}", sim.name("head")).stdout.strip())
            > head_restarts
        ),
        600,
        "head restarted by compose (it must exit non-zero when its peer dies)",
        sim,
    )
    wait_for(lambda: readyz(sim)["status"] == 200, 1500, "/readyz 200 again after the restart", sim)
