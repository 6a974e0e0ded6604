"""The gateway against a real vLLM CPU server: ready after the real suite, its canary (streamed
and not, with a nonce, judged fresh) passing tick after tick, then 503 naming the cause within
one canary interval once the engine core is killed.

Starts its own server (the session fixture must not be broken) and serves the gateway on
127.0.0.1 with uvicorn in a thread.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from dsv4_fault_server import Served  # noqa: E402

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

CANARY_INTERVAL_S = 3.0
CANARY_TIMEOUT_S = 5.0


def test_gateway_ready_on_a_real_server_then_503_naming_the_dead_engine(  # type: ignore[no-untyped-def]
    tiny_model, tiny_profile, tmp_path
):
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.server import VllmServer
    from sparkpair_health.gateway import Gateway, GatewaySettings

    server = VllmServer.from_profile(tiny_profile, tiny_model, log_path=tmp_path / "server.log")
    server.start()
    gw = None
    try:
        settings = GatewaySettings(
            base_url=server.base_url,
            profile="tiny-demo",
            dsv4_checks=True,  # the model checks on a model the profile does not call DeepSeek-V4
            canary_interval_s=CANARY_INTERVAL_S,
            canary_timeout_s=CANARY_TIMEOUT_S,
            ready_timeout_s=float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420")),
            report_json=tmp_path / "report.json",
        )
        gw = Gateway(settings)
        with Served(gw.app) as g:
            gw.start()
            assert httpx.get(g.base_url + "/livez").status_code == 200
            t_end = time.monotonic() + settings.ready_timeout_s + 240
            while True:
                r = httpx.get(g.base_url + "/readyz", timeout=5)
                if r.status_code == 200 or gw.phase in ("not_ready", "suite_failed"):
                    break
                assert time.monotonic() < t_end, f"gateway not ready: {r.text}"
                time.sleep(1.0)
            report = httpx.get(g.base_url + "/report").json()
            bad = [
                (c["id"], c["status"], c["message"][:200])
                for c in report["checks"]
                if c["status"] in ("fail", "error")
            ]
            assert r.status_code == 200, f"{r.text}; failing checks: {bad}"
            ids = {c["id"]: c["status"] for c in report["checks"]}
            assert ids["dsv4.stream_equality"] == "pass" and ids["dsv4.long_context"] == "pass"
            assert ids["dsv4.greedy_sanity"] == "skip" and ids["thinking"] == "skip"
            assert (tmp_path / "report.json").is_file()
            dsv4_s = sum(c["latency_ms"] for c in report["checks"] if c["id"].startswith("dsv4.")) / 1000
            print(f"suite {report['duration_s']:.1f} s on the tiny server, of which dsv4.* {dsv4_s:.1f} s")
            # canaries succeed against the real engine: the greedy answer equals the reference
            # the same request gave right after the suite passed (random weights: no expected text)
            assert gw.reference is not None and gw.reference.ok, gw.reference
            # vLLM names each answer after the canary's nonce (chatcmpl-<request_id>), streamed
            # or not: from now on an answer that does not is not fresh
            assert gw.freshness.names_requests is True

            def good() -> float:
                return gw.metrics.registry.get_sample_value("sparkpair_canary_total", {"result": "ok"}) or 0.0

            ok_before = good()
            t_end = time.monotonic() + 4 * (CANARY_INTERVAL_S + CANARY_TIMEOUT_S)
            while good() < ok_before + 3:
                assert time.monotonic() < t_end, f"not 3 good canaries in a row: {gw.last_canary}"
                assert httpx.get(g.base_url + "/readyz").status_code == 200, gw.last_canary
                time.sleep(0.2)
            last = list(gw.canary_history)[-3:]
            assert all(c["ok"] and c["kind"] == "ok" for c in last), last
            metrics = httpx.get(g.base_url + "/metrics").text
            assert "sparkpair_ready 1.0" in metrics and "sparkpair_canary_latency_seconds_count" in metrics

            pids = server.engine_core_pids()
            assert pids, "no VLLM::EngineCore process in the server's process group"
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            t_kill = time.monotonic()
            while True:
                r = httpx.get(g.base_url + "/readyz", timeout=5)
                if r.status_code == 503:
                    break
                waited = time.monotonic() - t_kill
                assert waited < CANARY_INTERVAL_S + CANARY_TIMEOUT_S + 1.0, (
                    f"/readyz still 200 {waited:.1f} s after the engine core was killed"
                )
                time.sleep(0.1)
            waited = time.monotonic() - t_kill
            body = r.json()
            assert body["failing_check"] == "canary"
            assert body["cause"].startswith(("engine died", "server went away")), body["cause"]
            print(f"503 {waited:.1f} s after SIGKILL of EngineCore: {body['cause'][:200]}")
    finally:
        if gw is not None:
            gw.stop()
        server.stop()
