"""Per-cell summaries computed from the raw per-request records.

A record is one request as the client saw it (a dict, as stored in the result JSON under
``requests``)::

    cell_id: str            phase: "measured" | "warmup"
    success: bool           cancelled: bool (in flight when the run was interrupted)
    prompt_tokens: int      output_tokens: int      (from the server's usage chunk)
    start_s: float          seconds since the run started, when the request was sent
    ttft_s: float           seconds from send to the first streamed chunk
    latency_s: float        seconds from send to the last token chunk
    itl_s: list[float]      seconds between consecutive token chunks

Definitions (successful, measured, not cancelled requests unless stated):

- ``ttft_ms``: time to first token, per request.
- ``tpot_ms``: per request ``(latency - ttft) / (output_tokens - 1)``, for output_tokens > 1
  (vLLM ``bench serve``'s definition).
- ``itl_ms``: every inter-chunk gap of every request, pooled.
- ``e2el_s``: request latency, send to last token.
- ``per_user_decode_tok_s``: per request ``(output_tokens - 1) / (latency - ttft)``: the
  decode speed one user sees (the field's "C1 tok/s").
- ``prefill_tok_s``: per request ``prompt_tokens / ttft`` (includes queueing; at
  concurrency 1 it is the server's prefill speed plus one network round trip).
- ``aggregate_output_tok_s``: sum of output tokens over the cell's wall window, where the
  window runs from the first measured request's send to the last measured request's end
  (failed requests included in the window, their tokens not counted).
- ``bunched_gap_fraction``: share of those gaps shorter than :data:`BUNCHED_GAP_S`. Above
  :data:`BUNCHED_FRACTION` the tokens reached the client in bursts (an overloaded API
  server, e.g. on CPU): ITL and per-user decode tok/s then describe the bursts, not the
  model, and the plots and table flag the cell.
- ``errors``: measured requests that finished unsuccessfully (cancelled ones are counted
  separately in ``cancelled``).

Percentiles interpolate linearly between order statistics (numpy's default method).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

PERCENTILES = (50, 90, 99)
"""Percentiles reported for each latency metric."""

BUNCHED_GAP_S = 0.001
"""A gap between token chunks shorter than this (1 ms) is no decode step of any model we
serve (GB10 decode steps are ~10-40 ms; speculative decoding sends several tokens in one
chunk rather than chunks 1 ms apart)."""

BUNCHED_FRACTION = 0.5
"""A cell whose share of sub-:data:`BUNCHED_GAP_S` gaps exceeds this is flagged as bunched."""


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``values`` by linear interpolation.

    Same as ``numpy.percentile(values, p)`` (method ``linear``).

    Raises:
        ValueError: ``values`` is empty or ``p`` is outside [0, 100].
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile p={p}; want 0 <= p <= 100")
    xs = sorted(values)
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def distribution(values: Sequence[float], scale: float = 1.0) -> dict[str, float | int | None]:
    """``{n, mean, min, max, p50, p90, p99}`` of ``values`` multiplied by ``scale``.

    Empty input gives ``n = 0`` and ``None`` for every statistic (never 0, which would read
    as a measurement).
    """
    if not values:
        return {"n": 0, "mean": None, "min": None, "max": None, **{f"p{p}": None for p in PERCENTILES}}
    scaled = [v * scale for v in values]
    return {
        "n": len(scaled),
        "mean": sum(scaled) / len(scaled),
        "min": min(scaled),
        "max": max(scaled),
        **{f"p{p}": percentile(scaled, p) for p in PERCENTILES},
    }


def is_bunched(summary: dict[str, Any]) -> bool:
    """True when a cell summary's streams arrived in bursts (see ``bunched_gap_fraction``)."""
    frac = summary.get("bunched_gap_fraction")
    return frac is not None and frac > BUNCHED_FRACTION


def summarize_cell(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Summary of one cell's measured requests (see the module docstring for definitions).

    ``records`` may contain warm-up and cancelled records; they are excluded here. Units are
    in the key names (``_ms``, ``_s``, ``_tok_s``).
    """
    records = list(records)  # may be a generator; it is walked more than once
    measured = [r for r in records if r.get("phase") == "measured" and not r.get("cancelled")]
    ok = [r for r in measured if r.get("success")]
    cancelled_n = sum(1 for r in records if r.get("phase") == "measured" and r.get("cancelled"))

    ttft = [r["ttft_s"] for r in ok]
    e2el = [r["latency_s"] for r in ok]
    itl = [x for r in ok for x in r.get("itl_s", [])]
    tpot = []
    decode = []
    for r in ok:
        n_out = r["output_tokens"]
        decode_s = r["latency_s"] - r["ttft_s"]
        if n_out > 1 and decode_s > 0:
            tpot.append(decode_s / (n_out - 1))
            decode.append((n_out - 1) / decode_s)
    prefill = [r["prompt_tokens"] / r["ttft_s"] for r in ok if r["ttft_s"] > 0]

    out_tokens = sum(r["output_tokens"] for r in ok)
    prompt_tokens = sum(r["prompt_tokens"] for r in ok)
    window_s = None
    if measured:
        t0 = min(r["start_s"] for r in measured)
        t1 = max(r["start_s"] + r["latency_s"] for r in measured)
        window_s = t1 - t0 if t1 > t0 else None

    return {
        "requests": len(measured),
        "completed": len(ok),
        "errors": len(measured) - len(ok),
        "cancelled": cancelled_n,
        "window_s": window_s,
        "prompt_tokens_total": prompt_tokens,
        "output_tokens_total": out_tokens,
        "aggregate_output_tok_s": out_tokens / window_s if window_s else None,
        "request_throughput_rps": len(ok) / window_s if window_s else None,
        "per_user_decode_tok_s": distribution(decode),
        "prefill_tok_s": distribution(prefill),
        "ttft_ms": distribution(ttft, 1000.0),
        "tpot_ms": distribution(tpot, 1000.0),
        "itl_ms": distribution(itl, 1000.0),
        "bunched_gap_fraction": sum(1 for x in itl if x < BUNCHED_GAP_S) / len(itl) if itl else None,
        "e2el_s": distribution(e2el),
    }
