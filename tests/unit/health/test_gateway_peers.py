"""A peer that is down is named, with how, in /readyz and /report, from evidence the health
service can read.

The head-log evidence is the real log of a two-node ``mp`` TP=2 run on vLLM 0.32 CPU whose
worker was killed (tests/faults/logs/vllm032-cpu-mp-worker-killed-head.log): it is replayed
into a file the gateway reads, as the head writes its log to the shared state volume. The
TCP probe runs for real on loopback. The Docker evidence runs against a real engine
(``docker`` marker): a container paused, frozen (SIGSTOP), OOM-killed, restarting, restarted.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sparkpair_health.gateway import Gateway, GatewaySettings
from sparkpair_health.peers import PeerSettings, PeerWatch, parse_peers

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from dsv4_fault_server import Served  # noqa: E402
from health_fault_server import FaultServer  # noqa: E402
from readyz_poll import wait_readyz  # noqa: E402
from test_stability_docker import client, containers, sh_image  # noqa: E402, F401  (docker fixtures)

LOG = Path(__file__).resolve().parents[2] / "faults" / "logs" / "vllm032-cpu-mp-worker-killed-head.log"
LINES = LOG.read_text().splitlines(keepends=True)
SERVING = next(i for i, ln in enumerate(LINES) if '"POST /v1/completions HTTP/1.1" 200' in ln) + 1
"""The log up to the first answered request: the pair served; the worker dies after it."""


def test_the_real_head_log_names_the_killed_worker(tmp_path: Path) -> None:
    log = tmp_path / "head.log"
    log.write_text("".join(LINES[:SERVING]))
    w = PeerWatch(PeerSettings(peers=parse_peers("spark-b=127.0.0.1"), head_log=log))
    assert w.look() is None, "a serving pair's log names nobody"
    with log.open("a") as f:
        f.write("".join(LINES[SERVING:]))
    dead = w.look()
    assert dead is not None and (dead.name, dead.address, dead.source) == ("spark-b", "127.0.0.1", "head log")
    assert "Connection closed by peer [127.0.0.1]" in dead.evidence
    assert w.look() is dead, "named until the pair serves again"
    assert w.look(canary_ok=True) is None


def test_an_older_life_of_the_log_is_not_read_and_a_truncated_log_is_read_from_the_start(
    tmp_path: Path,
) -> None:
    log = tmp_path / "head.log"
    log.write_text("".join(LINES))  # a death from before the gateway started
    w = PeerWatch(PeerSettings(peers=parse_peers("spark-b=10.0.0.2"), head_log=log))
    assert w.look() is None
    log.write_text("".join(LINES[-40:]))  # the head restarted and truncated its log, then died again
    dead = w.look()
    assert dead is not None and dead.name == "spark-b", (
        "a pair's only peer is named whatever address gloo prints"
    )


def silent_port() -> tuple[int, list[socket.socket]]:
    """A loopback port whose SYNs go unanswered, as a powered-off peer's do: a listener with a
    full accept queue (listen(0) plus held connections) makes the kernel drop new SYNs."""
    lsn = socket.socket()
    lsn.bind(("127.0.0.1", 0))
    lsn.listen(0)
    port = lsn.getsockname()[1]
    held = [lsn]
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        held.append(c)
    time.sleep(0.2)
    return port, held


def test_the_tcp_probe_tells_a_live_host_from_a_gone_one() -> None:
    live = PeerWatch(PeerSettings(peers=parse_peers("spark-b=127.0.0.1"), head_log=None, probe_port=9))
    assert live.look() is None, "connection refused: the host answered"
    port, held = silent_port()
    try:
        gone = PeerWatch(
            PeerSettings(
                peers=parse_peers("spark-b=127.0.0.1"), head_log=None, probe_port=port, probe_timeout_s=0.5
            )
        )
        dead = gone.look()
        assert dead is not None and dead.source == "tcp probe", dead
        assert f"127.0.0.1:{port}: no answer within 0.5 s" in dead.evidence
        assert gone.look(canary_ok=True) is None, "the probe only names the cause of a failed canary"
    finally:
        for s in held:
            s.close()


def test_readyz_and_report_name_the_dead_peer_within_one_canary_interval(tmp_path: Path) -> None:
    log = tmp_path / "head.log"
    log.write_text("".join(LINES[:SERVING]))
    with FaultServer(die_after=10**9) as srv:
        s: dict[str, Any] = dict(
            base_url=srv.base_url,
            profile="tiny-demo",
            only=["models", "chat"],
            dsv4_checks=False,
            canary_interval_s=0.5,
            canary_timeout_s=2.0,
            ready_timeout_s=20,
            head_log=log,
        )
        env = {"SPARKPAIR_PEERS": "spark-b=127.0.0.1"}
        gw = Gateway(GatewaySettings.from_env(env, overrides=s))
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60, "ready")
                with log.open("a") as f:
                    f.write("".join(LINES[SERVING:]))
                srv.faults.add("engine_dies")
                srv.die_after = 0
                held, r = wait_readyz(g.base_url, 503, 5, "peer down")
                assert held <= 0.5 + 0.6, (
                    f"/readyz still 200 for a poll sent {held:.2f} s in: later than one interval"
                )
                body = r.json()
                assert body["failing_check"] == "peer", body
                assert body["cause"].startswith("peer node 'spark-b' (127.0.0.1) is dead: head log:"), body
                assert body["peer_down"]["state"] == "dead"
                assert (
                    "peer <b>spark-b</b> (127.0.0.1) is <b>dead</b>" in httpx.get(g.base_url + "/status").text
                )
                metrics = httpx.get(g.base_url + "/metrics").text
                assert 'sparkpair_peer_down{peer="spark-b",state="dead"} 1.0' in metrics, metrics[-800:]
                assert body["peer_down"]["name"] == "spark-b"
                rep = httpx.get(g.base_url + "/report").json()
                assert (
                    rep["peer_down"]["address"] == "127.0.0.1"
                    and "Connection closed by peer" in (rep["peer_down"]["evidence"])
                )
                srv.faults.discard("engine_dies")  # the pair came back under the restart policy
                wait_readyz(g.base_url, 200, 5, "peer back")
                assert "peer_down" not in httpx.get(g.base_url + "/readyz").json()
            finally:
                gw.stop()


@pytest.mark.docker
def test_a_peer_container_that_died_and_was_restarted_is_named_through_the_docker_sdk(
    client,  # noqa: F811
    sh_image,  # noqa: F811
    containers,  # noqa: F811
) -> None:  # type: ignore[no-untyped-def]
    # As in the two-container simulation: the killed worker is back "running" within a
    # second under its restart policy, so "not running" alone would never name it.
    name = f"sp-peer-{uuid.uuid4().hex[:8]}"
    c = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "read x"],
        detach=True,
        stdin_open=True,
        name=name,
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 3},
    )
    containers.append(c)
    peers = [{"name": "spark-b", "address": "10.0.0.2", "container": name}]
    w = PeerWatch(PeerSettings(peers=peers, head_log=None))
    assert w.look(canary_ok=True) is None and w.look() is None, "a running, unrestarted peer is alive"
    c.reload()
    os.kill(int(c.attrs["State"]["Pid"]), signal.SIGKILL)  # the node dies: exit 137, a failure
    t_end = time.monotonic() + 30
    while True:
        c.reload()
        if c.attrs["RestartCount"] >= 1 and c.attrs["State"]["Running"]:
            break
        assert time.monotonic() < t_end, c.attrs["State"]
        time.sleep(0.2)
    dead = w.look()
    assert dead is not None and dead.source == "docker" and dead.name == "spark-b", dead
    # Running again: "died and was restarted (RestartCount 0 -> 1"; this scratch container's
    # restarted `read` finds its stdin closed and exits, so it may be caught "restarting".
    assert "died and was restarted (RestartCount 0 -> " in dead.evidence or (
        f"container {name} is restarting (exit code" in dead.evidence
    ), dead.evidence
    c.remove(force=True)
    dead = w.look()
    assert dead is not None and f"no container '{name}'" in dead.evidence, dead


def stop_all(c: Any, sig: int) -> list[int]:
    """Send ``sig`` to every process of container ``c`` (host PIDs, from ``docker top``)."""
    top = c.top(ps_args="-eo pid")
    pids = [int(p[0]) for p in top["Processes"]]
    for pid in pids:
        os.kill(pid, sig)
    return pids


@pytest.mark.docker
def test_a_paused_frozen_or_oom_killed_peer_container_is_named_as_such_and_clears_when_it_runs_again(
    client,  # noqa: F811
    sh_image,  # noqa: F811
    containers,  # noqa: F811
) -> None:  # type: ignore[no-untyped-def]
    name = f"sp-peer-{uuid.uuid4().hex[:8]}"
    c = client.containers.run(sh_image, ["/bin/sh", "-c", "read x"], detach=True, stdin_open=True, name=name)
    containers.append(c)
    w = PeerWatch(
        PeerSettings(peers=[{"name": "spark-b", "address": "10.0.0.2", "container": name}], head_log=None)
    )
    assert w.look(canary_ok=True) is None and w.look() is None, "a running peer is not named"

    c.pause()  # docker pause: State.Running stays true, State.Paused turns true
    down = w.look()
    assert down is not None and (down.state, down.source) == ("paused", "docker"), down
    assert down.cause().startswith("peer node 'spark-b' (10.0.0.2) is paused: docker: container ")
    c.unpause()
    assert w.look(canary_ok=True) is None and w.look() is None, "unpaused: running, not restarted"

    pids = stop_all(c, signal.SIGSTOP)  # frozen: the processes stopped, the container "running"
    try:
        c.reload()
        assert c.attrs["State"]["Running"] and not c.attrs["State"]["Paused"]
        down = w.look()
        assert down is not None and down.state == "frozen", down
        assert f"{len(pids)} of its {len(pids)} processes are stopped (SIGSTOP" in down.evidence, down
    finally:
        stop_all(c, signal.SIGCONT)
    assert w.look() is None, "running again, unrestarted"

    oom = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "x=$(printf '%*s' 300000000 ''); echo done"],
        detach=True,
        name=f"sp-peer-oom-{uuid.uuid4().hex[:8]}",
        mem_limit="16m",
        memswap_limit="16m",
    )
    containers.append(oom)
    oom.wait(timeout=60)
    w = PeerWatch(
        PeerSettings(peers=[{"name": "spark-b", "address": "10.0.0.2", "container": oom.name}], head_log=None)
    )
    down = w.look()
    assert down is not None and down.state == "oom-killed" and "State.OOMKilled" in down.evidence, down


@pytest.mark.docker
def test_a_peer_container_that_is_restarting_or_was_oom_killed_and_restarted_is_named_so(
    client,  # noqa: F811
    sh_image,  # noqa: F811
    containers,  # noqa: F811
) -> None:  # type: ignore[no-untyped-def]
    # OOM-killed, then brought back by its restart policy: the engine's oom event names it.
    # (The kernel kills the allocating subshell; the shell then fails, so the policy restarts it.)
    oom = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "read x; x=$(printf '%*s' 300000000 '') || exit 137; echo done"],
        detach=True,
        stdin_open=True,
        name=f"sp-peer-oomr-{uuid.uuid4().hex[:8]}",
        mem_limit="16m",
        memswap_limit="16m",
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 1},
    )
    containers.append(oom)
    w = PeerWatch(
        PeerSettings(peers=[{"name": "spark-b", "address": "10.0.0.2", "container": oom.name}], head_log=None)
    )
    assert w.look(canary_ok=True) is None
    sock = oom.attach_socket(params={"stdin": 1, "stream": 1})
    sock._sock.sendall(b"go\n")  # the shell reads its line, then allocates past its limit
    sock.close()
    t_end = time.monotonic() + 60
    while True:
        oom.reload()
        if oom.attrs["RestartCount"] >= 1:
            break
        assert time.monotonic() < t_end, oom.attrs["State"]
        time.sleep(0.2)
    down = w.look()
    assert down is not None and down.state == "oom-killed", down

    # A container that fails at once under `restart: always` spends more and more of its time
    # restarting (Docker's back-off doubles): seen "restarting".
    loop = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "exit 3"],
        detach=True,
        name=f"sp-peer-loop-{uuid.uuid4().hex[:8]}",
        restart_policy={"Name": "always"},
    )
    containers.append(loop)
    w = PeerWatch(
        PeerSettings(
            peers=[{"name": "spark-b", "address": "10.0.0.2", "container": loop.name}], head_log=None
        )
    )
    t_end = time.monotonic() + 60
    seen = []
    while True:
        down = w.look()
        seen.append(None if down is None else down.state)
        if down is not None and down.state == "restarting":
            break
        assert time.monotonic() < t_end, seen
        time.sleep(0.1)
    assert "is restarting (exit code 3)" in down.evidence, down
