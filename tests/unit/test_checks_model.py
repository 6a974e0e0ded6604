"""The DeepSeek-V4 checks fail on each fault they exist to catch, and pass on a correct server.

Runs against ``tests/faults/dsv4_fault_server.py`` served on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from sparkpair_health import checks_model as cm
from sparkpair_health.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from dsv4_fault_server import FaultState, serve  # noqa: E402


def settings(base_url: str, **kw: Any) -> cm.DSV4CheckSettings:
    base: dict[str, Any] = dict(
        base_url=base_url,
        served_model_name="dsv4-fault",
        semantic_enabled=True,
        thinking_enabled=True,
        tools_enabled=True,
        long_context_tokens=3000,
        request_timeout_s=10,
        check_timeout_s=60,
        soak_requests=4,
        soak_long_tokens=120,
        soak_first_token_budget_s=1.0,
        soak_min_decode_tok_s=1000.0,
    )
    base.update(kw)
    return cm.DSV4CheckSettings(**base)


def run(faults: set[str], check: str, **kw: Any) -> cm.ModelCheckResult:
    st = FaultState(faults=faults, wedge_after=kw.pop("wedge_after", 3), wedge_s=kw.pop("wedge_s", 5.0))
    with serve(st) as srv:
        (res,) = cm.run_model_checks(settings(srv.base_url, **kw), only=(check,))
    assert set(st.seen_models) <= {"dsv4-fault"}, f"a request used another model name: {set(st.seen_models)}"
    return res


def test_every_check_passes_against_a_correct_server() -> None:
    st = FaultState()
    with serve(st) as srv:
        results = cm.run_model_checks(settings(srv.base_url))
    bad = [r.to_dict() for r in results if r.status != "pass"]
    assert not bad, json.dumps(bad, indent=1)[:3000]
    assert [r.name for r in results] == list(cm.CHECK_NAMES)
    assert all(r.duration_s > 0 for r in results)


@pytest.mark.parametrize(
    "fault, check, words",
    [
        ("think_in_content", "dsv4.thinking", "think tag '<think>' leaked into content"),
        ("reasoning_when_off", "dsv4.thinking", "[thinking=false] thinking off but reasoning came back"),
        ("no_reasoning", "dsv4.thinking", "[thinking=true] thinking on but no reasoning came back"),
        (
            "conflict_ignored",
            "dsv4.thinking",
            "[thinking=false + reasoning_effort=high] thinking on but no reasoning",
        ),
        ("special_token_leak", "dsv4.thinking", "special token '<｜end▁of▁sentence｜>' leaked into content"),
        ("dsml_in_content", "dsv4.tool_calls", "DSML marker '｜DSML｜' left in content"),
        ("arguments_wrapper", "dsv4.tool_calls", "spurious wrapper key 'arguments'"),
        ("needle_off_by_one", "dsv4.long_context", "is not the needle"),
        ("needle_chatty", "dsv4.long_context", "(normalised: 'The secret code is"),
        ("needle_split_odd", "dsv4.long_context", "is not the needle"),
        ("leak_when_unspecified", "dsv4.thinking", "[no thinking kwargs, stream] think tag '<think>' leaked"),
        ("truncates_prompt", "dsv4.long_context", "usage.prompt_tokens=512, wanted 3000"),
        (
            "garbage",
            "dsv4.greedy_sanity",
            "lacks 'Paris' (finish_reason length) — garbage while /health is 200 (B15)",
        ),
        ("nondeterministic", "dsv4.greedy_sanity", "two greedy runs differ"),
        ("stream_drops_chunk", "dsv4.stream_equality", "streamed content differs from non-streamed at char"),
        ("wedge_after", "dsv4.soak", "got no answer within its latency budget"),
        ("engine_dead", "dsv4.greedy_sanity", "HTTP 500, wanted 200"),
    ],
)
def test_check_fails_naming_the_fault(fault: str, check: str, words: str) -> None:
    res = run({fault}, check)
    assert res.status == "fail", res.to_dict()
    assert words in res.message, res.message


def test_soak_wedge_names_how_many_requests_went_well() -> None:
    res = run({"wedge_after"}, "dsv4.soak", wedge_after=2, soak_requests=5)
    assert res.status == "fail"
    assert "request 3/5" in res.message and "after 2 good requests" in res.message and "B08" in res.message
    assert res.duration_s < 5, "the wedge must be caught by the per-request budget, not the check timeout"


def test_long_context_refuses_a_prompt_beyond_max_model_len() -> None:
    st = FaultState(max_model_len=2048)
    with serve(st) as srv:
        (res,) = cm.run_model_checks(
            settings(srv.base_url, long_context_tokens=48_000), only=("dsv4.long_context",)
        )
    assert res.status == "error"
    assert "long_context_tokens=48000" in res.message and "max_model_len 2048" in res.message
    assert st.chat_requests == 0, "the probe must not send anything once it knows the prompt does not fit"


def test_long_context_without_semantic_checks_verifies_usage_only() -> None:
    res = run({"needle_off_by_one"}, "dsv4.long_context", semantic_enabled=False)
    assert res.status == "pass", res.message
    assert "needle retrieval not judged" in res.message


def test_semantic_checks_skip_with_the_profiles_reason_on_the_tiny_profile() -> None:
    prof = load_profile("tiny-demo")
    s = cm.DSV4CheckSettings.from_profile(prof, "http://127.0.0.1:9", long_context_tokens=1500)
    results = {
        r.name: r
        for r in cm.run_model_checks(
            s, only=("dsv4.greedy_sanity", "dsv4.thinking", "dsv4.tool_calls", "dsv4.soak")
        )
    }
    for name in ("dsv4.greedy_sanity", "dsv4.tool_calls"):
        assert results[name].status == "skip"
        assert results[name].message == prof.checks.semantic.skip_reason
    assert results["dsv4.thinking"].status == "skip"
    assert results["dsv4.thinking"].message == prof.checks.thinking.skip_reason
    assert results["dsv4.soak"].status == "skip" and "soak_requests=0" in results["dsv4.soak"].message


def test_unreachable_server_is_a_suite_error_not_a_model_failure() -> None:
    (res,) = cm.run_model_checks(settings("http://127.0.0.1:9"), only=("dsv4.stream_equality",))
    assert res.status == "error"
    assert res.message.startswith("suite error (not a model verdict)") and "ConnectError" in res.message


def test_check_timeout_is_enforced_as_a_suite_error() -> None:
    res = run(
        {"wedge_after"},
        "dsv4.greedy_sanity",
        wedge_after=0,
        wedge_s=5.0,
        request_timeout_s=30,
        check_timeout_s=1.0,
    )
    assert res.status == "error" and "check_timeout_s=1" in res.message
    assert res.duration_s < 3


def test_api_key_is_sent_and_never_written_to_results() -> None:
    key = "sk-very-secret-123"
    st = FaultState(api_key=key)
    with serve(st) as srv:
        ok = cm.run_model_checks(settings(srv.base_url, api_key=SecretStr(key)), only=("dsv4.greedy_sanity",))
        unauth = cm.run_model_checks(settings(srv.base_url), only=("dsv4.greedy_sanity",))
    assert ok[0].status == "pass", ok[0].message
    assert unauth[0].status == "fail" and "HTTP 401" in unauth[0].message
    assert all(a == f"Bearer {key}" for a in st.seen_auth[: st.chat_requests - 1])
    dumped = json.dumps([r.to_dict() for r in ok + unauth])
    assert key not in dumped
    assert key not in repr(settings("http://x", api_key=SecretStr(key)))


def test_redact_removes_a_key_the_server_echoed() -> None:
    from sparkpair_health.apikey import redact

    k = SecretStr("abc123xyz")
    assert redact({"m": ["Bearer abc123xyz failed"]}, k) == {"m": ["Bearer <redacted-api-key> failed"]}


@pytest.mark.parametrize(
    "text, leaks",
    [
        ("Paris", []),
        ("a <think>b", ["think tag"]),
        ("x </think> y", ["think tag"]),
        ("<|DSML|invoke name=", ["DSML marker"]),
        ("<｜DSML｜tool_calls>", ["DSML marker"]),
        ("done<｜end▁of▁sentence｜>", ["special token"]),
        ("done<|im_end|>", ["special token"]),
        ("a | b | c", []),
        ("use x<y and y>z", []),
    ],
)
def test_find_leaks(text: str, leaks: list[str]) -> None:
    assert [x.split(" '")[0] for x in cm.find_leaks(text)] == leaks


def test_soak_plan_always_has_a_long_request() -> None:
    assert cm.soak_plan(1, 64, 1000) == [1000]
    assert cm.soak_plan(5, 64, 1000) == [64, 1000, 250, 64, 1000]
    assert cm.soak_plan(0, 64, 1000) == []


def test_soak_that_cannot_fit_its_budget_is_a_suite_error_not_a_wedge() -> None:
    res = run(set(), "dsv4.soak", soak_requests=3, soak_first_token_budget_s=30.0, check_timeout_s=5.0)
    assert res.status == "error" and "latency budget" in res.message and "check_timeout_s=5" in res.message
