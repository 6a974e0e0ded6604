"""The log scanner on vLLM 0.32 logs captured from the real CPU server (tests/faults/logs/).

* ``vllm032-cpu-engine-core-sigkill.log``: the tiny-demo server (hermes tool parser) served
  the suite, then its ``VLLM::EngineCore`` process was SIGKILLed mid-request.
* ``vllm032-cpu-kv-cache-too-large.log``: a server started with ``VLLM_CPU_KVCACHE_SPACE=4000``
  (GiB) on a 24 GiB machine: the engine failed at KV-cache allocation (the CPU twin of B14).

The live versions of these runs are in tests/vllm_real/ (engine death) ; these copies keep
the scanner's behaviour on real wording fixed in the fast tier.
"""

from __future__ import annotations

import re
from pathlib import Path

from sparkpair_health.logscan import scan_lines, scan_text

LOGS = Path(__file__).resolve().parents[2] / "faults" / "logs"


def read(name: str) -> list[str]:
    return (LOGS / name).read_text(errors="replace").splitlines()


def test_the_sigkilled_engine_core_is_fatal_and_tool_parser_errors_are_only_warnings() -> None:
    lines = read("vllm032-cpu-engine-core-sigkill.log")
    r = scan_lines(lines)
    assert r.fatal
    dead = r.get("engine_dead")
    assert dead is not None and dead.severity == "fatal"
    assert "engine core exited unexpectedly" in dead.samples[0]
    tool = r.get("tool_args_decode")
    assert tool is not None and tool.severity == "warning" and "hermes_tool_parser" in tool.samples[0]
    # API-server tracebacks (per-request parser errors) are not engine tracebacks.
    assert r.get("engine_traceback") is None


def test_the_same_server_log_before_the_kill_has_no_fatal_finding() -> None:
    lines = read("vllm032-cpu-engine-core-sigkill.log")
    cut = next(i for i, ln in enumerate(lines) if "[shutdown]" in ln)
    r = scan_lines(lines[:cut])
    assert not r.fatal, r.to_json()
    assert r.ids() == ["tool_args_decode"]


def test_an_engine_that_fails_to_start_is_fatal_and_one_failed_start_is_not_a_restart_loop() -> None:
    text = (LOGS / "vllm032-cpu-kv-cache-too-large.log").read_text(errors="replace")
    r = scan_text(text)
    assert r.fatal
    assert {"engine_start_failed", "engine_traceback"} <= set(r.ids())
    mem = r.get("startup_memory_check")
    assert mem is not None and mem.count >= 2 and mem.repeats == 1 and mem.severity == "warning"
    # A second start (new pids) failing the same way is a restart loop: fatal (B14).
    second = re.sub(r"pid=(\d+)", lambda m: f"pid={int(m.group(1)) + 100000}", text)
    loop = scan_text(text + "\n" + second).get("startup_memory_check")
    assert loop is not None and loop.repeats == 2 and loop.severity == "fatal"


def test_two_failed_starts_far_apart_are_not_a_restart_loop_but_close_together_are() -> None:
    text = (LOGS / "vllm032-cpu-kv-cache-too-large.log").read_text(errors="replace")

    def restart(minutes: int) -> str:
        # The same failed start again, with new pids, ``minutes`` later (vLLM's HH:MM:SS prefix).
        def shift(m: re.Match[str]) -> str:
            h, mi = int(m.group(2)), int(m.group(3)) + minutes
            return f"{m.group(1)} {h + mi // 60:02d}:{mi % 60:02d}:{m.group(4)}"

        moved = re.sub(r"(\d\d-\d\d) (\d\d):(\d\d):(\d\d)", shift, text)
        return re.sub(r"pid=(\d+)", lambda m: f"pid={int(m.group(1)) + 100000}", moved)

    far = scan_text(text + "\n" + restart(30)).get("startup_memory_check")
    near = scan_text(text + "\n" + restart(3)).get("startup_memory_check")
    assert far is not None and far.repeats == 2 and far.severity == "warning"
    assert near is not None and near.repeats == 2 and near.severity == "fatal"
