"""The rule every timed choice follows: the fastest, unless a stable alternative is within the margin.

Pure (no imports beyond the standard library): the plan (:mod:`sparkpair_overlay.plan`) and the probe's
serve-path choice (:mod:`sparkpair_overlay.probe.choice`) both decide with it, so a near-tie is broken
the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

#: Fraction of the fastest total time within which a timed choice does not follow the clock:
#: the previous decision is kept (the probe file holds it), else the candidate first in the fixed
#: preference order wins. 8 %: about twice the spread of CUDA-graph replay p50 between two timings
#: of one kernel on the same operands in one run (benchmarks/results/o_proj_layouts.csv, the H100
#: run that timed the default o_proj layout twice: up to 4.4 %, at T = 2048), so
#: near-equal candidates neither flip from one start to the next nor split the two nodes of a pair.
DECISION_MARGIN = 0.08


def pick_stable(
    scored: Sequence[tuple[float, str]],
    preference: Sequence[str],
    previous: str | None = None,
    margin: float = DECISION_MARGIN,
) -> tuple[str, str]:
    """The stable choice among timed candidates: ``(name, why)``.

    Args:
        scored: ``(total µs, name)`` of every qualifying candidate (non-empty).
        preference: every name in the fixed order that breaks near-ties.
        previous: the name chosen last time (kept while within ``margin`` of the fastest).
        margin: :data:`DECISION_MARGIN`.

    Raises:
        ValueError: ``scored`` is empty.
    """
    if not scored:
        raise ValueError("pick_stable: no qualifying candidate")
    best_t, best = min(scored)
    limit = best_t * (1.0 + margin)
    times = {n: t for t, n in scored}
    if previous in times and times[previous] <= limit:
        if previous == best:
            return previous, "fastest, as last time"
        return previous, (f"kept from the previous probe: {times[previous]:.1f} µs, within {margin:.0%} "
                          f"of the fastest ({best} {best_t:.1f} µs)")
    near = [n for n in preference if n in times and times[n] <= limit]
    pick = near[0] if near else best
    if pick == best:
        return pick, "fastest"
    return pick, (f"within {margin:.0%} of the fastest ({best} {best_t:.1f} µs) and first in the preference "
                  "order")


__all__ = ["DECISION_MARGIN", "pick_stable"]
