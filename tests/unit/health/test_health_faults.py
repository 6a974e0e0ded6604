"""Every check of the health suite FAILS on the bad behaviour it exists to catch.

The suite runs unchanged, over real HTTP, against ``tests/faults/health_fault_server.py``:
a vLLM stand-in on 127.0.0.1 that misbehaves in exactly one way per test. The same
server without faults must pass, so a check that cannot fail shows up here.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from sparkpair_health.suite import NotReady, SuiteSettings, Timeouts, run_suite, suite_exit_code, wait_ready
from sparkpair_overlay.plan import build_plan
from sparkpair_serving.profile import ExpectedAnswer, load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from health_fault_server import LIVENESS, FaultServer  # noqa: E402


def settings(url: str, **kw: object) -> SuiteSettings:
    base: dict[str, object] = dict(base_url=url, profile="tiny-demo", timeouts=LIVENESS)
    base.update(kw)
    return SuiteSettings(**base)  # type: ignore[arg-type]


def test_a_healthy_server_passes_every_applicable_check() -> None:
    with FaultServer() as srv:
        report = run_suite(settings(srv.base_url))
    bad = [(c.id, c.status, c.message) for c in report.checks if c.status not in ("pass", "skip")]
    assert report.passed, bad
    assert suite_exit_code(report) == 0
    assert {c.id for c in report.checks if c.status == "skip"} == {"semantic", "thinking", "overlay_plan"}


CASES = [
    ("models_missing", "models", "is not listed"),
    ("chat_empty", "chat", "wanted text"),
    ("usage_wrong", "chat", "total_tokens"),
    ("double_done", "stream", "2 'data: [DONE]'"),
    ("no_usage_chunk", "stream", "0 chunks carry usage"),
    ("stream_differs", "stream", "streamed text vs non-streamed: token 0 differs: non-streamed 'the'"),
    ("usage_always", "stream_no_usage", "not requested but"),
    ("usage_on_empty_options", "stream_no_usage", "stream_options={}: include_usage not requested"),
    ("double_done", "stream_no_usage", "wanted exactly 1"),
    ("tool_args_true", "tool_required", "violate the get_weather schema"),
    ("tool_args_true", "tool_named", "violate the get_weather schema"),
    ("tool_args_invalid", "tool_required", "'Rome' is not one of"),
    ("tool_in_content", "tool_required", "no tool_calls"),
    ("tool_in_content", "tool_named", "tool-call markup"),
    ("tool_finish_stop", "tool_required", "finish_reason is 'stop', wanted 'tool_calls'"),
    ("prompt_tokens_off", "long_prompt_accepted", "usage.prompt_tokens is 2039"),
    ("long_accept_overlong", "long_prompt_rejected", "answered HTTP 200; wanted 400"),
    ("long_hang", "long_prompt_rejected", "hung: no answer within"),
    ("nondeterministic", "determinism", "not a near-tie"),
]


@pytest.mark.parametrize(("fault", "check_id", "fragment"), CASES, ids=[f"{c[1]}-{c[0]}" for c in CASES])
def test_each_check_fails_on_the_fault_it_exists_to_catch(fault: str, check_id: str, fragment: str) -> None:
    # long_hang holds the over-long prompt 12 s; there each request gets 4 s (a rejection is quick).
    timeouts = LIVENESS.model_copy(update={"request_s": 4}) if fault == "long_hang" else LIVENESS
    with FaultServer({fault}, hang_s=12) as srv:
        report = run_suite(settings(srv.base_url, only=[check_id], skip_ready=True, timeouts=timeouts))
    res = report.check(check_id)
    assert res.status == "fail", (res.status, res.message)
    assert fragment in res.message, res.message
    assert not report.passed and suite_exit_code(report) == 1


def test_tool_arguments_true_with_finish_reason_tool_calls_fails() -> None:
    # The exact behaviour seen on vLLM 0.32 without `strict`: arguments `true`, finish_reason tool_calls.
    with FaultServer({"tool_args_true"}) as srv:
        report = run_suite(settings(srv.base_url, only=["tool_required"]))
    res = report.check("tool_required")
    assert res.status == "fail"
    assert res.evidence["finish_reason"] == "tool_calls"
    assert res.evidence["tool_calls"][0]["function"]["arguments"] == "true"


def test_semantic_and_thinking_checks_fail_when_the_profile_enables_them(tmp_path: Path) -> None:
    p = load_profile("tiny-demo").model_copy(deep=True)
    p.checks.semantic.enabled = True
    p.checks.semantic.expected_answers = [
        ExpectedAnswer(prompt="What is the capital of France? Answer in one word.", contains="Paris")
    ]
    p.checks.thinking.enabled = True
    with FaultServer({"wrong_answer", "reasoning_when_off"}) as srv:
        report = run_suite(settings(srv.base_url, profile=p, only=["semantic", "thinking"]))
    sem, th = report.check("semantic"), report.check("thinking")
    assert sem.status == "fail" and "lacks 'Paris'" in sem.message and "finish_reason 'length'" in sem.message
    assert th.status == "fail" and "thinking off: the message still carries reasoning" in th.message


@pytest.mark.slow
def test_http_200_health_with_500_completions_is_never_ready() -> None:
    # DESIGN.md: a server whose engine failed every request still answered /health and /v1/models.
    with FaultServer({"chat_500"}) as srv:
        with pytest.raises(NotReady, match="stuck at stage 'decode'"):
            wait_ready(settings(srv.base_url, timeouts=Timeouts(ready_s=8)), poll_s=0.2)
        report = run_suite(settings(srv.base_url, timeouts=Timeouts(ready_s=8)))
    assert report.ready is not None and not report.ready.ready
    assert not report.checks and not report.passed and suite_exit_code(report) == 2


@pytest.mark.slow
def test_a_server_that_is_not_listening_is_reported_as_not_ready_not_as_a_model_failure() -> None:
    with FaultServer() as srv:
        url = srv.base_url  # the port is closed once the server stops
    report = run_suite(settings(url, timeouts=Timeouts(ready_s=1.5)))
    assert report.ready is not None and not report.ready.ready
    assert "not reachable" in report.ready.detail and "ConnectError" in report.ready.detail


def test_an_engine_that_dies_mid_suite_aborts_the_run_with_engine_died() -> None:
    with FaultServer({"engine_dies"}, die_after=3) as srv:
        t0 = time.monotonic()
        report = run_suite(settings(srv.base_url))
        took = time.monotonic() - t0
    assert not report.passed and suite_exit_code(report) == 2
    assert report.aborted is not None and report.aborted.startswith("engine died"), report.aborted
    errored = [c for c in report.checks if c.status == "error"]
    assert errored and all("engine died" in c.message for c in errored)
    assert not [c for c in report.checks if c.status == "pass" and c.id in ("determinism", "tool_named")]
    assert took < 20


@pytest.mark.slow
def test_a_stream_that_stalls_is_a_timeout_error_not_a_hang() -> None:
    # 10 s per request: the check's own /v1/models read must answer on a loaded machine (with 1 s
    # it timed out in a CI run, an error before the over-long prompt was sent); the prompt hangs
    # 600 s, so any bound well under that shows the check did not wait it out.
    with FaultServer({"long_hang"}, hang_s=600) as srv:
        t0 = time.monotonic()
        report = run_suite(
            settings(srv.base_url, only=["long_prompt_rejected"], timeouts=Timeouts(ready_s=30, request_s=10))
        )
        assert time.monotonic() - t0 < 60  # the check did not wait out the hang
    c = report.check("long_prompt_rejected")
    assert c.status == "fail" and "hung: no answer within 10 s; wanted HTTP 400" in c.message, c.message


def test_the_overlay_plan_is_in_the_report_when_given_and_an_unreadable_plan_fails(tmp_path: Path) -> None:
    good, bad = tmp_path / "plan.json", tmp_path / "bad.json"
    plan = build_plan(
        vllm_version="0.33.0", version_verified=True, allow_unverified=False, platform="cpu", capability=None
    )
    good.write_text(plan.dumps())
    bad.write_text('{"schema": "sparkpair-kernel-plan/1", ')
    with FaultServer() as srv:
        ok = run_suite(settings(srv.base_url, only=["models"], plan_file=good, skip_ready=True))
        broken = run_suite(settings(srv.base_url, only=["models"], plan_file=bad, skip_ready=True))
        absent = run_suite(
            settings(srv.base_url, only=["models"], plan_file=tmp_path / "no.json", skip_ready=True)
        )
    assert ok.passed and ok.overlay_plan == plan.to_json()
    assert '"path": "upstream"' in ok.to_json()
    assert broken.check("overlay_plan").status == "fail" and not broken.passed
    assert "not readable JSON" in broken.overlay_plan_note
    assert absent.passed and absent.check("overlay_plan").status == "skip"
    assert "does not exist" in absent.check("overlay_plan").message


@pytest.mark.slow
def test_a_wedged_engine_that_still_answers_health_stops_the_run_instead_of_crawling() -> None:
    # 10 s per request (the answers before the wedge must land on a loaded machine); a wedged one
    # hangs 600 s: two timeouts and the stop take ~20 s, far under the hang.
    with FaultServer({"wedge"}, die_after=3, hang_s=600) as srv:
        t0 = time.monotonic()
        report = run_suite(settings(srv.base_url, timeouts=Timeouts(ready_s=30, request_s=10)))
        took = time.monotonic() - t0
    assert report.aborted is not None and report.aborted.startswith("server not answering"), report.aborted
    assert "wedged" in report.aborted and suite_exit_code(report) == 2
    timed_out = [c for c in report.checks if c.status == "error" and c.message.startswith("timeout")]
    assert len(timed_out) == 2 and took < 90


def thinking_profile() -> object:
    """tiny-demo as a DeepSeek-V4-like profile: thinking on/off modes, the protocol checks send
    thinking off, the server defaults to off. Only ``thinking_modes`` leaves thinking unspecified."""
    p = load_profile("tiny-demo").model_copy(deep=True)
    p.checks.thinking.enabled = True
    p.checks.request_extra = {"chat_template_kwargs": {"thinking": False, "enable_thinking": False}}
    p.server.args = [*p.server.args, "--default-chat-template-kwargs", '{"thinking": false}']
    return p


@pytest.mark.slow
@pytest.mark.parametrize(
    ("faults", "fragment"),
    [
        (
            {"unspecified_think_tag"},
            "[thinking unspecified, non-streamed] think tag '<think>' leaked into content",
        ),
        ({"unspecified_eos"}, "[thinking unspecified, non-streamed] special token '<|im_end|>' leaked"),
        ({"unspecified_reasoning"}, "[thinking unspecified, non-streamed] reasoning came back in a mode"),
        (
            {"unspecified_think_tag", "unspecified_stream_only"},
            "[thinking unspecified, streamed] think tag '<think>' leaked into content",
        ),
        (
            {"unspecified_eos", "unspecified_stream_only"},
            "[thinking unspecified, streamed] special token '<|im_end|>' leaked",
        ),
        (
            {"unspecified_reasoning", "unspecified_stream_only"},
            "[thinking unspecified, streamed] reasoning came back in a mode that does not think",
        ),
    ],
)
def test_a_leak_only_when_thinking_is_unspecified_fails_only_thinking_modes(
    faults: set[str], fragment: str
) -> None:
    with FaultServer(faults, thinking_defaults={"thinking": False}) as srv:
        report = run_suite(settings(srv.base_url, profile=thinking_profile(), skip_ready=True))
    res = report.check("thinking_modes")
    assert res.status == "fail" and fragment in res.message, res.message
    others = {c.id: c.status for c in report.checks if c.id != "thinking_modes"}
    assert set(others.values()) <= {"pass", "skip"}, (
        f"the leak must show only where thinking is unspecified: {others}"
    )


@pytest.mark.slow
def test_every_thinking_mode_passes_on_a_correct_server_and_on_the_tiny_profile() -> None:
    seen = []
    for prof, defaults in ((thinking_profile(), {"thinking": False}), ("tiny-demo", None)):
        with FaultServer(thinking_defaults=defaults) as srv:
            report = run_suite(settings(srv.base_url, profile=prof, only=["thinking_modes"], skip_ready=True))
        res = report.check("thinking_modes")
        assert res.status == "pass", res.message
        seen.append(res.message.split(", each")[0])
    assert seen == ["22 thinking modes (10 thinking)", "3 thinking modes (0 thinking)"]


@pytest.mark.slow
def test_a_server_dripping_bytes_is_cut_at_the_overall_deadline_by_both_clients() -> None:
    # One byte per second for 30 s: httpx's per-read timeout (2 s) never fires; the deadline must.
    from sparkpair_health.checks import CheckContext, post_chat
    from sparkpair_health.client import Deadline, HealthClient, RequestTimeout
    from sparkpair_serving.profile import load_profile

    body = {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    with FaultServer(hang_s=30, drip_s=1.0) as srv:
        srv.chat_mode = "drip"
        with HealthClient(srv.base_url) as c:
            t0 = time.monotonic()
            with pytest.raises(RequestTimeout, match="overall deadline"):
                c.post("/v1/chat/completions", body, timeout_s=2.0)
            assert time.monotonic() - t0 < 20  # cut at 2 s, not at the drip's 30 s end
        # The model checks' path: post_chat within a check's deadline, on the same client.
        with HealthClient(srv.base_url, request_timeout_s=2.0) as c:
            ctx = CheckContext(c, "tiny", load_profile("tiny-demo"), 2.0, 2.0)
            t0 = time.monotonic()
            with pytest.raises(RequestTimeout, match="overall deadline"):
                post_chat(ctx, body, Deadline(60.0, "check"), "chat", timeout_s=2.0)
            assert time.monotonic() - t0 < 20  # cut at 2 s, not at the drip's 30 s end


def test_health_sweep_runs_the_whole_thinking_table_after_the_readiness_checks(tmp_path: Path) -> None:
    import json
    import os
    import subprocess

    with FaultServer() as srv:
        r = subprocess.run(
            [sys.executable, "-m", "sparkpair_cli.main", "health", "--base-url", srv.base_url, "--profile",
             "tiny-demo", "--only", "thinking_modes", "--only", "thinking_table", "--sweep",
             "--report-json", str(tmp_path / "r.json")],
            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    checks = {c["id"]: c for c in json.loads((tmp_path / "r.json").read_text())["checks"]}
    assert checks["thinking_modes"]["message"].startswith("3 thinking modes")
    assert checks["thinking_table"]["message"].startswith("64 thinking modes"), checks["thinking_table"]
