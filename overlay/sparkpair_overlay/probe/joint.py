"""The linear backend and the o_proj chosen as one decision (a linear backend decides the ``wo_a`` layout
the o_proj is handed). Pure: the probe calls it with its rows (:func:`sparkpair_overlay.probe.run_probe`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..decision import pick_stable
from ..plan import OProjDecision, decide_o_proj
from ..probe_results import ProbeResults
from ..serve_matrix import Switches
from .choice import LINEAR_PATH, ServeChoice, ServePath, ServeRow, candidate_total, choose, served_switches_of


def choose_with_o_proj(
    paths: Sequence[ServePath],
    rows: Sequence[ServeRow],
    probe: ProbeResults,
    overrides: Mapping[str, str] | None = None,
    *,
    previous: Mapping[str, str] | None = None,
    previous_o_proj: tuple[str, tuple[int, int, int]] | None = None,
    base: Switches | None = None,
) -> tuple[ServeChoice, OProjDecision | None]:
    """The serve-path choice and the o_proj decision, with the linear backend chosen for both.

    A linear backend decides the ``wo_a`` layout the o_proj is handed, so for each correct linear
    candidate the o_proj is decided on that layout (:func:`sparkpair_overlay.plan.decide_o_proj` with
    ``probe``'s rows, which name their layout), and the linear candidate with the smallest sum of its
    own total and its o_proj decision's total wins (:func:`~sparkpair_overlay.decision.pick_stable`, the
    previous linear choice kept within the margin). Without a linear path, or with it forced, the
    o_proj is decided on the layout the plain choice makes.

    Returns:
        ``(serve choice, o_proj decision)``; the decision is ``None`` when ``probe`` has no o_proj rows.
    """
    base = base or Switches()

    def o_proj_on(choice: ServeChoice) -> OProjDecision | None:
        if not probe.o_proj:
            return None
        sw = served_switches_of(dict(choice.env), choice.args, base)
        return decide_o_proj(probe.capability, probe=probe, switches=sw, previous=previous_o_proj)

    plain = choose(paths, rows, overrides, previous=previous, base=base)
    linear = next((p for p in paths if p.name == LINEAR_PATH), None)
    if linear is None or not probe.o_proj or (overrides or {}).get(LINEAR_PATH):
        return plain, o_proj_on(plain)
    scored: list[tuple[float, str]] = []
    decisions: dict[str, tuple[ServeChoice, OProjDecision]] = {}
    for cand in linear.candidates:
        t_lin = candidate_total(linear, rows, cand.name)
        if t_lin is None:
            continue
        trial = choose(paths, rows, overrides, previous=previous, base=base,
                       fixed={LINEAR_PATH: (cand.name, "joint")})
        ch = next(c for c in trial.choices if c.path == LINEAR_PATH)
        if ch.candidate != cand.name or trial.stop:
            continue
        d = o_proj_on(trial)
        if d is None or d.source != "probe" or d.recipe is None or d.weight_layout is None:
            continue
        t_o = sum(o.us or 0.0 for o in probe.o_proj if o.backend == d.backend and o.recipe == d.recipe
                  and o.weight_layout == d.weight_layout)
        scored.append((t_lin + t_o, cand.name))
        decisions[cand.name] = (trial, d)
    if not scored:
        return plain, o_proj_on(plain)
    name, why = pick_stable(scored, [c.name for c in linear.candidates], (previous or {}).get(LINEAR_PATH))
    reason = (f"probe, with the o_proj it hands wo_a to: {why} of {len(scored)} (linear + o_proj totals: "
              + ", ".join(f"{n} {t:.1f} µs" for t, n in sorted(scored)) + ")")
    final = choose(paths, rows, overrides, previous=previous, base=base, fixed={LINEAR_PATH: (name, reason)})
    return final, decisions[name][1]


__all__ = ["choose_with_o_proj"]
