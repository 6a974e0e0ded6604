"""Which ``fp8_einsum`` config serves each token-count range: the probe's per-range choice.

Pure (no torch, no Triton, no vLLM): the probe makes the choice on the device and persists it in its
file (``kernel_path_decision``); the kernel plan (:mod:`sparkpair_overlay.plan`) adopts it while the
probe's rows on the served layout still hold it, or makes it again from those rows; the overlay then
installs it in the kernel (:func:`sparkpair_overlay.kernels.fp8_einsum.use_plan`).

The rule (:func:`choose_config_ranges`), for one operand layout:

* The probe times every candidate config of the kernel at each served token count T (the profile's
  CUDA-graph capture sizes and its prefill chunk points), each row checked against fp64
  (``kernel_paths`` rows, :class:`sparkpair_overlay.kernel_path_row.KernelPathRow`). Only rows taken on the
  served layout count (#30's rule: a row names the weight and activation layout it was timed on, and
  a row on another layout says nothing about the served operands).
* At each probed T, among the configs correct and timed there, :func:`sparkpair_overlay.decision.pick_stable`
  picks: the fastest, unless the previous choice at that T, or the built-in default's config for T
  (:mod:`sparkpair_overlay.kernels.fp8_einsum_plan`), is within
  :data:`~sparkpair_overlay.decision.DECISION_MARGIN` of it. So near-ties neither flip from one start to
  the next nor split the two nodes of a pair.
* T between two probed counts takes the choice of the next probed count above it (the CUDA graphs pad a
  batch up to the next capture size); T above the largest probed count takes the largest's choice.
  Adjacent equal choices merge into one range.

Where a probed T has no correct config the whole table stays the built-in default (the o_proj decision,
taken on the default table's rows, answers for correctness there) and the reason says which T.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .decision import DECISION_MARGIN, pick_stable
from .kernels.fp8_einsum_plan import UNBOUNDED, PlanTable, default_plan, plan_config_name, plan_problem
from .serve_matrix import Recipe, act_layout

if TYPE_CHECKING:
    from .jsonio import Fields
    from .kernel_path_row import KernelPathRow

__all__ = [
    "KERNEL",
    "ConfigPlan",
    "choose_config_ranges",
    "decide_o_proj_configs",
    "layout_key",
    "scales_fp32",
]

#: The ``kernel`` value of the probe rows this module reads.
KERNEL = "fp8_einsum"

_FP32_WEIGHTS = ("w3-fp32-block", "w2-fp32-block")


def layout_key(weight_layout: str, recipe: Recipe) -> str:
    """The layout a ``kernel_paths`` row names: ``"<weight layout>/<activation layout>"`` (for example
    ``w3-ue8m0-row/a-ue8m0-tma``; :data:`sparkpair_overlay.serve_matrix.WEIGHT_LAYOUTS` /
    :func:`~sparkpair_overlay.serve_matrix.act_layout` of the recipe the model quantises with)."""
    return f"{weight_layout}/{act_layout(recipe)}"


def scales_fp32(layout: str) -> bool:
    """Whether both scales of ``layout`` (:func:`layout_key`) are fp32: the kernel's fp32 table serves it,
    the UE8M0 table every other encoding
    (``sparkpair_overlay.kernels.fp8_einsum.select_fp8_einsum_config``)."""
    weight, _, act = layout.partition("/")
    return weight in _FP32_WEIGHTS and act == "a-fp32-tma"


@dataclass(frozen=True)
class ConfigPlan:
    """The ``fp8_einsum`` config per token-count range for one served layout.

    Attributes:
        layout: the operand layout (:func:`layout_key`) the table was chosen for.
        ranges: ``((max_T, config name), ...)`` in increasing ``max_T``, the last ``max_T``
            :data:`~sparkpair_overlay.kernels.fp8_einsum_plan.UNBOUNDED` (a kernel plan table).
        reasons: one per range: why its config, at each probed T in it.
        source: ``probe`` (chosen from rows on ``layout``) or ``default`` (the built-in table).
        reason: one line on the whole table (adopted from the probe file, made from rows, or why defaults).
    """

    layout: str
    ranges: PlanTable
    reasons: tuple[str, ...]
    source: str
    reason: str

    @property
    def fp32_scales(self) -> bool:
        """Which kernel table this is (:func:`scales_fp32`)."""
        return scales_fp32(self.layout)

    def config_at(self, t: int) -> str:
        """The config ``t`` tokens take."""
        return plan_config_name(self.ranges, t)

    def spans(self) -> list[tuple[int, int, str, str]]:
        """``(lo, hi, config, reason)`` per range (``hi`` :data:`UNBOUNDED` for the last)."""
        out, lo = [], 1
        for (hi, name), why in zip(self.ranges, self.reasons, strict=True):
            out.append((lo, hi, name, why))
            lo = hi + 1
        return out

    def label(self) -> str:
        """``T 1 dec_t16_d64_k4_w4, 2-16 dec_t16_d128_k4_w8, >=17 t64_d64_r2_s4``."""
        parts = [f">={lo} {name}" if hi == UNBOUNDED else f"{lo} {name}" if lo == hi else f"{lo}-{hi} {name}"
                 for lo, hi, name, _ in self.spans()]
        return "T " + ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"kernel": KERNEL, "layout": self.layout, "fp32_scales": self.fp32_scales,
                "ranges": [{"t_max": m, "config": n, "reason": r}
                           for (m, n), r in zip(self.ranges, self.reasons, strict=True)],
                "source": self.source, "reason": self.reason}

    @classmethod
    def from_json(cls, f: Fields) -> ConfigPlan:
        """Parse :meth:`to_json`'s object (raises :class:`~sparkpair_overlay.jsonio.PlanError` naming the
        field): the ranges must make a usable table (:func:`plan_problem`) of known config names when
        the caller checks names; here only their shape is checked."""
        ranges: list[tuple[int, str]] = []
        reasons: list[str] = []
        for r in f.objects("ranges"):
            ranges.append((r.value("t_max", int), r.value("config", str)))
            reasons.append(r.value("reason", str))
        problem = plan_problem(ranges, {n for _, n in ranges})
        if problem is not None:
            raise f.fail("ranges", [m for m, _ in ranges], f"a kernel plan table ({problem})")
        source = f.value("source", str)
        if source not in ("probe", "default"):
            raise f.fail("source", source, "probe or default")
        return cls(f.value("layout", str), tuple(ranges), tuple(reasons), source, f.value("reason", str))


#: What the built-in table rests on, said wherever it is used (kernels/fp8_einsum_plan.py).
DEFAULT_EVIDENCE = ("GB10's built-in table (argued from the 48-SM H100 proxy and published MMA rates, "
                    "not measured on GB10)")


def _default(layout: str, why: str) -> ConfigPlan:
    table = default_plan(scales_fp32(layout))
    return ConfigPlan(layout, table, tuple("built-in default" for _ in table), "default",
                      f"{why}: {DEFAULT_EVIDENCE}")


def choose_config_ranges(
    rows: Sequence[KernelPathRow],
    layout: str,
    previous: PlanTable | None = None,
    margin: float = DECISION_MARGIN,
) -> ConfigPlan:
    """The per-range choice from ``rows`` (see the module docstring).

    Args:
        rows: ``kernel_paths`` rows (any kernel and layout; only :data:`KERNEL` rows on ``layout`` count).
        layout: the served layout (:func:`layout_key`).
        previous: the table chosen last time (a config kept at each T while within ``margin``).
        margin: :data:`~sparkpair_overlay.decision.DECISION_MARGIN`.

    Returns:
        A :class:`ConfigPlan`: ``source`` ``probe`` with one range per run of equal choices, or the built-in
        default (``source`` ``default``) when no row is on ``layout`` or some probed T has no correct config.
    """
    mine = [r for r in rows if r.kernel == KERNEL and r.layout == layout]
    others = sorted({r.layout for r in rows if r.kernel == KERNEL and r.layout != layout})
    ignored = f"; rows on {', '.join(others)} ignored (served layout {layout})" if others else ""
    if not mine:
        return _default(layout, f"no kernel-path rows on {layout}{ignored}")
    defaults = default_plan(scales_fp32(layout))
    order = list(dict.fromkeys(r.config for r in mine))
    picks: list[tuple[int, str, str]] = []
    empty: list[int] = []
    for t in sorted({r.tokens for r in mine}):
        scored = [(float(r.us), r.config) for r in mine if r.tokens == t and r.ok and r.us is not None]
        if not scored:
            empty.append(t)
            continue
        first = plan_config_name(defaults, t)
        preference = [first] + [n for n in order if n != first]
        prev = plan_config_name(previous, t) if previous else None
        name, why = pick_stable(scored, preference, prev, margin)
        picks.append((t, name, f"T={t}: {why} of {len(scored)} correct"))
    if empty:
        return _default(layout, f"no correct config at T={empty} on {layout}{ignored}")
    ranges: list[tuple[int, str]] = []
    reasons: list[list[str]] = []
    for t, name, why in picks:
        if ranges and ranges[-1][1] == name:
            ranges[-1] = (t, name)
            reasons[-1].append(why)
        else:
            ranges.append((t, name))
            reasons.append([why])
    ranges[-1] = (UNBOUNDED, ranges[-1][1])
    return ConfigPlan(layout, tuple(ranges), tuple("; ".join(w) for w in reasons), "probe",
                      f"probe on {layout}: fastest correct config per range at {len(picks)} token "
                      f"counts{ignored}")


def _holds(plan: ConfigPlan, rows: Sequence[KernelPathRow]) -> bool:
    """Every probed T on the plan's layout has a correct, timed row for the config the plan gives it."""
    mine = [r for r in rows if r.kernel == KERNEL and r.layout == plan.layout]
    ts = {r.tokens for r in mine}
    good = {(r.tokens, r.config) for r in mine if r.ok and r.us is not None}
    return bool(ts) and all((t, plan.config_at(t)) in good for t in ts)


def decide_o_proj_configs(
    backend: str,
    weight_layout: str | None,
    recipe: Recipe | None,
    rows: Sequence[KernelPathRow],
    persisted: ConfigPlan | None = None,
) -> ConfigPlan | None:
    """The plan's per-range table for the served o_proj, or ``None`` when our kernel does not serve it.

    Args:
        backend, weight_layout, recipe: the o_proj decision (:class:`sparkpair_overlay.plan.OProjDecision`).
        rows: the probe's ``kernel_paths`` rows usable here (same device and switches; the caller filters).
        persisted: the probe file's ``kernel_path_decision``: adopted when it is for the served layout and
            the rows still hold it; else the choice is made again from the rows, keeping its configs
            within the margin.

    Returns:
        ``None`` unless ``backend`` is ``triton`` with a layout and recipe; else a :class:`ConfigPlan`.
    """
    if backend != "triton" or weight_layout is None or recipe is None:
        return None
    layout = layout_key(weight_layout, recipe)
    if persisted is not None and persisted.layout == layout and persisted.source == "probe" \
            and _holds(persisted, rows):
        return ConfigPlan(layout, persisted.ranges, persisted.reasons, "probe",
                          f"probe decision: {persisted.reason}")
    note = ""
    if persisted is not None and persisted.layout != layout:
        note = f"; the probe's decision was for {persisted.layout}, not {layout}: not used"
    same = persisted is not None and persisted.layout == layout
    chosen = choose_config_ranges(rows, layout, persisted.ranges if same and persisted is not None else None)
    return ConfigPlan(chosen.layout, chosen.ranges, chosen.reasons, chosen.source, chosen.reason + note)
