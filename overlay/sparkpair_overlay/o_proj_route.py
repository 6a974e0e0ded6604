"""The o_proj dispatcher's per-call predicate: which ``fp8_einsum`` call our Triton kernel takes.

Pure (no vLLM, no torch at import: tensors are only inspected), so the whole predicate is
unit-tested on a CPU. The plan (:mod:`sparkpair_overlay.plan`) decides the backend once per
process; :func:`einsum_route` then decides each call, never from an architecture family alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .plan import RECIPE_SM90, RECIPE_SM100, Capability, OProjDecision, capability_family, format_capability

if TYPE_CHECKING:
    import torch

#: The einsum equation of DeepSeek-V4's grouped ``wo_a`` (o_proj.py:89-90 in 0.32.0).
O_PROJ_EQUATION = "bhr,hdr->bhd"

#: Scale encodings our Triton ``fp8_einsum`` accepts, per recipe, as (activation sf,
#: weight sf). ``ue8m0-int32``: four UE8M0 bytes packed per int32 (byte k at bits 8k),
#: the layout of ``fused_inv_rope_fp8_quant(tma_aligned_scales=True)``
#: (fused_inv_rope_fp8_quant.py:402-405, :455-461) and of DeepGEMM's weight transform on
#: arch 10/12 (docs/reference/vllm-code-paths.md#o_proj-scales). ``fp32``: one fp32 per 128 block
#: (``tma_aligned_scales=False``). For ``(1,128,128)`` on family 120 the weight scale stays
#: whatever vLLM's weight post-processing made of it: DeepGEMM's
#: ``transform_sf_into_required_layout`` packs it per row as ``ue8m0-int32`` on arch 12,
#: which is exact (the checkpoint's scales are UE8M0 already; a per-row broadcast of a
#: 128x128 block scale loses nothing), so both weight encodings are accepted.
#: ``float8_e8m0fnu`` tensors are never passed to Triton (DESIGN.md).
TRITON_SCALE_ENCODINGS: Mapping[tuple[int, ...], frozenset[tuple[str, str]]] = {
    RECIPE_SM100: frozenset({("ue8m0-int32", "ue8m0-int32")}),
    RECIPE_SM90: frozenset({("fp32", "fp32"), ("fp32", "ue8m0-int32")}),
}


def scale_encoding(dtype_name: str) -> str:
    """Classify a scale tensor's dtype: ``ue8m0-int32`` | ``fp32`` | ``e8m0`` | ``other``."""
    if dtype_name == "int32":
        return "ue8m0-int32"
    if dtype_name == "float32":
        return "fp32"
    if dtype_name in ("float8_e8m0fnu", "uint8"):
        return "e8m0"
    return "other"


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


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

    Triton is chosen only when the plan says ``triton`` AND the call is one our kernel
    implements: capability family 120; ``equation == "bhr,hdr->bhd"``; ``recipe`` in
    :data:`TRITON_SCALE_ENCODINGS` with the (activation, weight) scale encodings listed
    there; ``a = (x, sa)`` with x ``float8_e4m3fn [T, G, K]`` on a CUDA device,
    ``b = (w, sw)`` with w ``float8_e4m3fn [G, R, K]``, ``out`` ``bfloat16 [T, G, R]``
    (shapes from o_proj.py:78-95 and docs/reference/vllm-code-paths.md#dsv4-shapes). Anything
    else goes to the original (DeepGEMM) with the reason. Never decided by architecture family alone.

    Args are the call's own arguments (tensors are only inspected, never read).
    """
    if decision.backend != "triton":
        return "deepgemm", f"plan o_proj={decision.backend}"
    if capability_family(capability) != 120:
        return "deepgemm", f"cap {format_capability(capability)} is not family 120"
    if equation != O_PROJ_EQUATION:
        return "deepgemm", f"equation {equation!r} is not {O_PROJ_EQUATION!r}"
    recipe_t = tuple(recipe) if isinstance(recipe, (tuple, list)) else recipe
    accepted = TRITON_SCALE_ENCODINGS.get(recipe_t) if isinstance(recipe_t, tuple) else None
    if accepted is None:
        return "deepgemm", f"recipe {recipe_t} has no Triton kernel"
    try:
        (x, sa), (w, sw) = a, b
    except (TypeError, ValueError):
        return "deepgemm", "a/b are not (tensor, scale) pairs"
    if not getattr(x, "is_cuda", False):
        return "deepgemm", "activation is not on a CUDA device"
    if _dtype_name(x) != "float8_e4m3fn" or _dtype_name(w) != "float8_e4m3fn":
        return "deepgemm", f"operand dtypes {_dtype_name(x)}/{_dtype_name(w)} are not float8_e4m3fn"
    if _dtype_name(out) != "bfloat16":
        return "deepgemm", f"out dtype {_dtype_name(out)} is not bfloat16"
    if x.dim() != 3 or w.dim() != 3 or out.dim() != 3 or sa.dim() != 3 or sw.dim() != 3:
        return "deepgemm", "operands are not 3-D (wo_a not reshaped for bmm?)"
    t, g, k = x.shape
    if w.shape[0] != g or w.shape[2] != k or tuple(out.shape) != (t, g, w.shape[1]):
        return "deepgemm", f"shapes x{tuple(x.shape)} w{tuple(w.shape)} out{tuple(out.shape)} disagree"
    enc = (scale_encoding(_dtype_name(sa)), scale_encoding(_dtype_name(sw)))
    if enc not in accepted:
        return "deepgemm", f"scale encodings {enc} not accepted for recipe {recipe_t}"
    return "triton", "ok"
