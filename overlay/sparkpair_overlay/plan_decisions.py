"""The per-layer decisions of the kernel plan: the router path and the o_proj backend and recipe.

Pure functions of device facts, probe results and overrides (no vLLM, no torch, no environment
reads); :mod:`sparkpair_overlay.plan` assembles them into the process's
:class:`~sparkpair_overlay.plan.KernelPlan` and re-exports every public name here.

Router (vLLM ``GateLinear``, ``vllm/model_executor/layers/fused_moe/router/gate_linear.py``):

* ``triton-bf16-lowM``: bf16 weight, tokens ``M <= max_m`` go to our Triton kernel, larger
  ``M`` to the same cuBLAS ``torch.mm(x, W.T, out_dtype=fp32)`` vLLM runs
  (gate_linear.py:282-285 in 0.32.0).
* ``triton-fp32-accurate``: fp32 weight, every ``M`` goes to our kernel (fp32 GEMV for small
  M, BF16x3 for large M, chosen inside the kernel module) instead of vLLM's fp32
  ``F.linear`` fallback (gate_linear.py:287-302).
* ``upstream``: vLLM's own tiers.

On GB10 (capability 12.1) vLLM enables none of its specialised tiers because they are
gated on Hopper or family 100 (gate_linear.py:63-82; docs/reference/vllm-code-paths.md#router-tiers), so the
overlay acts on
capability family 120 only and is a no-op elsewhere.

o_proj (``fp8_einsum("bhr,hdr->bhd", ...)`` in
``vllm/models/deepseek_v4/nvidia/ops/o_proj.py:89-95``):

* ``deepgemm``: the dispatcher is installed and hands every call to vLLM's original
  ``fp8_einsum`` (DeepGEMM).
* ``triton``: calls that pass :func:`einsum_route`'s predicate go to our Triton kernel,
  others to the original.
* ``upstream``: nothing is patched.

The recipe: vLLM picks ``(1,128,128)`` for ``major <= 9`` and ``(1,1,128)`` (packed UE8M0
``int32`` scales, TMA-aligned) otherwise (o_proj.py:28-31), so GB10 gets the SM100 recipe.
The plan may select ``(1,128,128)`` on family 120 (probe or ``SPARKPAIR_O_PROJ_RECIPE``);
then ``compute_fp8_einsum_recipe`` is patched in every module that bound it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .decision import pick_stable
from .jsonio import PlanError
from .o_proj_configs import ConfigPlan, decide_o_proj_configs
from .probe_results import Capability, OProjProbe, ProbeResults, Recipe
from .serve_matrix import (
    O_PROJ_CANDIDATES,
    RECIPE_SM90,
    RECIPE_SM100,
    Switches,
    linear_outcome,
    o_proj_verdict,
    router_layout,
)

__all__ = [
    "DEFAULT_ROUTER_MAX_M", "ROUTER_PATHS", "OProjDecision", "RouterDecision", "capability_family",
    "decide_o_proj", "decide_o_proj_configs_for", "decide_router", "format_capability",
    "probe_switch_mismatch", "recipe_scales_tma_aligned", "upstream_recipe",
]

#: Default M threshold (tokens) of the bf16 low-M router tier when the probe gives none.
#: Source: the decode range vLLM's own low-M router tier covers, ``GateLinear.FP32_MAX_TOKENS
#: = 32`` (gate_linear.py:45 in 0.32.0); the probe replaces it with the measured crossover.
DEFAULT_ROUTER_MAX_M = 32

ROUTER_PATHS = ("triton-bf16-lowM", "triton-fp32-accurate", "upstream")

def capability_family(cap: Capability | None) -> int | None:
    """vLLM's capability family: ``(major*10+minor)//10*10`` (e.g. (12,1) -> 120).

    Mirrors ``Platform.is_device_capability_family`` (platforms/interface.py:577-588 in
    0.32.0): 12.1 is family 120, not family 100, although ``has_device_capability(100)`` is
    True (docs/reference/vllm-code-paths.md#router-tiers). ``None`` (no CUDA device) has no family.
    """
    if cap is None:
        return None
    return (cap[0] * 10 + cap[1]) // 10 * 10


def format_capability(cap: Capability | None) -> str:
    """``"12.1"`` or ``"cpu"``."""
    return "cpu" if cap is None else f"{cap[0]}.{cap[1]}"


def upstream_recipe(cap: Capability) -> tuple[Recipe, bool]:
    """The ``(recipe, tma_aligned_scales)`` vLLM's ``compute_fp8_einsum_recipe`` returns.

    Source: ``vllm/models/deepseek_v4/nvidia/ops/o_proj.py:28-31`` (0.32.0 and 0.33.0):
    ``(1,128,128)`` if ``major <= 9`` else ``(1,1,128)``; ``tma_aligned = major >= 10``.
    """
    recipe = RECIPE_SM90 if cap[0] <= 9 else RECIPE_SM100
    return recipe, cap[0] >= 10


def recipe_scales_tma_aligned(recipe: Recipe) -> bool:
    """``tma_aligned_scales`` the overlay pairs with a recipe it selects on family 120.

    ``(1,1,128)`` needs packed UE8M0 ``int32`` (True); ``(1,128,128)`` uses plain fp32 per-128
    scales (False), as SM90 does (o_proj.py:31) and as upstream PR #52357 proposed for SM12x.
    """
    return recipe == RECIPE_SM100


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class RouterDecision:
    """Which path a ``GateLinear`` with a given weight dtype takes.

    Attributes:
        path: one of :data:`ROUTER_PATHS`.
        max_m: for ``triton-bf16-lowM``, the largest token count (rows of x) sent to Triton;
            ``None`` for the other paths (fp32-accurate takes every M).
        reason: why, in words.
    """

    path: str
    max_m: int | None
    reason: str

    @property
    def label(self) -> str:
        """``triton-bf16-lowM(M<=32)``, ``triton-fp32-accurate`` or ``upstream``."""
        return f"{self.path}(M<={self.max_m})" if self.max_m is not None else self.path


@dataclass(frozen=True)
class OProjDecision:
    """What the o_proj ``fp8_einsum`` does on this device.

    Attributes:
        backend: one of :data:`O_PROJ_BACKENDS`.
        recipe: the recipe the model will use (``None`` where nothing is decided: no CUDA).
        patch_recipe: True when ``recipe`` differs from upstream's, so
            ``compute_fp8_einsum_recipe`` must be patched.
        reason: why, in words.
        weight_layout: the ``wo_a`` layout (:data:`sparkpair_overlay.serve_matrix.WEIGHT_LAYOUTS`) the
            decision was made for, from the switches the plan saw; ``None`` when not family 120 or
            the switches leave no servable ``wo_a``. The construction check compares it with the
            layout the model really gets.
        source: ``probe`` (timed rows on that layout), ``default`` (no usable rows), ``forced``
            (``SPARKPAIR_O_PROJ``/``SPARKPAIR_O_PROJ_RECIPE``) or ``upstream``.
    """

    backend: str
    recipe: Recipe | None
    patch_recipe: bool
    reason: str
    weight_layout: str | None = None
    source: str = "default"

    @property
    def label(self) -> str:
        """``triton(1,1,128)``, ``deepgemm(1,128,128)`` or ``upstream``."""
        if self.backend == "upstream" or self.recipe is None:
            return "upstream"
        return f"{self.backend}({','.join(str(v) for v in self.recipe)})"


def _probe_for(probe: ProbeResults | None, cap: Capability) -> tuple[ProbeResults | None, str]:
    if probe is None:
        return None, "no probe results"
    if probe.capability != cap:
        return None, (
            f"probe results are for cap {format_capability(probe.capability)}, "
            f"this device is {format_capability(cap)}: ignored"
        )
    return probe, "probe results"


def probe_switch_mismatch(probe: ProbeResults, switches: Switches) -> str | None:
    """Why ``probe``'s o_proj rows were taken under other vLLM switches than ``switches``, or ``None``.

    Compared: ``VLLM_USE_DEEP_GEMM``, ``VLLM_USE_DEEP_GEMM_E8M0`` and the DeepGEMM source; the linear
    backend is not (the probe measures the o_proj on every layout its linear candidates make, and
    each row names its layout).
    """
    ps = probe.switches
    if ps is None:
        return "the probe file records no switches"
    diffs = [f"{name} {a} in the probe, {b} here" for name, a, b in (
        ("VLLM_USE_DEEP_GEMM", int(ps.use_deep_gemm), int(switches.use_deep_gemm)),
        ("VLLM_USE_DEEP_GEMM_E8M0", int(ps.use_deep_gemm_e8m0), int(switches.use_deep_gemm_e8m0)),
        ("DeepGEMM", ps.deepgemm, switches.deepgemm),
    ) if a != b]
    return "; ".join(diffs) or None


def decide_router(
    cap: Capability | None,
    weight_dtype: str,
    *,
    mode: str = "auto",
    max_m_override: int | None = None,
    probe: ProbeResults | None = None,
    kernel_error: str | None = None,
    shape: tuple[int, int] | None = None,
    platform: str = "cuda",
) -> RouterDecision:
    """Decide the router path for one weight dtype.

    Args:
        cap: device capability ``(major, minor)``; ``None`` for no CUDA device.
        weight_dtype: ``"bfloat16"`` or ``"float32"`` (anything else: upstream).
        mode: ``SPARKPAIR_ROUTER`` (``auto`` | ``triton`` | ``upstream``).
        max_m_override: ``SPARKPAIR_ROUTER_MAX_M`` (tokens) or ``None``.
        probe: probe results (ignored unless measured on ``cap``); only rows taken on the operand
            layout this weight dtype is served with (:func:`sparkpair_overlay.serve_matrix.router_layout`)
            count.
        kernel_error: why ``sparkpair_overlay.kernels.router_gemm`` could not be imported,
            or ``None`` if it imports.
        shape: ``(N, K)`` of the gate weight (experts, hidden); probe entries recorded for
            another shape are ignored. ``None`` = any shape.
        platform: ``cuda``, ``rocm``, ``cpu``, ... (only ``cuda`` is ever patched).

    Returns:
        A :class:`RouterDecision`; ``upstream`` unless the device is CUDA family 120.

    Raises:
        PlanError: ``mode`` is not one of auto, triton, upstream.
    """
    if mode not in ("auto", "triton", "upstream"):
        raise PlanError(f"SPARKPAIR_ROUTER={mode!r}; wanted auto, triton or upstream")
    if mode == "upstream":
        return RouterDecision("upstream", None, "SPARKPAIR_ROUTER=upstream")
    if cap is None or platform != "cuda":
        return RouterDecision("upstream", None, f"no CUDA device (platform {platform})")
    if capability_family(cap) != 120:
        forced = " (SPARKPAIR_ROUTER=triton ignored)" if mode == "triton" else ""
        return RouterDecision(
            "upstream", None,
            f"cap {format_capability(cap)} is not family 120: vLLM's tiers apply{forced}",
        )
    layout = router_layout(weight_dtype)
    if layout is None:
        return RouterDecision("upstream", None, f"weight dtype {weight_dtype} has no Triton tier")
    if kernel_error is not None:
        return RouterDecision("upstream", None, f"router kernel unavailable: {kernel_error}")
    usable, probe_note = _probe_for(probe, cap)
    entries = [
        r for r in (usable.router if usable else ())
        if r.weight_dtype == weight_dtype and r.layout == layout
        and (shape is None or r.shape is None or r.shape == shape)
    ]
    if weight_dtype == "float32":
        ours = [r for r in entries if r.path == "triton-fp32-accurate"]
        failed = sorted(r.m for r in ours if not r.ok)
        if failed and mode == "auto":
            return RouterDecision("upstream", None, f"probe: triton-fp32-accurate failed at M={failed}")
        note = f"forced over probe failure at M={failed}" if failed else (
            "probe: correct at M=" + str(sorted(r.m for r in ours)) if ours else probe_note)
        return RouterDecision("triton-fp32-accurate", None, f"fp32 weight, family 120; {note}")
    # bf16 weight: low-M Triton tier in front of vLLM's cuBLAS tier.
    lowm = {r.m: r for r in entries if r.path == "triton-bf16-lowM"}
    theirs = {r.m: r for r in entries if r.path == "cublas"}
    failed = sorted(m for m, r in lowm.items() if not r.ok)
    if failed and mode == "auto":
        return RouterDecision("upstream", None, f"probe: triton-bf16-lowM failed at M={failed}")
    if max_m_override is not None:
        return RouterDecision("triton-bf16-lowM", max_m_override, "SPARKPAIR_ROUTER_MAX_M override")
    crossover: int | None = None
    if lowm and theirs:
        for m in sorted(lowm):
            a, b = lowm[m], theirs.get(m)
            if b is None or a.us is None or b.us is None:
                continue
            if a.ok and a.us < b.us:
                crossover = m
            else:
                break
        if crossover is None:
            if mode == "auto":
                return RouterDecision("upstream", None, "probe: cuBLAS is faster at every probed M")
            return RouterDecision("triton-bf16-lowM", DEFAULT_ROUTER_MAX_M,
                                  "SPARKPAIR_ROUTER=triton over a probe that found cuBLAS faster")
        return RouterDecision("triton-bf16-lowM", crossover, f"probe: Triton faster up to M={crossover}")
    why = "SPARKPAIR_ROUTER=triton" if mode == "triton" else probe_note
    return RouterDecision("triton-bf16-lowM", DEFAULT_ROUTER_MAX_M, f"bf16 weight, family 120; {why}")


def _o_proj_rows(usable: ProbeResults | None, backend: str, recipe: Recipe, weight: str) -> list[OProjProbe]:
    return [o for o in (usable.o_proj if usable else ())
            if o.backend == backend and o.recipe == recipe and o.weight_layout == weight]


def decide_o_proj(
    cap: Capability | None,
    *,
    mode: str = "auto",
    recipe_override: Recipe | None = None,
    probe: ProbeResults | None = None,
    kernel_error: str | None = None,
    platform: str = "cuda",
    switches: Switches | None = None,
    previous: tuple[str, Recipe] | None = None,
) -> OProjDecision:
    """Decide the o_proj ``fp8_einsum`` backend and recipe for the ``wo_a`` layout the switches make.

    Args:
        cap: device capability; ``None`` for no CUDA device.
        mode: ``SPARKPAIR_O_PROJ`` (``auto`` | ``deepgemm`` | ``triton`` | ``upstream``).
        recipe_override: ``SPARKPAIR_O_PROJ_RECIPE`` or ``None``.
        probe: probe results (ignored unless measured on ``cap`` under the same DeepGEMM switches);
            only rows taken on the served layout count, and its persisted decision is adopted when it
            is for that layout and its rows still hold.
        kernel_error: why ``sparkpair_overlay.kernels.fp8_einsum`` could not be imported, or
            ``None`` if it imports.
        platform: ``cuda``, ``rocm``, ``cpu``, ...
        switches: the vLLM switches the model will be served with (default: vLLM's defaults); they
            fix the ``wo_a`` layout (:func:`sparkpair_overlay.serve_matrix.linear_outcome`).
        previous: the ``(backend, recipe)`` decided last time (the probe passes it: kept while within
            :data:`DECISION_MARGIN` of the fastest).

    Returns:
        An :class:`OProjDecision`. On family 120 with ``auto``: among the (backend, recipe)
        candidates the matrix serves on that layout, those the probe found correct at every probed T
        on it, chosen by :func:`pick_stable`; DeepGEMM is never chosen without such rows
        (docs/reference/vllm-code-paths.md#gb10-on-deepgemm); without rows, Triton with upstream's
        recipe. A forced backend gets the override's recipe, else its best correct recipe on the
        layout, else one the matrix serves there, else upstream's.

    Raises:
        PlanError: ``mode`` is not a known value.
    """
    if mode not in ("auto", "deepgemm", "triton", "upstream"):
        raise PlanError(f"SPARKPAIR_O_PROJ={mode!r}; wanted auto, deepgemm, triton or upstream")
    if mode == "upstream":
        return OProjDecision("upstream", None, False, "SPARKPAIR_O_PROJ=upstream", source="upstream")
    if cap is None or platform != "cuda":
        return OProjDecision("upstream", None, False, f"no CUDA device (platform {platform})",
                             source="upstream")
    up_recipe, _ = upstream_recipe(cap)
    if capability_family(cap) != 120:
        forced = f" (SPARKPAIR_O_PROJ={mode} ignored)" if mode != "auto" else ""
        return OProjDecision(
            "upstream", None, False,
            f"cap {format_capability(cap)} is not family 120: vLLM's recipe {up_recipe} and DeepGEMM{forced}",
            source="upstream",
        )
    sw = switches or Switches()
    weight = linear_outcome(sw).weight
    usable, probe_note = _probe_for(probe, cap)
    if usable is not None and usable.o_proj:
        mismatch = probe_switch_mismatch(usable, sw)
        if mismatch is not None:
            usable, probe_note = None, f"probe rows taken under other switches ({mismatch}): ignored"
    candidates = list(O_PROJ_CANDIDATES)
    if recipe_override is not None:
        candidates = [c for c in candidates if c[1] == recipe_override]
    if mode != "auto":
        candidates = [c for c in candidates if c[0] == mode]
    if kernel_error is not None:
        if mode == "triton":
            return OProjDecision("upstream", None, False, f"o_proj kernel unavailable: {kernel_error}",
                                 source="upstream")
        candidates = [c for c in candidates if c[0] != "triton"]

    def decision(backend: str, recipe: Recipe, why: str, source: str) -> OProjDecision:
        return OProjDecision(backend, recipe, recipe != up_recipe, why, weight, source)

    served = [c for c in candidates
              if weight is not None and o_proj_verdict(c[0], c[1], weight, deepgemm=sw.deepgemm).served]
    failed_ckpt = [c for c in (usable.checkpoint if usable else ()) if c.weight_layout == weight and not c.ok]
    if failed_ckpt and mode == "auto":
        served = [c for c in served if c[0] != "triton"]
        probe_note += f"; the checkpoint's own wo_a failed on {weight}: {failed_ckpt[0].error}"
    scored: list[tuple[float, str]] = []
    names: dict[str, tuple[str, Recipe]] = {}
    for backend, recipe in served:
        rows = _o_proj_rows(usable, backend, recipe, weight or "")
        if rows and all(o.ok and o.us is not None for o in rows):
            name = f"{backend}{recipe}"
            names[name] = (backend, recipe)
            scored.append((sum(o.us for o in rows if o.us is not None), name))
    other = sorted({o.weight_layout for o in (usable.o_proj if usable else ()) if o.weight_layout != weight})
    if other:
        probe_note += f"; rows on {', '.join(other)} ignored (served wo_a layout: {weight})"
    if mode == "auto":
        persisted = usable.o_proj_decision if usable is not None else None
        if persisted is not None and persisted.weight_layout == weight \
                and f"{persisted.backend}{persisted.recipe}" in names:
            return decision(persisted.backend, persisted.recipe, f"probe decision: {persisted.reason}",
                            "probe")
        if scored:
            prev = f"{previous[0]}{previous[1]}" if previous is not None else None
            name, why = pick_stable(scored, [f"{b}{r}" for b, r in O_PROJ_CANDIDATES], prev)
            backend, recipe = names[name]
            return decision(backend, recipe, f"probe on {weight}: {why} of {len(scored)} correct", "probe")
        if usable is not None and any(o.weight_layout == weight for o in usable.o_proj):
            return OProjDecision("upstream", None, False,
                                 f"probe: no o_proj candidate was correct on {weight}", weight, "upstream")
        if kernel_error is not None or failed_ckpt:
            why = f"o_proj kernel unavailable: {kernel_error}" if kernel_error else "Triton not used"
            return OProjDecision("upstream", None, False, f"{probe_note}; {why}", weight, "upstream")
        recipe = recipe_override or up_recipe
        return decision("triton", recipe, f"{probe_note}; DeepGEMM unproven on family 120, Triton", "default")
    # Forced backend: the override's recipe, else its best correct recipe on this layout, else one
    # the matrix serves here, else upstream's (the construction check then names the problem).
    if recipe_override is not None:
        recipe = recipe_override
    elif scored:
        recipe = names[min(scored)[1]][1]
    elif served:
        recipe = served[0][1] if (mode, up_recipe) not in served else up_recipe
    else:
        recipe = up_recipe
    bad = [o.t for o in _o_proj_rows(usable, mode, recipe, weight or "") if not o.ok]
    warn = f"; probe found it wrong at T={sorted(bad)}" if bad else ""
    return decision(mode, recipe, f"SPARKPAIR_O_PROJ={mode}{warn}", "forced")


def decide_o_proj_configs_for(decision: OProjDecision, cap: Capability | None, probe: ProbeResults | None,
                              switches: Switches | None = None) -> ConfigPlan | None:
    """The ``fp8_einsum`` config per token-count range when our kernel serves the o_proj, else ``None``.

    The probe's ``kernel_paths`` rows count only when taken on ``cap`` under the same DeepGEMM switches
    (as the o_proj rows, :func:`probe_switch_mismatch`) and on the served layout (the decision's ``wo_a``
    layout with the activation layout of its recipe); its persisted ``kernel_path_decision`` is adopted
    while those rows hold it (:func:`sparkpair_overlay.o_proj_configs.decide_o_proj_configs`). Without
    such rows: GB10's built-in table (:mod:`sparkpair_overlay.kernels.fp8_einsum_plan`), which says what
    evidence it rests on.
    """
    if decision.backend != "triton" or cap is None:
        return None
    usable, note = _probe_for(probe, cap)
    if usable is not None and usable.kernel_paths:
        mismatch = probe_switch_mismatch(usable, switches or Switches())
        if mismatch is not None:
            usable, note = None, f"kernel-path rows taken under other switches ({mismatch}): ignored"
    plan = decide_o_proj_configs(decision.backend, decision.weight_layout, decision.recipe,
                                 usable.kernel_paths if usable is not None else (),
                                 usable.kernel_path_decision if usable is not None else None)
    if plan is not None and usable is None and probe is not None:
        plan = replace(plan, reason=f"{note}; {plan.reason}")
    return plan

