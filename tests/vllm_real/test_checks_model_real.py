"""The model checks that a random-weight tiny model can answer, run by the suite's runner against
the real vLLM CPU server (session fixture): stream equality, long context within max_model_len
2048 (prompts of exact lengths sized with the server's /tokenize, ``usage`` equal to each), the
sweep's thinking table, a short soak with one ≥1000-token output; and the refusal above it.
"""

from __future__ import annotations

from typing import Any

import pytest
from sparkpair_health.checks import CHECKS, MODEL_CHECKS, SWEEP_CHECKS, CheckContext
from sparkpair_health.checks.long_context import probe_lengths
from sparkpair_health.client import HealthClient
from sparkpair_health.report import CheckResult
from sparkpair_health.suite import run_check
from sparkpair_serving.profile import Profile

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

SPECS = {c.id: c for c in [*CHECKS, *MODEL_CHECKS, *SWEEP_CHECKS]}


def with_dsv4(profile: Profile, **dsv4: Any) -> Profile:
    d = profile.model_dump()
    d["checks"]["dsv4"] = {**d["checks"]["dsv4"], **dsv4}
    return Profile.model_validate(d)


def run(server, profile: Profile, check: str) -> tuple[CheckResult, int]:  # type: ignore[no-untyped-def]
    with HealthClient(server.base_url, request_timeout_s=120.0) as client:
        ctx = CheckContext(client, profile.served_model_name, profile, 120.0, 120.0)
        return run_check(SPECS[check], ctx), client.requests


def test_stream_equality_on_the_real_server(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    r, _ = run(vllm_server, tiny_profile, "dsv4.stream_equality")
    assert r.status == "pass", r.model_dump()


def test_long_context_prompts_of_exact_lengths_are_served_at_exactly_those_lengths(
    vllm_server, tiny_profile
) -> None:  # type: ignore[no-untyped-def]
    prof = with_dsv4(tiny_profile, long_context_tokens=1800)
    r, _ = run(vllm_server, prof, "dsv4.long_context")
    assert r.status == "pass", r.model_dump()
    assert r.evidence["max_model_len"] == 2048
    probes = r.evidence["probes"]
    want = probe_lengths(1800)  # 1791, 1792, 1793, 1794, 1727, 1728, 1729: about 14 x 128 and 27 x 64
    assert [p["prompt_tokens_served"] for p in probes] == want == [p["prompt_tokens_sent"] for p in probes]
    assert {n % 4 for n in want} == {0, 1, 2, 3}
    assert [p["depth"] for p in probes] == [0.0, 0.5, 1.0, 0.0, 0.5, 1.0, 0.0], "start, middle, end in turn"
    assert "needle retrieval not judged" in r.message


def test_the_sweep_sends_every_length_at_every_depth_and_every_thinking_row(
    vllm_server, tiny_profile
) -> None:  # type: ignore[no-untyped-def]
    # short prompts and answers: the sweep's coverage, not its length, is what this shows
    r, _ = run(vllm_server, with_dsv4(tiny_profile, long_context_tokens=400), "dsv4.long_context_sweep")
    assert r.status == "pass", r.model_dump()
    assert len(r.evidence["probes"]) == 7 * 3
    assert all(p["prompt_tokens_served"] == p["prompt_tokens_sent"] for p in r.evidence["probes"])
    short = tiny_profile.model_copy(deep=True)
    short.checks.max_tokens = 2
    r, sent = run(vllm_server, short, "thinking_table")
    assert r.status == "pass", r.model_dump()
    assert len(r.evidence["modes"]) == 64 and sent == 128, "every row, streamed and not"


def test_long_context_refuses_beyond_the_real_max_model_len(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    # The check's default length (~48k tokens), not the tiny profile's 1500.
    r, sent = run(vllm_server, with_dsv4(tiny_profile, long_context_tokens=48_000), "dsv4.long_context")
    assert r.status == "error" and "exceeds the server's max_model_len 2048" in r.message
    assert sent == 1, "only GET /v1/models: no prompt was sent"


def test_short_soak_with_a_1000_token_output(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    prof = with_dsv4(
        tiny_profile,
        soak_requests=3,
        soak_long_tokens=1000,
        soak_short_tokens=16,
        soak_first_token_budget_s=60.0,
        soak_min_decode_tok_s=3.0,
    )
    r, _ = run(vllm_server, prof, "dsv4.soak")
    assert r.status == "pass", r.model_dump()
    longs = [x for x in r.evidence["requests"] if x["max_tokens"] == 1000]
    assert longs and all(x["completion_tokens"] >= 1000 for x in longs)


def test_model_checks_inside_the_suite_on_the_real_server(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    from sparkpair_health.suite import SuiteSettings, run_suite

    rep = run_suite(
        SuiteSettings(base_url=vllm_server.base_url, profile=tiny_profile, skip_ready=True),
        checks=[c for c in CHECKS if c.id in ("models", "chat")] + MODEL_CHECKS,
    )
    got = {c.id: c.status for c in rep.checks}
    assert got["dsv4.stream_equality"] == "pass" and got["dsv4.long_context"] == "pass", rep.to_json()[:3000]
    assert (
        got["dsv4.greedy_sanity"] == "skip"
        and got["dsv4.tool_calls"] == "skip"
        and got["dsv4.soak"] == "skip"
    )
    assert rep.passed, rep.to_json()[:3000]
