"""Killing the vLLM engine core under a running health suite makes the suite fail, promptly, saying so.

Starts its own real vLLM CPU server (the session fixture must not be broken), runs the
suite in a thread, SIGKILLs the ``VLLM::EngineCore`` process while a check is running, and
checks the verdict. The server's real log is then scanned: the log scanner must report
the engine's death as fatal.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest
from sparkpair_health.logscan import scan_file
from sparkpair_health.suite import SuiteSettings, Timeouts, run_suite, suite_exit_code

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]


@pytest.fixture(scope="module")
def killed_run(tiny_model, tiny_profile, tmp_path_factory):  # type: ignore[no-untyped-def]
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.server import VllmServer

    logdir = tmp_path_factory.mktemp("engine-death")
    server = VllmServer.from_profile(tiny_profile, tiny_model, log_path=logdir / "server.log")
    server.start()
    try:
        server.wait_ready(timeout_s=float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420")))
        killed: dict[str, float | list[int]] = {}

        def on_progress(event: str, detail: str) -> None:
            # Kill the engine while the streaming check is in flight (from a side thread).
            if event == "check-start" and detail == "stream" and not killed:
                pids = server.engine_core_pids()
                killed["pids"] = pids

                def kill() -> None:
                    time.sleep(0.15)
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    killed["t"] = time.monotonic()

                threading.Thread(target=kill, daemon=True).start()

        settings = SuiteSettings(
            base_url=server.base_url, profile=tiny_profile, timeouts=Timeouts(ready_s=60)
        )
        box: dict[str, object] = {}
        t = threading.Thread(target=lambda: box.update(report=run_suite(settings, on_progress)), daemon=True)
        t.start()
        t.join(timeout=180)
        assert not t.is_alive(), "the suite hung after the engine was killed"
        yield box["report"], killed, time.monotonic(), server
    finally:
        server.stop()


def test_the_suite_fails_promptly_saying_the_engine_died(killed_run) -> None:  # type: ignore[no-untyped-def]
    report, killed, t_end, server = killed_run
    assert killed.get("pids"), "no VLLM::EngineCore process found in the server's process group"
    assert not report.passed and suite_exit_code(report) == 2
    assert report.aborted and re.search(r"engine (most likely )?died", report.aborted), report.aborted
    assert t_end - killed["t"] < 60, "the suite took more than 60 s to notice the dead engine"
    failed = [c for c in report.checks if c.status in ("error", "fail")]
    assert failed and failed[0].id in ("stream", "stream_no_usage")
    # Nothing after the death passes.
    after = report.checks[report.checks.index(failed[0]) :]
    assert not [c.id for c in after if c.status == "pass"]


def test_logscan_reports_the_killed_engine_in_the_real_server_log_as_fatal(killed_run) -> None:  # type: ignore[no-untyped-def]
    _, _, _, server = killed_run
    result = scan_file(server.log_path)
    assert result.fatal, result.to_json()
    assert "engine_dead" in result.ids(), result.ids()
