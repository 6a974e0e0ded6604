"""A peer that is down is named, with how, in /readyz and /report, from evidence the health
service can read.

The head-log evidence is the real log of a two-node ``mp`` TP=2 run on vLLM 0.32 CPU whose
worker was killed (tests/faults/logs/vllm032-cpu-mp-worker-killed-head.log): it is replayed
into a file the gateway reads, as the head writes its log to the shared state volume. The
TCP probe runs for real on loopback. The Docker evidence (a container paused, frozen, OOM-killed,
restarting, restarted) runs against a real engine in tests/docker/test_peer_containers.py.
"""

from __future__ import annotations

import socket
import sys
import time
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


@pytest.mark.slow
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
                wait_readyz(g.base_url, 200, 30, "peer back")
                assert "peer_down" not in httpx.get(g.base_url + "/readyz").json()
            finally:
                gw.stop()
