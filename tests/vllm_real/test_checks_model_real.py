"""The model checks that a random-weight tiny model can answer, run by the suite's runner against
the real vLLM CPU server (session fixture): stream equality, long context within max_model_len
2048 with ``usage`` verification, a short soak with one ≥1000-token output; and the refusal above it.
"""

from __future__ import annotations

from typing import Any

import pytest
from sparkpair_health.checks import CHECKS, MODEL_CHECKS, CheckContext
from sparkpair_health.client import HealthClient
from sparkpair_health.profile import Profile
from sparkpair_health.report import CheckResult
from sparkpair_health.suite import run_check

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

SPECS = {c.id: c for c in MODEL_CHECKS}


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


def test_long_context_prompt_length_verified_from_usage(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    prof = with_dsv4(tiny_profile, long_context_tokens=1800, long_context_depths=[0.1, 0.9])
    r, _ = run(vllm_server, prof, "dsv4.long_context")
    assert r.status == "pass", r.model_dump()
    assert r.evidence["max_model_len"] == 2048
    probes = r.evidence["probes"]
    assert len(probes) == 2 * 3, "two depths times three neighbouring prompt lengths"
    for p in probes:
        assert abs(p["prompt_tokens"] - 1800) <= 0.05 * 1800
    for depth in (0.1, 0.9):
        lengths = [p["prompt_tokens"] for p in probes if p["depth"] == depth]
        assert lengths == sorted(lengths) and len(set(lengths)) == 3, f"not neighbouring lengths: {lengths}"
        # The tiny demo's tokenizer splits each "so " in 3 tokens (1800, 1803, 1806 seen).
        assert lengths[-1] - lengths[0] <= 3 * 2, lengths
    assert "3 neighbouring lengths" in r.message and "needle retrieval not judged" in r.message


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
