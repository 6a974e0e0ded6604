"""Wedge recovery: the bounded restart policy, the wedge signals, and the gateway acting on them.

The policy runs on the real monotonic clock with short windows (no fake time). The gateway
walk uses the health fault server to freeze the answers (a fault a real server cannot be
told to produce on demand) and an injected restart that unfreezes it. The restart of real
containers: tests/docker/test_recovery_restart.py (the restart order) and
tests/docker/test_sim_pair.py (the two-container vLLM pair frozen and killed).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sparkpair_health.gateway import Gateway, GatewaySettings, GatewaySettingsError
from sparkpair_health.recovery import Recovery, RestartBudget, TokenProgress, vllm_progress

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from dsv4_fault_server import Served  # noqa: E402
from health_fault_server import FaultServer  # noqa: E402

NODES = {"nodes": [{"name": "head", "containers": ["h"]}, {"name": "worker", "containers": ["w"]}]}


def test_the_budget_allows_n_restarts_in_a_window_then_refuses_until_the_window_slides() -> None:
    b = RestartBudget(max_restarts=2, window_s=0.4, clock=time.monotonic)
    assert b.take() and b.take()
    assert not b.take() and b.used() == 2
    time.sleep(0.45)
    assert b.used() == 0 and b.take()


def test_tokens_that_stop_while_requests_run_are_a_wedge_and_idle_is_not() -> None:
    p = TokenProgress(stall_s=0.2, clock=time.monotonic)
    assert p.observe(running=1, tokens=10) == ""
    time.sleep(0.25)
    assert p.observe(running=0, tokens=10) == "", "no request running: idle, not wedged"
    assert p.observe(running=2, tokens=10) == ""
    time.sleep(0.25)
    why = p.observe(running=2, tokens=10)
    assert "tokens stopped" in why and "2 request(s) running" in why
    assert p.observe(running=2, tokens=11) == "", "a new token clears it"


def test_vllm_progress_reads_the_two_counters_from_prometheus_text() -> None:
    text = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:generation_tokens_total{engine="0",model_name="m"} 1234.0\n'
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
    )
    assert vllm_progress(text) == (3.0, 1234.0)
    assert vllm_progress("vllm:num_requests_running 1\n") is None
    # A sample that is no finite number: no counters this tick (never an exception, never a stall).
    for bad in ("garbage", "NaN", "+Inf"):
        assert vllm_progress(f"vllm:num_requests_running 1\nvllm:generation_tokens_total {bad}\n") is None


def test_recovery_judges_a_garbage_metrics_page_as_no_counters_and_never_raises() -> None:
    r = rec([])
    r.progress = TokenProgress(stall_s=60)
    page = "vllm:num_requests_running 0\nvllm:generation_tokens_total garbage\n"
    assert r.observe(True, "", 0, metrics=page) is None


def rec(restarts: list[str], n: int = 2, window_s: float = 60.0, fail: bool = False) -> Recovery:
    def restart() -> list[str]:
        if fail:
            raise RuntimeError("head: docker stop on the local Docker engine failed: NotFound")
        restarts.append("r")
        return ["stop head/h", "restart worker/w", "start head/h"]

    return Recovery(
        budget=RestartBudget(n, window_s), after_failures=3, restart=restart, say=lambda line: None
    )


def test_recovery_restarts_on_each_signal_and_stops_after_n_naming_the_cause() -> None:
    done: list[str] = []
    r = rec(done)
    assert r.observe(True, "", 0) is None
    assert r.observe(False, "canary: no whole answer", 2) is None, "2 failures < recovery_after_failures"
    ev = r.observe(False, "canary: no whole answer within canary_timeout_s=10 s", 3)
    assert ev is not None and ev.action == "restarted" and "3 canaries failed" in ev.cause
    assert ev.detail == "stop head/h; restart worker/w; start head/h"
    ev = r.observe(False, "engine died: canary: EngineDeadError", 1)
    assert ev is not None and ev.action == "restarted" and ev.cause.startswith("engine dead")
    ev = r.observe(True, "", 0, peer_down="peer node 'worker' (10.0.0.2) is down: docker: exited")
    assert ev is not None and ev.action == "exhausted" and len(done) == 2
    assert r.exhausted is not None and "2 restart(s) within recovery_window_s=60 s" in r.exhausted
    assert "peer node 'worker'" in r.exhausted
    assert r.observe(False, "engine died: x", 9) is None and len(done) == 2, "stopped for good"


def test_the_first_good_canary_after_a_restart_is_one_recovered_event() -> None:
    r = rec([], n=5)
    r.grace_s = 60.0
    assert r.observe(True, "", 0) is None, "serving from the start: nothing to report"
    assert r.observe(False, "engine died: x", 1) is not None
    assert r.observe(False, "server went away: refused", 2) is None, "reloading (grace)"
    back = r.observe(True, "", 0)
    assert back is not None and back.action == "recovered" and back.cause == "engine dead: engine died: x"
    assert back.detail.startswith("serving again ") and back.detail.endswith(" s after the restart")
    assert r.observe(True, "", 0) is None, "once"
    assert [e.action for e in r.events] == ["restarted", "recovered"]


def test_a_failed_restart_is_an_event_naming_the_error() -> None:
    r = rec([], fail=True)
    ev = r.observe(False, "server went away: connection refused", 1)
    assert ev is not None and ev.action == "failed" and "docker stop" in ev.detail


def test_no_new_wedge_is_declared_while_the_pair_reloads_after_a_restart() -> None:
    done: list[str] = []
    r = rec(done, n=5)
    r.grace_s = 0.3
    assert r.observe(False, "engine died: x", 1) is not None
    assert r.observe(False, "engine died: x", 2) is None, "inside the grace after a restart"
    time.sleep(0.35)
    assert r.observe(False, "engine died: x", 3) is not None and len(done) == 2


def test_recovery_is_off_by_default_and_needs_the_nodes_it_restarts() -> None:
    assert GatewaySettings().recovery is False
    with pytest.raises(GatewaySettingsError) as e:
        GatewaySettings.from_env({"SPARKPAIR_RECOVERY": "true"})
    assert str(e.value).startswith(
        "SPARKPAIR_RECOVERY='true': stability names no node 'head' with containers"
    )
    s = GatewaySettings.from_env({"SPARKPAIR_RECOVERY": "1", "SPARKPAIR_STABILITY": json.dumps(NODES)})
    assert s.recovery and s.recovery_max_restarts == 3 and s.recovery_stop_timeout_s == 30
    # A pair it could restart only in part is refused: a node without containers, the head alone.
    for nodes, want in (
        (
            {"nodes": [{"name": "head", "containers": ["h"]}, {"name": "worker"}]},
            "node(s) ['worker'] name no",
        ),
        ({"nodes": [{"name": "head", "containers": ["h"]}]}, "names only ['head']"),
    ):
        with pytest.raises(GatewaySettingsError) as e:
            GatewaySettings.from_env({"SPARKPAIR_RECOVERY": "1", "SPARKPAIR_STABILITY": json.dumps(nodes)})
        assert want in str(e.value), str(e.value)
    # A stall shorter than the canary interval cannot be measured (counters are read per canary).
    with pytest.raises(GatewaySettingsError) as e:
        GatewaySettings.from_env(
            {
                "SPARKPAIR_RECOVERY": "1",
                "SPARKPAIR_STABILITY": json.dumps(NODES),
                "SPARKPAIR_CANARY_INTERVAL_S": "30",
                "SPARKPAIR_RECOVERY_STALL_S": "10",
            }
        )
    assert str(e.value).startswith("SPARKPAIR_RECOVERY_STALL_S='10'") and "canary_interval_s=30" in str(
        e.value
    )
    with pytest.raises(GatewaySettingsError) as e:
        GatewaySettings.from_env({"SPARKPAIR_RECOVERY_STOP_TIMEOUT_S": "0"})
    assert str(e.value).startswith("SPARKPAIR_RECOVERY_STOP_TIMEOUT_S='0'"), str(e.value)


def wait_for(what: str, fn: Any, timeout_s: float) -> Any:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    pytest.fail(f"{what}: not within {timeout_s} s")


@pytest.mark.slow
def test_the_gateway_restarts_a_frozen_pair_returns_to_ready_then_stays_down_after_n() -> None:
    with FaultServer(hang_s=3.0) as srv:
        gw = Gateway(
            GatewaySettings(
                base_url=srv.base_url,
                profile="tiny-demo",
                only=["models", "chat"],
                dsv4_checks=False,
                canary_interval_s=0.3,
                canary_timeout_s=1.0,
                ready_timeout_s=20,
                request_timeout_s=30,
                stability=NODES,
                recovery=True,
                recovery_max_restarts=1,
                recovery_after_failures=2,
            )
        )
        assert gw.recovery is not None
        gw.monitor = None  # no Docker here: the containers NODES names are restarted by the fake below
        restarts: list[str] = []

        def restart() -> list[str]:
            restarts.append(srv.chat_mode)
            srv.chat_mode = "ok"  # the "restarted" engine answers again
            return ["stop head/h", "restart worker/w", "start head/h"]

        gw.recovery.restart = restart
        gw.recovery.say = lambda line: None
        with Served(gw.app) as g:
            gw.start()
            try:
                # the suite on the fault server: seconds alone, minutes while CI's runs share 2 cores
                wait_for("ready", lambda: httpx.get(g.base_url + "/readyz").status_code == 200, 300)
                srv.chat_mode = "hang"  # frozen: /health and /v1/models still answer
                wait_for("one restart", lambda: restarts, 60)
                wait_for("ready again", lambda: httpx.get(g.base_url + "/readyz").status_code == 200, 120)
                assert gw.metrics.registry.get_sample_value("sparkpair_recovery_restarts_total") == 1.0
                srv.chat_mode = "hang"
                body = wait_for(
                    "recovery exhausted",
                    lambda: (
                        (b := httpx.get(g.base_url + "/readyz").json()).get("failing_check") == "recovery"
                        and "recovery stopped" in b["cause"]
                        and b
                    ),
                    20,
                )
                assert "1 restart(s) within recovery_window_s=3600 s" in body["cause"], body
                assert "canaries failed in a row" in body["cause"], body
                srv.chat_mode = "ok"
                time.sleep(1.0)
                r = httpx.get(g.base_url + "/readyz")
                assert r.status_code == 503 and r.json()["failing_check"] == "recovery", "must stay down"
                assert len(restarts) == 1
                assert "recovery stopped" in httpx.get(g.base_url + "/status").text
                # A stability look that passes (the pair came back by itself) does not lift it.
                from sparkpair_health.stability import StabilityReport

                class Passing:
                    def check(self) -> StabilityReport:
                        return StabilityReport()

                gw.monitor = Passing()  # type: ignore[assignment]
                gw.stability_tick()
                r = httpx.get(g.base_url + "/readyz")
                assert r.status_code == 503 and "recovery stopped" in r.json()["cause"], r.json()
            finally:
                gw.stop()
