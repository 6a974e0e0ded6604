"""The o_proj dispatcher's per-call predicate, and what the operands of a call are.

Pure (no vLLM, no torch at import: tensors are only inspected), so the whole predicate is
unit-tested on a CPU. The plan (:mod:`sparkpair_overlay.plan`) decides the backend once per
process and the matrix (:mod:`sparkpair_overlay.serve_matrix`) says which operand layouts each
backend serves; :func:`einsum_route` then decides each call from the call's own operands, never
from an architecture family alone. :func:`weight_layout` / :func:`act_layout_of` name a call's
operands in the matrix's terms (the probe records them with its rows), :func:`triton_operands`
hands our kernel a 2-D ``wo_a`` as the same bytes viewed ``[G, D, R]``, and
:func:`deepgemm_rejects` checks a call against the host checks of the DeepGEMM vLLM 0.33 vendors,
so that a call DeepGEMM would refuse is named instead of forwarded.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .plan import Capability, OProjDecision, capability_family, format_capability
from .serve_matrix import (
    RECIPE_SM90,
    RECIPE_SM100,
    TRITON_WEIGHT_LAYOUTS,
    TWO_D_WEIGHT_LAYOUTS,
)

if TYPE_CHECKING:
    import torch

#: The einsum equation of DeepSeek-V4's grouped ``wo_a`` (o_proj.py ``deep_gemm_fp8_o_proj``).
O_PROJ_EQUATION = "bhr,hdr->bhd"
#: K elements per scale block, both recipes (docs/reference/vllm-code-paths.md#o_proj-scales).
SCALE_BLOCK = 128


def _dtype_name(t: Any) -> str:
    return str(getattr(t, "dtype", "?")).removeprefix("torch.")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def act_layout_of(a: torch.Tensor, sa: torch.Tensor) -> str | None:
    """The :data:`~sparkpair_overlay.serve_matrix.ACT_LAYOUTS` name of ``(a, sa)``, or ``None``.

    ``a`` e4m3 ``[T, G, R]`` with unit stride along R; ``sa`` int32 ``[T, G, ceil(R/512)]``
    (``a-ue8m0-tma``) or fp32 ``[T, G, R/128]`` (``a-fp32-tma``). Strides of ``sa`` are not
    required (our kernel reads any); :func:`deepgemm_rejects` checks DeepGEMM's.
    """
    if _dtype_name(a) != "float8_e4m3fn" or a.dim() != 3 or sa.dim() != 3 or a.stride(2) != 1:
        return None
    t, g, r = a.shape
    if r % SCALE_BLOCK:
        return None
    kb = r // SCALE_BLOCK
    if _dtype_name(sa) == "int32" and tuple(sa.shape) == (t, g, _cdiv(kb, 4)):
        return "a-ue8m0-tma"
    if _dtype_name(sa) == "float32" and tuple(sa.shape) == (t, g, kb):
        return "a-fp32-tma"
    return None


def weight_layout(w: torch.Tensor, sw: torch.Tensor, groups: int, rows: int) -> str | None:
    """The :data:`~sparkpair_overlay.serve_matrix.WEIGHT_LAYOUTS` name of ``(w, sw)``, or ``None``.

    Args:
        w, sw: the weight and scale the o_proj call passes (``wo_a.weight``, its scale).
        groups: G (the activation's dim 1); rows: D (the output's dim 2).

    ``w3-ue8m0-row``: e4m3 ``[G, D, R]`` with int32 ``[G, D, ceil(R/512)]``; ``w3-fp32-block``: fp32
    ``[G, D/128, R/128]``; ``w2-e8m0-block`` / ``w2-fp32-block``: e4m3 ``[G*D, R]`` with
    ``float8_e8m0fnu`` (or uint8) / fp32 ``[G*D/128, R/128]``. Only the layouts vLLM 0.33's weight
    post-processing makes on family 120 are named (docs/reference/vllm-code-paths.md#o_proj-scales).
    """
    if _dtype_name(w) != "float8_e4m3fn" or w.stride(-1) != 1:
        return None
    r = w.shape[-1]
    if r % SCALE_BLOCK or rows % SCALE_BLOCK:
        return None
    kb, sdt = r // SCALE_BLOCK, _dtype_name(sw)
    if w.dim() == 3 and tuple(w.shape) == (groups, rows, r) and sw.dim() == 3:
        if sdt == "int32" and tuple(sw.shape) == (groups, rows, _cdiv(kb, 4)):
            return "w3-ue8m0-row"
        if sdt == "float32" and tuple(sw.shape) == (groups, rows // SCALE_BLOCK, kb):
            return "w3-fp32-block"
        return None
    if (
        w.dim() == 2
        and tuple(w.shape) == (groups * rows, r)
        and sw.dim() == 2
        and tuple(sw.shape) == (groups * rows // SCALE_BLOCK, kb)
    ):
        if sdt in ("float8_e8m0fnu", "uint8"):
            return "w2-e8m0-block"
        if sdt == "float32":
            return "w2-fp32-block"
    return None


def kernel_runs_on(t: Any) -> bool:
    """Our Triton kernel runs on ``t``'s device: CUDA, or the CPU under Triton's interpreter
    (``TRITON_INTERPRET=1``, the CPU tiers)."""
    if getattr(t, "is_cuda", False):
        return True
    device = getattr(t, "device", None)
    return getattr(device, "type", None) == "cpu" and os.environ.get("TRITON_INTERPRET", "0") == "1"


def einsum_route(
    decision: OProjDecision,
    capability: Capability | None,
    equation: str,
    a: Sequence[torch.Tensor],
    b: Sequence[torch.Tensor],
    out: torch.Tensor,
    recipe: Sequence[int] | None,
) -> tuple[str, str]:
    """Per-call predicate of the ``fp8_einsum`` dispatcher: ``("triton"|"deepgemm", reason)``.

    Triton is chosen only when the plan says ``triton`` AND the call is one our kernel implements:
    capability family 120; ``equation == "bhr,hdr->bhd"``; ``recipe`` (1,1,128) or (1,128,128);
    ``a = (x, sa)`` in an activation layout the matrix names (:func:`act_layout_of`), on a device our
    kernel runs on (:func:`kernel_runs_on`); ``b = (w, sw)`` in one of
    :data:`~sparkpair_overlay.serve_matrix.TRITON_WEIGHT_LAYOUTS` (:func:`weight_layout`, a 2-D
    ``wo_a`` included); ``out`` bf16 ``[T, G, D]``. Anything else goes to the original (DeepGEMM)
    with the reason. Args are the call's own arguments (tensors are only inspected, never read).
    """
    if decision.backend != "triton":
        return "deepgemm", f"plan o_proj={decision.backend}"
    if capability_family(capability) != 120:
        return "deepgemm", f"cap {format_capability(capability)} is not family 120"
    if equation != O_PROJ_EQUATION:
        return "deepgemm", f"equation {equation!r} is not {O_PROJ_EQUATION!r}"
    recipe_t = tuple(recipe) if isinstance(recipe, (tuple, list)) else recipe
    if recipe_t not in (RECIPE_SM100, RECIPE_SM90):
        return "deepgemm", f"recipe {recipe_t} has no Triton kernel"
    try:
        (x, sa), (w, sw) = a, b
    except (TypeError, ValueError):
        return "deepgemm", "a/b are not (tensor, scale) pairs"
    if not kernel_runs_on(x):
        return "deepgemm", "activation is not on a CUDA device (nor on the CPU under TRITON_INTERPRET=1)"
    if _dtype_name(x) != "float8_e4m3fn" or _dtype_name(w) != "float8_e4m3fn":
        return "deepgemm", f"operand dtypes {_dtype_name(x)}/{_dtype_name(w)} are not float8_e4m3fn"
    if _dtype_name(out) != "bfloat16" or out.dim() != 3 or x.dim() != 3:
        return "deepgemm", f"out {_dtype_name(out)} {tuple(out.shape)} / a {tuple(x.shape)} are not bf16/3-D"
    t, g, _ = x.shape
    if out.shape[0] != t or out.shape[1] != g:
        return "deepgemm", f"shapes a{tuple(x.shape)} w{tuple(w.shape)} out{tuple(out.shape)} disagree"
    act = act_layout_of(x, sa)
    if act is None:
        return "deepgemm", (
            f"scale encodings ({_dtype_name(sa)} {tuple(sa.shape)}) of a{tuple(x.shape)} are "
            "not a layout vLLM's activation quant makes"
        )
    wl = weight_layout(w, sw, g, out.shape[2])
    if wl is None:
        return "deepgemm", (
            f"shapes / scale encodings of w{tuple(w.shape)} {_dtype_name(sw)} sw{tuple(sw.shape)} "
            f"disagree with a{tuple(x.shape)} out{tuple(out.shape)}: not a wo_a layout vLLM makes"
        )
    if wl not in TRITON_WEIGHT_LAYOUTS:
        return "deepgemm", f"weight layout {wl} is not one our kernel reads"
    return "triton", "ok" if wl not in TWO_D_WEIGHT_LAYOUTS else "ok (2-D wo_a viewed as [G, D, R])"


def triton_operands(
    a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], out: torch.Tensor
) -> tuple[tuple[Any, Any], tuple[Any, Any], tuple[int, int, int]]:
    """``(a, (w, sw), kernel_recipe)`` for our kernel, for a call :func:`einsum_route` sent to Triton.

    A 2-D ``wo_a`` (``[G*D, R]`` with ``[G*D/128, R/128]`` block scales) is handed over as the same
    storage viewed ``[G, D, R]`` / ``[G, D/128, R/128]`` (no copy). The recipe given to the kernel
    says the weight scales' granularity: ``(1,1,128)`` for per-row int32 scales, ``(1,128,128)`` for
    block scales (the activation scales are per token and 128-wide block either way; the kernel
    reads their encoding from the dtype).
    """
    (x, sa), (w, sw) = a, b
    g, d = x.shape[1], out.shape[2]
    wl = weight_layout(w, sw, g, d)
    if wl in TWO_D_WEIGHT_LAYOUTS:
        r = w.shape[1]
        w = w.view(g, d, r)
        sw = sw.view(g, d // SCALE_BLOCK, r // SCALE_BLOCK)
    return (x, sa), (w, sw), (RECIPE_SM100 if wl == "w3-ue8m0-row" else RECIPE_SM90)


def deepgemm_rejects(
    a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], out: torch.Tensor, recipe: Sequence[int] | None
) -> str | None:
    """Why the DeepGEMM vLLM 0.33 vendors (2.8.1) would reject this ``fp8_einsum("bhr,hdr->bhd")``
    call on arch 12, or ``None`` when its host checks pass.

    Mirrors the checks the call goes through (docs/reference/vllm-code-paths.md#deepgemm-einsum-checks):
    3-D e4m3 ``a [T, G, R]`` and ``w [G, D, R]`` with unit stride along R; bf16 ``out [T, G, D]``; each
    scale ``sf`` with ``sf.size(-2) == ceil_div(mn, gran_mn)`` and ``sf.size(-1) == ceil_div(R, 128 *
    (4 if int32 else 1))`` where ``gran_mn`` is ``recipe[0]`` for the activation and ``recipe[1]`` for
    the weight; int32 scales only with ``gran_mn == 1`` and MN-major (``sf.stride(-2) == 1``) with a
    TMA-aligned column stride (a multiple of 4, at least ``mn`` rounded up to 4). The device is not
    checked here (the CPU tiers pass CPU tensors for a layout question).
    """
    try:
        (x, sa), (w, sw) = a, b
    except (TypeError, ValueError):
        return "a/b are not (tensor, scale) pairs"
    rt = tuple(int(v) for v in recipe) if isinstance(recipe, (tuple, list)) else None
    if rt is None or len(rt) != 3:
        return f"recipe {recipe!r} is not a (1, gran_mn, gran_k) triple"
    if x.dim() != 3 or w.dim() != 3 or out.dim() != 3:
        return (
            f"DeepGEMM's einsum takes 3-D operands only (get_shape<3>): a {tuple(x.shape)}, w "
            f"{tuple(w.shape)}, "
            f"out {tuple(out.shape)}"
        )
    if _dtype_name(x) != "float8_e4m3fn" or _dtype_name(w) != "float8_e4m3fn":
        return f"a/w dtypes {_dtype_name(x)}/{_dtype_name(w)}; DeepGEMM wants float8_e4m3fn"
    if _dtype_name(out) != "bfloat16" or out.stride(-1) != 1:
        return (
            f"out {_dtype_name(out)} with stride {tuple(out.stride())}; DeepGEMM wants bf16, unit last stride"
        )
    t, g, r = x.shape
    gw, d, rw = w.shape
    if (gw, rw) != (g, r) or tuple(out.shape) != (t, g, d):
        return f"shapes a {tuple(x.shape)} w {tuple(w.shape)} out {tuple(out.shape)} disagree"
    if x.stride(-1) != 1 or w.stride(-1) != 1:
        return "a and w need unit stride along R"
    # DeepGEMM permutes (b, h) -> (h, b): the activation scale is checked as [G, T, k].
    sa_shape = (sa.shape[1], sa.shape[0], sa.shape[2]) if sa.dim() == 3 else tuple(sa.shape)
    sa_strides = (sa.stride(1), sa.stride(0), sa.stride(2)) if sa.dim() == 3 else tuple(sa.stride())
    for name, sdt, shape, strides, mn, gran in (
        ("activation", _dtype_name(sa), sa_shape, sa_strides, t, rt[0]),
        ("weight", _dtype_name(sw), tuple(sw.shape), tuple(sw.stride()), d, rt[1]),
    ):
        if sdt not in ("float32", "int32"):
            return f"{name} scale dtype {sdt}; DeepGEMM wants float32 or int32 (check_sf_layout)"
        if len(shape) != 3 or shape[0] != g:
            return f"{name} scale {shape} is not [G={g}, mn, k] (check_sf_layout: sf.size(-3) == num_groups)"
        want_mn = _cdiv(mn, gran)
        want_k = _cdiv(r, rt[2] * (4 if sdt == "int32" else 1))
        if shape[1] != want_mn:
            return (
                f"{name} scale {shape}: DeepGEMM checks sf.size(-2) == ceil_div({mn}, {gran}) = "
                f"{want_mn} for recipe {rt}"
            )
        if shape[2] != want_k:
            return f"{name} scale {shape}: DeepGEMM checks sf.size(-1) == {want_k} for recipe {rt}"
        if sdt == "int32":
            if gran != 1:
                return f"{name} scale is int32 with gran_mn {gran}: DeepGEMM has no such SF transformation"
            col = strides[2]
            if (
                not (strides[1] == 1 or mn == 1)
                or col % 4
                or col < _cdiv(mn, 4) * 4
                or strides[0] != col * shape[2]
            ):
                return (
                    f"{name} int32 scale strides {strides} (as [G, mn, k]) are not MN-major TMA-aligned "
                    "(DeepGEMM's tma_stride_check)"
                )
    return None


__all__ = [
    "O_PROJ_EQUATION",
    "SCALE_BLOCK",
    "act_layout_of",
    "deepgemm_rejects",
    "einsum_route",
    "kernel_runs_on",
    "triton_operands",
    "weight_layout",
]
