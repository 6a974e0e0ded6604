"""The model checks (``dsv4.*``, ``thinking_modes``) fail on each fault they exist to catch, and
pass on a correct server, run by the suite's own runner (:func:`sparkpair_health.suite.run_check`,
the path ``health``, ``demo`` and the gateway take).

Runs against ``tests/faults/dsv4_fault_server.py`` served on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from sparkpair_health.checks import (
    CHECKS,
    MODEL_CHECKS,
    SWEEP_CHECKS,
    THINKING_TABLE,
    THINKING_VARIANTS,
    CheckContext,
    CheckSpec,
    check_list,
    find_leaks,
    resolve_thinking,
    thinking_modes,
)
from sparkpair_health.checks.long_context import fit_prompt, probe_lengths
from sparkpair_health.checks.soak import soak_plan
from sparkpair_health.checks.thinking import THINKING_AXES, UNSET
from sparkpair_health.client import HealthClient, SuiteError
from sparkpair_health.report import CheckResult
from sparkpair_health.suite import run_check
from sparkpair_serving.profile import Profile, ProfileError, load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from dsv4_fault_server import FaultState, serve  # noqa: E402

SPECS: dict[str, CheckSpec] = {c.id: c for c in [*CHECKS, *MODEL_CHECKS, *SWEEP_CHECKS]}
ALL_MODEL = ["thinking_modes", *(c.id for c in MODEL_CHECKS), *(c.id for c in SWEEP_CHECKS)]
"""The checks that were the DeepSeek-V4 framework's (its thinking check is ``thinking_modes`` now)."""


def fault_profile(semantic: bool = True, **dsv4: Any) -> Profile:
    """tiny-demo as a trained DeepSeek-V4 model (answers, thinks, calls tools) served as 'dsv4-fault'."""
    d = load_profile("tiny-demo").model_dump()
    d["served_model_name"] = "dsv4-fault"
    d["checks"]["semantic"] = {
        "enabled": semantic,
        "skip_reason": "" if semantic else "untrained here",
        "expected_answers": [
            {"prompt": "What is the capital of France? Answer in one word.", "contains": "Paris"}
        ],
    }
    d["checks"]["thinking"]["enabled"] = True
    d["checks"]["thinking"]["max_tokens"] = 1024
    d["checks"]["dsv4"] = {
        "long_context_tokens": 3000,
        "soak_requests": 4,
        "soak_long_tokens": 120,
        "soak_first_token_budget_s": 20.0,  # a liveness bound: the fault server answers at once
        "soak_min_decode_tok_s": 1000.0,
        **dsv4,
    }
    return Profile.model_validate(d)


def run_on(
    base_url: str,
    check: str,
    prof: Profile,
    *,
    timeout_s: float = 60.0,
    request_s: float = 10.0,
    key: str = "",
) -> tuple[CheckResult, int]:
    """``check`` through the suite's runner with a check timeout of ``timeout_s``; the result
    and how many requests it sent."""
    spec = SPECS[check]
    with HealthClient(base_url, api_key=key or None, request_timeout_s=request_s) as client:
        ctx = CheckContext(client, prof.served_model_name, prof, request_s, request_s)
        res = run_check(spec, ctx, timeout_s / spec.timeout_s)
        return res, client.requests


def run(faults: set[str], check: str, wedge_after: int = 3, wedge_s: float = 120.0, **kw: Any) -> CheckResult:
    st = FaultState(faults=faults, wedge_after=wedge_after, wedge_s=wedge_s)
    timeout_s = kw.pop("timeout_s", 60.0)
    request_s = kw.pop("request_s", 10.0)
    with serve(st) as srv:
        res, _ = run_on(srv.base_url, check, fault_profile(**kw), timeout_s=timeout_s, request_s=request_s)
    assert set(st.seen_models) <= {"dsv4-fault"}, f"a request used another model name: {set(st.seen_models)}"
    return res


def test_every_check_passes_against_a_correct_server() -> None:
    st = FaultState()
    with serve(st) as srv:
        results = [run_on(srv.base_url, c, fault_profile())[0] for c in ALL_MODEL]
    bad = [r.model_dump() for r in results if r.status != "pass"]
    assert not bad, json.dumps(bad, indent=1)[:3000]
    assert [r.id for r in results] == ALL_MODEL
    assert all((r.latency_ms or 0) > 0 for r in results)


@pytest.mark.parametrize(
    "fault, check, words",
    [
        ("think_in_content", "thinking_modes", "think tag '<think>' leaked into content"),
        (
            "reasoning_when_off",
            "thinking_modes",
            "[thinking off, non-streamed] reasoning came back in a mode that does not think",
        ),
        (
            "no_reasoning",
            "thinking_modes",
            "[thinking on, non-streamed] the mode thinks but no reasoning came back",
        ),
        (
            "conflict_ignored",
            "thinking_modes",
            "[thinking=false + reasoning_effort=high, non-streamed] the mode thinks but no reasoning",
        ),
        ("special_token_leak", "thinking_modes", "special token '<｜end▁of▁sentence｜>' leaked into content"),
        ("dsml_in_content", "dsv4.tool_calls", "DSML marker '｜DSML｜' left in content"),
        ("arguments_wrapper", "dsv4.tool_calls", "spurious wrapper key 'arguments'"),
        ("needle_off_by_one", "dsv4.long_context", "is not the needle"),
        ("needle_chatty", "dsv4.long_context", "(normalised: 'The secret code is"),
        ("needle_split_odd", "dsv4.long_context", "is not the needle"),
        ("needle_residue", "dsv4.long_context", "[2943 tokens (= 3 mod 4), needle at depth 0] answer"),
        ("drops_head", "dsv4.long_context", "needle at depth 0] answer 'none'"),
        (
            "null_key_kept",
            "thinking_modes",
            "[thinking=null, non-streamed] think tag '</think>' leaked into content",
        ),
        (
            "think_split_boundary",
            "thinking_modes",
            "[thinking on, non-streamed] think tag '</think>' split across the end of reasoning and the "
            "start of content",
        ),
        (
            "think_split_chunks",
            "thinking_modes",
            "[thinking unspecified, streamed] think tag '<think>' leaked into content",
        ),
        (
            "leak_when_unspecified",
            "thinking_modes",
            "[thinking unspecified, streamed] think tag '<think>' leaked",
        ),
        ("truncates_prompt", "dsv4.long_context", "usage.prompt_tokens=512, wanted exactly 2943"),
        (
            "garbage",
            "dsv4.greedy_sanity",
            "lacks 'Paris' (finish_reason length) — garbage while /health is 200 (B15)",
        ),
        ("nondeterministic", "dsv4.greedy_sanity", "two greedy runs: token 1 differs"),
        ("stream_drops_chunk", "dsv4.stream_equality", "[content] token 1 differs: non-streamed 'two, '"),
        ("wedge_after", "dsv4.soak", "got no answer within its latency budget"),
    ],
)
def test_check_fails_naming_the_fault(fault: str, check: str, words: str) -> None:
    res = run({fault}, check)
    assert res.status == "fail", res.model_dump()
    said = [res.message, *res.evidence.get("problems", [])]  # the message shows the first few
    assert any(words in p for p in said), said


def test_a_dead_engine_is_an_engine_died_error_that_stops_the_suite() -> None:
    res = run({"engine_dead"}, "dsv4.greedy_sanity")
    assert res.status == "error", res.model_dump()
    assert "engine died" in res.message and "HTTP 500" in res.message, res.message


@pytest.mark.slow
def test_soak_wedge_names_how_many_requests_went_well() -> None:
    # The third request hangs 120 s; the per-request budget (~20 s) cuts it, well before the
    # check's own 60 s timeout.
    res = run({"wedge_after"}, "dsv4.soak", wedge_after=2, soak_requests=5)
    assert res.status == "fail"
    assert "request 3/5" in res.message and "after 2 good requests" in res.message and "B08" in res.message
    assert (res.latency_ms or 0) < 55_000, (
        "the wedge must be caught by the per-request budget, not the check timeout"
    )


def test_long_context_refuses_a_prompt_beyond_max_model_len() -> None:
    st = FaultState(max_model_len=2048)
    with serve(st) as srv:
        res, sent = run_on(srv.base_url, "dsv4.long_context", fault_profile(long_context_tokens=48_000))
    assert res.status == "error"
    assert "long_context_tokens=48000" in res.message and "max_model_len 2048" in res.message
    assert st.chat_requests == 0, "the probe must not send anything once it knows the prompt does not fit"
    assert sent == 1, "only GET /v1/models"


def test_long_context_without_semantic_checks_verifies_usage_only() -> None:
    res = run({"needle_off_by_one"}, "dsv4.long_context", semantic=False)
    assert res.status == "pass", res.message
    assert "needle retrieval not judged" in res.message


def test_semantic_checks_skip_with_the_profiles_reason_on_the_tiny_profile() -> None:
    prof = load_profile("tiny-demo")
    results = {
        c: run_on("http://127.0.0.1:9", c, prof)[0]
        for c in ("dsv4.greedy_sanity", "thinking", "dsv4.tool_calls", "dsv4.soak")
    }
    for name in ("dsv4.greedy_sanity", "dsv4.tool_calls"):
        assert results[name].status == "skip"
        assert results[name].message == prof.checks.semantic.skip_reason
    assert results["thinking"].status == "skip"
    assert results["thinking"].message == prof.checks.thinking.skip_reason
    modes = thinking_modes(prof)
    assert [m.label for m in modes] == ["thinking unspecified", "reasoning_effort=high", "thinking=true"]
    assert not any(m.thinking for m in modes), "a model without a thinking mode never reasons"
    assert results["dsv4.soak"].status == "skip" and "soak_requests=0" in results["dsv4.soak"].message


def test_unreachable_server_is_a_suite_error_not_a_model_failure() -> None:
    res, _ = run_on("http://127.0.0.1:9", "dsv4.stream_equality", fault_profile())
    assert res.status == "error"
    assert res.message.startswith("suite error") and "ConnectError" in res.message


@pytest.mark.slow
def test_check_timeout_is_enforced_as_a_suite_error() -> None:
    # Every request hangs 120 s; the check's 1 s timeout ends it (any bound well under the hang
    # proves that, and leaves room for a stalled machine).
    res = run({"wedge_after"}, "dsv4.greedy_sanity", wedge_after=0, request_s=30, timeout_s=1.0)
    assert res.status == "error" and res.message.startswith("timeout:") and "within 1.0 s" in res.message
    assert (res.latency_ms or 0) < 30_000


def test_api_key_is_sent_and_never_written_to_results() -> None:
    key = "sk-very-secret-123"
    st = FaultState(api_key=key)
    with serve(st) as srv:
        ok, _ = run_on(srv.base_url, "dsv4.greedy_sanity", fault_profile(), key=key)
        unauth, _ = run_on(srv.base_url, "dsv4.greedy_sanity", fault_profile())
    assert ok.status == "pass", ok.message
    assert unauth.status == "fail" and "HTTP 401" in unauth.message
    assert all(a == f"Bearer {key}" for a in st.seen_auth[: st.chat_requests - 1])
    dumped = ok.model_dump_json() + unauth.model_dump_json()
    assert key not in dumped
    assert key not in repr(HealthClient("http://x", api_key=key).key)


def test_redact_removes_a_key_the_server_echoed() -> None:
    from pydantic import SecretStr
    from sparkpair_serving.apikey import redact

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
    assert [x.split(" '")[0] for x in find_leaks(text)] == leaks


def test_soak_plan_always_has_a_long_request() -> None:
    assert soak_plan(1, 64, 1000) == [1000]
    assert soak_plan(5, 64, 1000) == [64, 1000, 250, 64, 1000]
    assert soak_plan(0, 64, 1000) == []


def test_soak_that_cannot_fit_its_budget_is_a_suite_error_not_a_wedge() -> None:
    res = run(set(), "dsv4.soak", soak_requests=3, soak_first_token_budget_s=30.0, timeout_s=5.0)
    assert res.status == "error" and "latency budget" in res.message and "check timeout 5 s" in res.message


@pytest.mark.parametrize(
    ("checks", "fragment"),
    [
        ({"extra": {"dsv4": {"long_context_tokens": 1500}}}, "checks.extra was removed"),
        (
            {"dsv4": {"thinking_enabled": True}},
            "'thinking_enabled' was removed; it is now checks.thinking.enabled",
        ),
        ({"dsv4": {"request_timeout_s": 5}}, "timeouts.long_prompt_s"),
        (
            {"dsv4": {"long_context_tolerance": 0.05}},
            "'long_context_tolerance' was removed; it is now an exact",
        ),
        ({"dsv4": {"long_context_shifts": [0, 1]}}, "it is now the needle probe's exact prompt lengths"),
        ({"dsv4": {"long_context_depths": [1.5]}}, "checks.dsv4.long_context_depths"),
        ({"dsv4": {"long_context_tokens": 100}}, "checks.dsv4.long_context_tokens"),
    ],
)
def test_removed_or_bad_model_check_settings_are_refused_naming_the_replacement(
    tmp_path: Path, checks: dict[str, Any], fragment: str
) -> None:
    import yaml

    d = load_profile("tiny-demo").model_dump()
    d["checks"] = {k: v for k, v in d["checks"].items() if k != "dsv4"} | checks
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError) as e:
        load_profile(p)
    assert fragment in str(e.value), str(e.value)


# --------------------------------------------------------------------------- the spaces covered


def _values(v: object) -> tuple[object, object, object]:
    fields = v.fields  # type: ignore[attr-defined]
    ck = fields.get("chat_template_kwargs", {})
    return (
        ck.get("thinking", UNSET),
        ck.get("enable_thinking", UNSET),
        fields.get("reasoning_effort", UNSET),
    )


def test_the_thinking_table_is_every_way_to_set_the_mode_and_the_readiness_rows_cover_every_pair() -> None:
    rows = [_values(v) for v in THINKING_TABLE]
    axes = list(THINKING_AXES.values())
    assert len(rows) == 4 * 4 * 4 and len(set(map(repr, rows))) == 64
    assert {r[0] for r in rows} == {UNSET, True, False, None} and {r[2] for r in rows} == {
        UNSET,
        None,
        "none",
        "high",
    }
    ready = [_values(v) for v in THINKING_VARIANTS]
    for a in range(3):
        for b in range(a + 1, 3):
            pairs = {(repr(r[a]), repr(r[b])) for r in ready}
            want = {(repr(x), repr(y)) for x in axes[a] for y in axes[b]}
            assert pairs == want, f"axes {a}, {b}: missing {want - pairs}"
    labels = {v.label for v in THINKING_VARIANTS}
    for must in (
        "thinking unspecified",
        "reasoning_effort=high",
        "thinking=null",
        "thinking=false + reasoning_effort=high",
    ):
        assert must in labels
    assert len(THINKING_VARIANTS) < len(THINKING_TABLE) / 2, "the readiness suite stays bounded"


@pytest.mark.parametrize(
    "fields, default, thinks",
    [
        ({}, None, True),  # no thinking key: on
        ({}, {"thinking": False}, False),  # the DeepSeek-V4 profile's server default
        ({"chat_template_kwargs": {"thinking": None}}, {"thinking": False}, False),  # null keeps the default
        ({"chat_template_kwargs": {"thinking": None}}, None, True),  # null is no key
        ({"reasoning_effort": "high"}, {"thinking": False}, True),  # effort adds enable_thinking
        ({"chat_template_kwargs": {"thinking": False}, "reasoning_effort": "high"}, None, True),
        ({"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"}, None, False),
        (
            {
                "chat_template_kwargs": {"enable_thinking": None, "thinking": False},
                "reasoning_effort": "high",
            },
            None,
            False,
        ),
        ({"chat_template_kwargs": {"thinking": True}, "reasoning_effort": "none"}, None, False),
        ({"reasoning_effort": None}, None, True),
    ],
)
def test_resolve_thinking(fields: dict[str, Any], default: dict[str, Any] | None, thinks: bool) -> None:
    assert resolve_thinking(fields, default) is thinks


def test_the_sweep_runs_only_when_asked() -> None:
    prof = fault_profile()
    ready = [c.id for c in check_list(prof)]
    swept = [c.id for c in check_list(prof, sweep=True)]
    assert "thinking_table" not in ready and "dsv4.long_context_sweep" not in ready
    assert [c for c in swept if c in ready] == ready, "the readiness checks, in their order"
    assert set(swept) - set(ready) == {"thinking_table", "dsv4.long_context_sweep"}
    assert "dsv4.long_context_sweep" not in [c.id for c in check_list(prof, sweep=True, model_checks=False)]


@pytest.mark.parametrize(
    "fault, check",
    [
        ("null_key_kept", "thinking_table"),
        ("think_split_chunks", "thinking_table"),
        ("needle_residue", "dsv4.long_context_sweep"),
        ("drops_head", "dsv4.long_context_sweep"),
    ],
)
def test_the_sweep_checks_fail_on_the_faults_the_readiness_ones_catch(fault: str, check: str) -> None:
    res = run({fault}, check, timeout_s=120.0)
    assert res.status == "fail", res.model_dump()


def test_probe_lengths_cover_every_residue_and_both_sides_of_multiples_of_64_and_128() -> None:
    ls = probe_lengths(48_000)
    m = 48_000 // 128 * 128
    assert {n % 4 for n in ls} == {0, 1, 2, 3}
    assert {m - 1, m + 1} <= set(ls) and m % 128 == 0
    odd64 = [n for n in ls if n % 64 == 0 and n % 128 != 0]
    assert odd64 and {odd64[0] - 1, odd64[0] + 1} <= set(ls)
    assert max(ls) <= 48_000 + 2
    with pytest.raises(ValueError, match="below 192"):
        probe_lengths(150)


def test_a_prompt_no_pad_can_size_exactly_is_a_suite_error_naming_the_counts() -> None:
    with pytest.raises(SuiteError, match="could not build a prompt of exactly 101 tokens"):
        fit_prompt(lambda pad, v: "x" * pad, lambda text: 100 + 2 * len(text), 101)  # every character adds 2
    # one character is one token, except where the first variant's words make it two
    assert (
        fit_prompt(lambda pad, v: "x" * pad + "y" * v, lambda t: 90 + len(t) + (t == "x" * 11), 101)
        == "x" * 10 + "y"
    )
    with pytest.raises(SuiteError, match="already; wanted at most 101"):
        fit_prompt(lambda pad, v: "x" * pad, lambda text: 120 + len(text), 101)
