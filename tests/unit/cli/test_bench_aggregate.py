"""Aggregation maths of ``sparkpair bench`` on crafted per-request records, checked against hand-computed values."""
# ruff: noqa: E501

from __future__ import annotations

import math
import random

import pytest
from sparkpair_cli.bench.aggregate import distribution, percentile, summarize_cell


def rec(start: float, ttft: float, latency: float, out: int, prompt: int, *, itl: list[float] | None = None,
        phase: str = "measured", success: bool = True, cancelled: bool = False) -> dict:  # fmt: skip
    return {
        "cell_id": "c",
        "phase": phase,
        "success": success,
        "cancelled": cancelled,
        "start_s": start,
        "ttft_s": ttft if success else None,
        "latency_s": latency,
        "output_tokens": out if success else 0,
        "prompt_tokens": prompt,
        "itl_s": itl if itl is not None else [],
    }


def test_percentile_interpolates_linearly_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([10.0], 99) == 10.0
    assert percentile([3.0, 1.0, 2.0], 0) == 1.0 and percentile([3.0, 1.0, 2.0], 100) == 3.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="want 0 <= p <= 100"):
        percentile([1.0], 101)


def test_percentile_matches_numpy_on_random_data() -> None:
    np = pytest.importorskip("numpy")
    rng = random.Random(3)
    for n in (1, 2, 7, 100):
        xs = [rng.expovariate(1.0) for _ in range(n)]
        for p in (0, 1, 50, 90, 99, 100):
            assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)), rel=1e-12)


def test_empty_distribution_is_none_not_zero() -> None:
    d = distribution([])
    assert d["n"] == 0 and d["mean"] is None and d["p50"] is None and d["p99"] is None


def test_cell_summary_matches_hand_computed_values() -> None:
    records = [
        # warm-up: must not count anywhere (it would otherwise dominate the maxima)
        rec(0.0, 9.0, 20.0, 100, 1000, phase="warmup"),
        # two measured, successful requests
        rec(30.0, 0.5, 2.5, 11, 100, itl=[0.2] * 10),  # decode 2.0 s for 10 tokens
        rec(31.0, 1.0, 5.0, 5, 300, itl=[1.0] * 4),  # decode 4.0 s for 4 tokens
        # one measured failure: counts as an error, and its span is in the window
        rec(32.0, 0.0, 4.0, 0, 50, success=False),
        # one cancelled by Ctrl-C: neither an error nor in the window
        {**rec(33.0, 0.0, 0.0, 0, 0, success=False, cancelled=True), "start_s": None, "latency_s": None},
    ]
    s = summarize_cell(records)
    assert summarize_cell(r for r in records) == s  # the runner passes a generator
    assert s["requests"] == 3
    assert s["completed"] == 2
    assert s["errors"] == 1
    assert s["cancelled"] == 1
    # window: first send 30.0 .. last end max(32.5, 36.0, 36.0) = 36.0
    assert s["window_s"] == pytest.approx(6.0)
    assert s["output_tokens_total"] == 16
    assert s["prompt_tokens_total"] == 400
    assert s["aggregate_output_tok_s"] == pytest.approx(16 / 6.0)
    assert s["request_throughput_rps"] == pytest.approx(2 / 6.0)
    # TTFT 500 ms and 1000 ms
    assert s["ttft_ms"]["mean"] == pytest.approx(750.0)
    assert s["ttft_ms"]["p50"] == pytest.approx(750.0)
    assert s["ttft_ms"]["p90"] == pytest.approx(950.0)
    assert s["ttft_ms"]["max"] == pytest.approx(1000.0)
    # TPOT: 2.0/10 = 200 ms, 4.0/4 = 1000 ms
    assert s["tpot_ms"]["mean"] == pytest.approx(600.0)
    assert s["tpot_ms"]["min"] == pytest.approx(200.0)
    # per-user decode: 10/2.0 = 5 tok/s, 4/4.0 = 1 tok/s
    assert s["per_user_decode_tok_s"]["mean"] == pytest.approx(3.0)
    assert s["per_user_decode_tok_s"]["max"] == pytest.approx(5.0)
    # prefill: 100/0.5 = 200, 300/1.0 = 300 tok/s
    assert s["prefill_tok_s"]["p50"] == pytest.approx(250.0)
    # ITL pooled: ten 200 ms gaps and four 1000 ms gaps
    assert s["itl_ms"]["n"] == 14
    assert s["itl_ms"]["mean"] == pytest.approx((10 * 200 + 4 * 1000) / 14)
    assert s["itl_ms"]["p50"] == pytest.approx(200.0)
    # latency 2.5 s and 5.0 s
    assert s["e2el_s"]["p50"] == pytest.approx(3.75)
    assert s["e2el_s"]["p99"] == pytest.approx(2.5 + 0.99 * 2.5)


def test_bunched_streams_are_flagged() -> None:
    from sparkpair_cli.bench.aggregate import is_bunched

    smooth = summarize_cell([rec(0.0, 0.1, 1.1, 11, 10, itl=[0.1] * 10)])
    assert smooth["bunched_gap_fraction"] == 0.0 and not is_bunched(smooth)
    # 8 of 10 gaps under 1 ms: the tokens came in two bursts
    bursty = summarize_cell([rec(0.0, 0.1, 1.1, 11, 10, itl=[0.0001] * 8 + [0.5, 0.4999])])
    assert bursty["bunched_gap_fraction"] == pytest.approx(0.8) and is_bunched(bursty)
    assert summarize_cell([rec(0.0, 0.1, 0.1, 1, 10)])["bunched_gap_fraction"] is None


def test_single_token_outputs_have_no_tpot_but_count_as_tokens() -> None:
    s = summarize_cell([rec(0.0, 0.1, 0.1, 1, 10), rec(0.0, 0.2, 0.2, 1, 10)])
    assert s["tpot_ms"]["n"] == 0 and s["tpot_ms"]["mean"] is None
    assert s["per_user_decode_tok_s"]["n"] == 0
    assert s["output_tokens_total"] == 2
    assert s["aggregate_output_tok_s"] == pytest.approx(2 / 0.2)


def test_all_failed_cell_has_errors_and_no_rates() -> None:
    s = summarize_cell([rec(1.0, 0.0, 0.5, 0, 10, success=False), rec(1.0, 0.0, 0.0, 0, 10, success=False)])
    assert s["completed"] == 0 and s["errors"] == 2
    assert s["ttft_ms"]["p50"] is None
    assert s["aggregate_output_tok_s"] == 0.0  # a 0.5 s window with no token
    assert math.isclose(s["window_s"], 0.5)


def test_no_measured_records_gives_empty_summary() -> None:
    s = summarize_cell([rec(0.0, 0.1, 1.0, 5, 5, phase="warmup")])
    assert s["requests"] == 0 and s["window_s"] is None and s["aggregate_output_tok_s"] is None
