"""The one matrix of what can be served on capability family 120: served, or refused by name.

Every choice the node can end up with on family 120 is a combination of

* the vLLM switches that change what DeepSeek-V4's o_proj is handed (:class:`Switches`):
  ``--linear-backend`` (or ``linear_backend_per_quant["fp8_block_w8a8"]``), ``VLLM_USE_DEEP_GEMM``,
  ``VLLM_USE_DEEP_GEMM_E8M0``, and which DeepGEMM vLLM imports (its vendored copy, or a top-level
  ``deep_gemm`` package that shadows it);
* the o_proj backend and recipe (``SPARKPAIR_O_PROJ``, ``SPARKPAIR_O_PROJ_RECIPE``, the probe);
* the router tier and the gate's weight dtype.

This module derives, for each combination, the operand layouts vLLM 0.33 hands the o_proj
(:func:`linear_outcome`, in :mod:`sparkpair_overlay.serve_switches` and re-exported here: which FP8
block kernel vLLM picks for ``wo_a`` and what its weight post-processing leaves; the recipe fixes the
activation layout) and whether the backend takes
them (:func:`o_proj_verdict`). Facts: docs/reference/vllm-code-paths.md#o_proj-scales and
docs/reference/vllm-code-paths.md#linear-backends. The probe's candidates (:data:`O_PROJ_CANDIDATES`,
:func:`o_proj_candidates_on`), the plan's choices (:func:`sparkpair_overlay.plan.decide_o_proj`) and
the refusals at model construction (:mod:`sparkpair_overlay.patches.o_proj`) are all read from
here; ``tests/stack/test_stack_serve_matrix.py`` runs one forward per layout it names through
vLLM 0.33's own weight post-processing.

The facts hold for every release the stack tier runs (0.33.0 and 0.34.0, ``versions.RELEASES``): the
kernel lists, the post-processing and DeepGEMM's checks are the same in both. Where a release differs,
the difference is a field of :class:`Switches` read from that release's record: vLLM 0.34 reports
DeepGEMM unsupported without an ``nvcc`` >= 12.9 (:attr:`Switches.deepgemm_unsupported`), which acts
like ``VLLM_USE_DEEP_GEMM=0``. How each release's attention reaches the o_proj (the smallest part
that owns it, which the stack tier builds) is :attr:`sparkpair_overlay.versions.Release.o_proj_owner`.

Pure: no torch, no vLLM.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from .serve_switches import (
    DEEPGEMM_SOURCES,
    FP8_BLOCK_KERNEL,
    LINEAR_BACKENDS,
    LinearOutcome,
    Switches,
    linear_outcome,
    switches_from_env,
)

Recipe = tuple[int, int, int]

#: vLLM's recipe for capability major >= 10 (GB10 included): packed UE8M0 ``int32`` scales.
RECIPE_SM100: Recipe = (1, 1, 128)
#: vLLM's recipe for capability major <= 9: fp32 per-128 scales (the overlay may pick it on GB10).
RECIPE_SM90: Recipe = (1, 128, 128)

# --------------------------------------------------------------------------- operand layouts

#: Weight-side layouts of ``wo_a`` after vLLM 0.33's weight post-processing on family 120, by name.
#: G groups, D = o_lora_rank rows per group, R = reduction length (TP=2: 4, 1024, 4096).
WEIGHT_LAYOUTS: Mapping[str, str] = {
    "w3-ue8m0-row": (
        "wo_a e4m3 [G, D, R]; scale int32 [G, D, ceil(R/512)], each row holding its 128x128 block's "
        "UE8M0 scales packed four per word, MN-major, TMA-aligned (DeepGEMM's "
        "transform_sf_into_required_layout on arch 12)"
    ),
    "w3-fp32-block": (
        "wo_a e4m3 [G, D, R]; scale fp32 [G, D/128, R/128] (the same transform with "
        "disable_ue8m0_cast, i.e. VLLM_USE_DEEP_GEMM_E8M0=0)"
    ),
    "w2-e8m0-block": (
        "wo_a e4m3 [G*D, R], the checkpoint layout; scale float8_e8m0fnu [G*D/128, R/128] "
        "(a non-DeepGEMM FP8 block kernel: triton, cutlass)"
    ),
    "w2-fp32-block": (
        "wo_a e4m3 [G*D, R]; scale fp32 [G*D/128, R/128] (b12x upcasts the checkpoint's scales; "
        "a DeepSeek-V4-Flash-Base checkpoint stores fp32 scales)"
    ),
    "repacked": "wo_a repacked into the Marlin/Humming weight-only layout, which no einsum reads",
    "external": (
        "wo_a [G, D, R] with whatever scale layout a top-level deep_gemm package's transform makes "
        "(not the DeepGEMM vLLM 0.33 vendors)"
    ),
}
#: The layouts the overlay's Triton kernel reads (2-D ones viewed as [G, D, R] and [G, D/128, R/128]).
TRITON_WEIGHT_LAYOUTS = ("w3-ue8m0-row", "w3-fp32-block", "w2-e8m0-block", "w2-fp32-block")
#: The layouts with ``wo_a`` still in its 2-D checkpoint form.
TWO_D_WEIGHT_LAYOUTS = ("w2-e8m0-block", "w2-fp32-block")

#: Activation-side layouts, by the recipe that makes them (``fused_inv_rope_fp8_quant``).
ACT_LAYOUTS: Mapping[str, str] = {
    "a-ue8m0-tma": (
        "a e4m3 [T, G, R] group-major (strides (R, T*R, 1)); scale int32 [T, G, R/512] packed UE8M0, "
        "MN-major, T padded to a multiple of 4 (tma_aligned_scales=True): recipe (1,1,128)"
    ),
    "a-fp32-tma": (
        "a e4m3 [T, G, R] group-major; scale fp32 [T, G, R/128], MN-major, T padded to a multiple of 4 "
        "(tma_aligned_scales=False): recipe (1,128,128)"
    ),
}


def act_layout(recipe: Recipe) -> str:
    """The activation layout vLLM's ``fused_inv_rope_fp8_quant`` makes for ``recipe``."""
    return "a-ue8m0-tma" if tuple(recipe) == RECIPE_SM100 else "a-fp32-tma"


#: Router operand layouts per gate weight dtype (x is the model's bf16 hidden state; DeepSeek-V4's
#: gate has no ``params_dtype``, so its weight is bf16: docs/reference/vllm-code-paths.md#router-tiers).
ROUTER_LAYOUTS: Mapping[str, str] = {
    "bfloat16": "x-bf16-rowmajor/w-bf16-rowmajor",
    "float32": "x-bf16-rowmajor/w-fp32-rowmajor",
}
#: Router tier each gate dtype can take on family 120 besides vLLM's own (``upstream``).
ROUTER_TIERS: Mapping[str, str] = {"bfloat16": "triton-bf16-lowM", "float32": "triton-fp32-accurate"}


def router_layout(weight_dtype: str) -> str | None:
    """The router operand layout for a gate weight dtype, or ``None`` (no overlay tier takes it)."""
    return ROUTER_LAYOUTS.get(weight_dtype)


# --------------------------------------------------------------------------- (backend, recipe, layout)

#: The o_proj (backend, recipe) candidates, in the preference order ties are broken by: the
#: overlay's kernel first (proven on every served layout by the stack tier), then DeepGEMM.
O_PROJ_CANDIDATES: tuple[tuple[str, Recipe], ...] = (
    ("triton", RECIPE_SM100),
    ("triton", RECIPE_SM90),
    ("deepgemm", RECIPE_SM100),
    ("deepgemm", RECIPE_SM90),
)
O_PROJ_BACKENDS = ("deepgemm", "triton", "upstream")

#: The (recipe, weight layout) pairs vLLM's vendored DeepGEMM 2.8.1 ``fp8_einsum("bhr,hdr->bhd")``
#: accepts on arch 12. Its host checks (csrc/utils/layout.hpp ``check_sf_layout``, csrc/apis/layout.hpp
#: ``transform_sf_into_required_layout``, csrc/apis/einsum.hpp): 3-D e4m3 operands; weight scales
#: ``sf.size(-2) == ceil_div(D, recipe[1])`` and ``sf.size(-1) == ceil_div(R, 128 * (4 if int32
#: else 1))``; ``int32`` scales only with ``recipe[1] == 1``
#: (docs/reference/vllm-code-paths.md#deepgemm-einsum-checks).
DEEPGEMM_ACCEPTS: frozenset[tuple[Recipe, str]] = frozenset(
    {
        (RECIPE_SM100, "w3-ue8m0-row"),
        (RECIPE_SM90, "w3-fp32-block"),
    }
)


@dataclass(frozen=True)
class Verdict:
    """One combination's verdict.

    Attributes:
        served: the o_proj runs, on a kernel that takes these operands.
        route: where the dispatcher sends the call: ``triton`` | ``deepgemm`` (``None`` if refused).
        weight: the weight layout (:data:`WEIGHT_LAYOUTS`) or ``None`` (vLLM cannot build ``wo_a``).
        act: the activation layout (:data:`ACT_LAYOUTS`).
        why: served: how; refused: the message (switch, value, what breaks, way out).
        needs_evidence: served only with probe rows taken on this exact DeepGEMM (a top-level
            ``deep_gemm``): what it accepts and what its transform makes is not known from vLLM 0.33.
    """

    served: bool
    route: str | None
    weight: str | None
    act: str
    why: str
    needs_evidence: bool = False

    @property
    def layout(self) -> str:
        """``act+weight`` layout key (how probe rows record the layout they were taken on)."""
        return layout_key(self.act, self.weight)


def layout_key(act: str, weight: str | None) -> str:
    """``a-ue8m0-tma+w3-ue8m0-row``: the operand layout a probe row records."""
    return f"{act}+{weight}"


def _label(backend: str, recipe: Recipe) -> str:
    return f"SPARKPAIR_O_PROJ={backend} with recipe {','.join(str(v) for v in recipe)}"


def o_proj_verdict(
    backend: str,
    recipe: Recipe,
    weight: str | None,
    *,
    deepgemm: str = "vendored",
    switches: Switches | None = None,
) -> Verdict:
    """Whether ``backend`` with ``recipe`` serves ``wo_a`` in layout ``weight`` (pure).

    Args:
        backend: ``triton`` | ``deepgemm`` | ``upstream`` (vLLM's DeepGEMM with its own recipe).
        recipe: the einsum recipe the attention layer asks for.
        weight: a :data:`WEIGHT_LAYOUTS` name, or ``None`` (vLLM cannot build ``wo_a``).
        deepgemm: the DeepGEMM vLLM imports (:data:`DEEPGEMM_SOURCES`).
        switches: only to name them in a refusal.

    Returns:
        A :class:`Verdict`; a refused one names the switch, the value, what breaks and the way out.
    """
    recipe = (int(recipe[0]), int(recipe[1]), int(recipe[2]))
    act = act_layout(recipe)
    sw = f" ({switches.describe()})" if switches is not None else ""
    if weight is None:
        return Verdict(False, None, None, act, f"wo_a cannot be built with these switches{sw}")
    if weight == "repacked":
        return Verdict(
            False, None, weight, act, f"wo_a is repacked for a weight-only kernel{sw}; no einsum reads it"
        )
    if backend == "triton":
        if weight in TRITON_WEIGHT_LAYOUTS:
            how = (
                "viewed as [G, D, R] / [G, D/128, R/128], the same bytes"
                if weight in TWO_D_WEIGHT_LAYOUTS
                else "as vLLM hands it"
            )
            return Verdict(True, "triton", weight, act, f"sparkpair's Triton fp8_einsum reads {weight} {how}")
        return Verdict(
            True,
            "triton",
            weight,
            act,
            (
                "sparkpair's Triton fp8_einsum reads the layouts DeepGEMM 2.8.1's transform makes; a "
                "top-level "
                "deep_gemm's transform is served only where the probe recorded the layout it made here"
            ),
            True,
        )
    if backend not in ("deepgemm", "upstream"):
        raise ValueError(f"o_proj backend {backend!r}; wanted one of {', '.join(O_PROJ_BACKENDS)}")
    who = (
        "vLLM's own o_proj (SPARKPAIR_O_PROJ=upstream)" if backend == "upstream" else _label(backend, recipe)
    )
    if weight in TWO_D_WEIGHT_LAYOUTS:
        return Verdict(
            False,
            None,
            weight,
            act,
            (
                f"{who} hands DeepGEMM's fp8_einsum DeepSeek-V4's wo_a in its 2-D checkpoint layout [G*D, "
                f"R]{sw}: "
                "DeepGEMM takes only 3-D operands (get_shape<3>) and only vLLM's DeepGEMM linear kernel "
                "reshapes "
                "wo_a, so the model would fail at its first forward; wanted SPARKPAIR_O_PROJ=triton "
                "(sparkpair's "
                "kernel reads the 2-D layout), or --linear-backend deep_gemm / auto with VLLM_USE_DEEP_GEMM=1"
            ),
        )
    if weight == "external" or deepgemm == "external":
        return Verdict(
            True,
            "deepgemm",
            weight,
            act,
            (
                f"{who}: a top-level deep_gemm package replaces vLLM's vendored DeepGEMM; what its "
                "fp8_einsum "
                "accepts is served only where the probe ran it here"
            ),
            True,
        )
    if (recipe, weight) in DEEPGEMM_ACCEPTS:
        return Verdict(
            True, "deepgemm", weight, act, f"DeepGEMM's fp8_einsum accepts {weight} with recipe {recipe}"
        )
    gran = recipe[1]
    want = "[G, D, R/512] int32 per-row" if gran == 1 else "[G, D/128, R/128] fp32 block"
    seen = "per-row int32 [G, D, R/512]" if weight == "w3-ue8m0-row" else "fp32 block [G, D/128, R/128]"
    fix = (
        "VLLM_USE_DEEP_GEMM_E8M0=0 (vLLM then keeps fp32 block scales), or recipe 1,1,128"
        if weight == "w3-ue8m0-row"
        else "VLLM_USE_DEEP_GEMM_E8M0=1 (unset), or recipe 1,128,128"
    )
    return Verdict(
        False,
        None,
        weight,
        act,
        (
            f"{who}: vLLM's weight post-processing leaves {seen} weight scales{sw}, and DeepGEMM's "
            "fp8_einsum "
            f"checks sf.size(-2) == ceil_div(D, {gran}) (it wants {want} scales for this recipe), so the "
            "model "
            f"would fail at its first forward; wanted SPARKPAIR_O_PROJ=triton, or {fix}"
        ),
    )


def serve_verdict(s: Switches, backend: str, recipe: Recipe) -> Verdict:
    """The verdict of one whole combination: switches -> ``wo_a`` layout -> backend and recipe."""
    out = linear_outcome(s)
    if out.weight is None or out.refusal is not None:
        act = act_layout(recipe)
        return Verdict(False, None, out.weight, act, out.refusal or f"wo_a cannot be built ({s.describe()})")
    return o_proj_verdict(backend, recipe, out.weight, deepgemm=s.deepgemm, switches=s)


def o_proj_candidates_on(weight: str, deepgemm: str = "vendored") -> tuple[tuple[str, Recipe], ...]:
    """The :data:`O_PROJ_CANDIDATES` served on ``weight`` (the probe measures exactly these)."""
    return tuple(
        (b, r) for b, r in O_PROJ_CANDIDATES if o_proj_verdict(b, r, weight, deepgemm=deepgemm).served
    )


#: The reasons beyond the two switches a release may give for DeepGEMM being unsupported, as the
#: matrix walks them: none, and vLLM 0.34's missing ``nvcc`` (an old one acts the same).
DEEPGEMM_UNSUPPORTED: tuple[str | None, ...] = (
    None,
    "no nvcc for DeepGEMM's JIT: vLLM 0.34.0 then reports DeepGEMM unsupported",
)


def all_switches() -> Iterator[Switches]:
    """Every :class:`Switches` value the matrix distinguishes (each ``--linear-backend`` value, both
    DeepGEMM flags, each DeepGEMM source, both checkpoint scale dtypes, each
    :data:`DEEPGEMM_UNSUPPORTED`)."""
    for lb in LINEAR_BACKENDS:
        for dg in (True, False):
            for e8 in (True, False):
                for src in DEEPGEMM_SOURCES:
                    for ck in ("e8m0", "fp32"):
                        for off in DEEPGEMM_UNSUPPORTED:
                            yield Switches(lb, dg, e8, src, ck, off)


@dataclass(frozen=True)
class Combination:
    """One row of the matrix: switches, o_proj backend and recipe, and the verdict."""

    switches: Switches
    backend: str
    recipe: Recipe
    verdict: Verdict


def matrix() -> Iterator[Combination]:
    """The whole matrix on family 120: every :func:`all_switches` x backend x recipe (``upstream``
    only with vLLM's own recipe, :data:`RECIPE_SM100`)."""
    for s in all_switches():
        for backend in ("triton", "deepgemm", "upstream"):
            for recipe in (RECIPE_SM100,) if backend == "upstream" else (RECIPE_SM100, RECIPE_SM90):
                yield Combination(s, backend, recipe, serve_verdict(s, backend, recipe))


def distinct_layouts() -> dict[tuple[str, str | None, str | None], Combination]:
    """One combination per distinct (route, activation layout, weight layout) the matrix serves or
    refuses: the cases a test must run a forward for (the rest repeat one of these)."""
    out: dict[tuple[str, str | None, str | None], Combination] = {}
    for c in matrix():
        v = c.verdict
        key = (v.route or "refused", v.act, v.weight)
        if key not in out:
            out[key] = c
    return out


def with_linear(s: Switches, linear_backend: str) -> Switches:
    """``s`` with another ``--linear-backend``."""
    return replace(s, linear_backend=linear_backend)


__all__ = [
    "ACT_LAYOUTS",
    "DEEPGEMM_ACCEPTS",
    "DEEPGEMM_SOURCES",
    "DEEPGEMM_UNSUPPORTED",
    "FP8_BLOCK_KERNEL",
    "LINEAR_BACKENDS",
    "O_PROJ_BACKENDS",
    "O_PROJ_CANDIDATES",
    "RECIPE_SM100",
    "RECIPE_SM90",
    "ROUTER_LAYOUTS",
    "ROUTER_TIERS",
    "TRITON_WEIGHT_LAYOUTS",
    "TWO_D_WEIGHT_LAYOUTS",
    "WEIGHT_LAYOUTS",
    "Combination",
    "LinearOutcome",
    "Recipe",
    "Switches",
    "Verdict",
    "act_layout",
    "all_switches",
    "distinct_layouts",
    "layout_key",
    "linear_outcome",
    "matrix",
    "o_proj_candidates_on",
    "o_proj_verdict",
    "router_layout",
    "serve_verdict",
    "switches_from_env",
    "with_linear",
]
