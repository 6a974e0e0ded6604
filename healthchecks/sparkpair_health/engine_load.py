"""The engine's own signals of work: is a slow answer a busy engine or a wedged one?

vLLM's ``/metrics`` (``vllm/v1/metrics/loggers.py``, 0.32 and 0.33; names proven on the real CPU
server by ``tests/vllm_real/test_canary_soak.py`` and in 0.33's source by
``tests/stack/test_engine_load_metrics.py``):

- ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` (gauges): requests scheduled
  (prefilling or decoding) and queued;
- ``vllm:iteration_tokens_total`` (a histogram; ``_count`` and ``_sum`` samples): observed once
  for **every engine step**, even a step that only prefills a chunk and outputs nothing (the
  scheduler returns its stats every step), so ``_count`` moves while a long prompt is in
  chunked prefill;
- ``vllm:generation_tokens_total`` and ``vllm:prompt_tokens_total`` (counters): they move when
  tokens are generated, and when a prefill *finishes*; neither shows a long prefill in progress.

:func:`judge_slow` reads two samples: an engine with a request running whose step counter (or
token counters) moved between them is **busy**; one whose counters stood still is **wedged**
(or its peer is gone: a tensor-parallel step waits on every rank). Runs in the slim client.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

ENGINE_SAMPLES = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "steps": "vllm:iteration_tokens_total_count",
    "step_tokens": "vllm:iteration_tokens_total_sum",
    "generated": "vllm:generation_tokens_total",
    "prompt": "vllm:prompt_tokens_total",
}
"""Field -> Prometheus sample name (summed over engines and label sets)."""


@dataclass(frozen=True)
class EngineLoad:
    """vLLM's engine signals at one moment (counts; ``steps`` is engine steps since start)."""

    running: float
    waiting: float
    steps: float
    step_tokens: float
    generated: float
    prompt: float

    def moved_since(self, before: EngineLoad) -> list[str]:
        """Which progress counters rose since ``before`` (with by how much)."""
        out = []
        for fld in ("steps", "step_tokens", "generated", "prompt"):
            d = getattr(self, fld) - getattr(before, fld)
            if d > 0:
                out.append(f"{ENGINE_SAMPLES[fld]} +{d:g}")
        return out


def read_samples(text: str, names: dict[str, str]) -> dict[str, float] | None:
    """``{field: value}`` for ``names`` (field -> sample name) in Prometheus text, each summed
    over label sets; ``None`` when a name is missing, a sample is not a finite number, or the
    text is not Prometheus format."""
    wanted = {v: k for k, v in names.items()}
    got: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = wanted.get(sample.name)
                if key is None:
                    continue
                v = float(sample.value)
                if not math.isfinite(v):
                    return None
                got[key] = got.get(key, 0.0) + v
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    return got if set(got) == set(names) else None


def parse_engine_load(text: str) -> EngineLoad | None:
    """The engine signals in Prometheus text, or ``None`` (:func:`read_samples`: a server that is
    not vLLM, or a proxy, gives no signal, so a slow answer stays a timeout)."""
    got = read_samples(text, ENGINE_SAMPLES)
    return None if got is None else EngineLoad(**got)


def judge_slow(
    before: EngineLoad | None, after: EngineLoad | None, waited_s: float, peak_running: float = 0.0
) -> tuple[bool, str]:
    """(busy, why) for an answer that did not come within the canary's deadline.

    Busy: requests running (at ``after``, or ``peak_running``: the most any reading between the
    two saw) and at least one progress counter moved since ``before`` (taken as the tick started,
    ``waited_s`` earlier). Anything else is not busy: no signal (``None``: the server exports
    none), no request running at any reading, or counters standing still.

    ``peak_running`` matters when the batch the canary queued behind ends just before the last
    reading while the canary's own request has not reached the engine yet (an API server starved
    under load): the engine worked through the tick, and holds nothing at that instant.
    """
    if before is None or after is None:
        return (
            False,
            "the server exports no engine counters (vllm:num_requests_running, ...) to tell busy from wedged",
        )
    moved = after.moved_since(before)
    if max(after.running, peak_running) > 0 and moved:
        running = f"{after.running:g} request(s) running"
        if peak_running > after.running:
            running += f" (up to {peak_running:g} during the wait)"
        return True, (
            f"the engine is busy, not wedged: {running}, "
            f"{after.waiting:g} waiting, and in {waited_s:.1f} s {', '.join(moved)}"
        )
    if not moved:
        return False, (
            f"the engine's counters stood still for {waited_s:.1f} s ({after.running:g} running, "
            f"{after.waiting:g} waiting; {ENGINE_SAMPLES['steps']} stayed {after.steps:g}): "
            "wedged, or a peer gone"
        )
    return False, f"no request running ({after.waiting:g} waiting) although the canary's was sent"
