"""The DeepSeek-V4 checks that a random-weight tiny model can answer, run against the real vLLM
CPU server (session fixture): stream equality, long context within max_model_len 2048 with
``usage`` verification, a short soak with one ≥1000-token output; and the refusal above it.
"""

from __future__ import annotations

import pytest
from sparkpair_health import checks_model as cm

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]


def settings(server, profile, **kw):  # type: ignore[no-untyped-def]
    return cm.DSV4CheckSettings.from_profile(profile, server.base_url, **kw)


def test_stream_equality_on_the_real_server(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    (r,) = cm.run_model_checks(settings(vllm_server, tiny_profile), only=("dsv4.stream_equality",))
    assert r.status == "pass", r.to_dict()


def test_long_context_prompt_length_verified_from_usage(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    s = settings(vllm_server, tiny_profile, long_context_tokens=1800, long_context_depths=[0.1, 0.9])
    (r,) = cm.run_model_checks(s, only=("dsv4.long_context",))
    assert r.status == "pass", r.to_dict()
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
    s = settings(vllm_server, tiny_profile, long_context_tokens=48_000)
    (r,) = cm.run_model_checks(s, only=("dsv4.long_context",))
    assert r.status == "error" and "exceeds the server's max_model_len 2048" in r.message
    assert r.evidence["requests_sent"] == 0


def test_short_soak_with_a_1000_token_output(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    s = settings(
        vllm_server,
        tiny_profile,
        soak_requests=3,
        soak_long_tokens=1000,
        soak_short_tokens=16,
        soak_first_token_budget_s=60.0,
        soak_min_decode_tok_s=3.0,
    )
    (r,) = cm.run_model_checks(s, only=("dsv4.soak",))
    assert r.status == "pass", r.to_dict()
    longs = [x for x in r.evidence["requests"] if x["max_tokens"] == 1000]
    assert longs and all(x["completion_tokens"] >= 1000 for x in longs)


def test_model_checks_inside_the_v1_suite_on_the_real_server(vllm_server, tiny_profile) -> None:  # type: ignore[no-untyped-def]
    from sparkpair_health.checks import CHECKS
    from sparkpair_health.suite import SuiteSettings, run_suite

    specs = cm.dsv4_check_specs(long_context_tokens=1500, long_context_depths=[0.5])
    rep = run_suite(
        SuiteSettings(base_url=vllm_server.base_url, profile=tiny_profile, skip_ready=True),
        checks=[c for c in CHECKS if c.id in ("models", "chat")] + specs,
    )
    got = {c.id: c.status for c in rep.checks}
    assert got["dsv4.stream_equality"] == "pass" and got["dsv4.long_context"] == "pass", rep.to_json()[:3000]
    assert (
        got["dsv4.greedy_sanity"] == "skip"
        and got["dsv4.tool_calls"] == "skip"
        and got["dsv4.soak"] == "skip"
    )
    assert rep.passed, rep.to_json()[:3000]
