"""The o_proj operands the served model hands a backend, built the way vLLM 0.33 builds them.

Each o_proj probe row is taken on one operand layout of the matrix
(:mod:`sparkpair_overlay.serve_matrix`): ``wo_a`` post-processed as the linear backend that makes that
layout post-processes it, and the activation quantised as DeepSeek-V4's attention quantises it.
Where vLLM is installed (the image, and the ``stack`` tier) every step is vLLM's own code:

* ``w3-ue8m0-row`` / ``w3-fp32-block``: ``deepgemm_post_process_fp8_weight_block(is_bmm=True)``
  (``DeepGemmFp8BlockScaledMMKernel.process_weights_after_loading``), whose DeepGEMM transform
  reads ``VLLM_USE_DEEP_GEMM_E8M0`` as the served model does; on a CPU that transform cannot run,
  and ``transform`` stands in for it (the stack tier records what vLLM hands it);
* ``w2-e8m0-block``: ``process_fp8_weight_block_strategy`` (what the Triton and CUTLASS FP8 block
  kernels' post-processing runs); ``w2-fp32-block``: the same plus ``_upcast_e8m0_to_fp32`` (b12x's);
* the activation: ``fused_inv_rope_fp8_quant`` on a bf16 attention output (group-major ``a``, scales
  MN-major with the token count padded to 4).

Without vLLM (a GPU host that only has torch) the same layouts are made by
:mod:`sparkpair_overlay.numerics`; :class:`Operands` says which (``source``). The layout recorded
with a row is the one :func:`sparkpair_overlay.o_proj_route.weight_layout` reads off the tensors
built, never the one asked for. The reference is fp64 from the checkpoint's own bytes and exponents
and the activation as quantised (``ref``): post-processing that changed a value shows as an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..numerics import FP8_MAX, decode_ue8m0, mn_major_tma, pack_ue8m0
from ..o_proj_route import act_layout_of, weight_layout
from ..serve_matrix import RECIPE_SM100, Recipe

#: DeepSeek-V4 head geometry the activation quant works in (docs/reference/vllm-code-paths.md#dsv4-shapes).
HEAD_DIM, ROPE_DIM = 512, 64

Transform = Callable[..., torch.Tensor]


@dataclass
class Operands:
    """One o_proj call's operands and its fp64 reference.

    Attributes:
        a, sa: activation e4m3 ``[T, G, R]`` and its scales; w, sw: weight and its scales as the
            served model holds them (2-D for the ``w2-*`` layouts); out: bf16 ``[T, G, D]``.
        ref: fp64 ``[T, G, D]`` from the checkpoint's values and exponents.
        weight_layout, act_layout: the layouts read off the tensors.
        source: ``vllm`` (built by vLLM's functions) or ``numerics``.
    """

    a: torch.Tensor
    sa: torch.Tensor
    w: torch.Tensor
    sw: torch.Tensor
    out: torch.Tensor
    ref: torch.Tensor
    weight_layout: str | None
    act_layout: str | None
    source: str


def checkpoint_wo_a(g: int, d: int, r: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A checkpoint-form ``wo_a`` on the CPU: e4m3 ``[G*D, R]`` and UE8M0 exponent bytes ``[G*D/128, R/128]``
    (each 128x128 block's scale a power of two, 2**-12 .. 2**-9, as DeepSeek-V4-Flash's e8m0 scales are)."""
    gen = torch.Generator().manual_seed(seed)
    w = (torch.randn(g * d, r, generator=gen) * 100).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    exps = torch.randint(127 - 12, 127 - 8, (g * d // 128, r // 128), generator=gen).to(torch.uint8)
    return w, exps


def _have_vllm() -> bool:
    try:
        import vllm.model_executor.layers.quantization.utils.fp8_utils  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure: build the layouts with our own numerics
        return False
    return True


def post_process_wo_a(
    layout: str,
    w2d: torch.Tensor,
    exps: torch.Tensor,
    g: int,
    *,
    device: str = "cuda",
    use_vllm: bool | None = None,
    transform: Transform | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """``(w, sw, source)``: ``wo_a`` as the linear backend that makes ``layout`` leaves it.

    Args:
        layout: ``w3-ue8m0-row`` | ``w3-fp32-block`` (DeepGEMM's linear kernel; which of the two comes
            out is decided by vLLM's ``VLLM_USE_DEEP_GEMM_E8M0`` reading, not by this argument, when vLLM
            does it) | ``w2-e8m0-block`` | ``w2-fp32-block``.
        w2d, exps: :func:`checkpoint_wo_a`'s tensors. g: groups.
        device: where the result goes.
        use_vllm: force vLLM's functions (True) or numerics (False); default: vLLM when installed.
        transform: stands in for DeepGEMM's ``transform_sf_into_required_layout`` inside vLLM's
            post-processing (the CPU tiers: it needs CUDA); ``None`` uses vLLM's.

    Raises:
        ValueError: an unknown ``layout``.
    """
    if use_vllm is None:
        use_vllm = _have_vllm()
    w2d, exps = w2d.to(device), exps.to(device)
    rows, r = w2d.shape
    d = rows // g
    if layout not in ("w3-ue8m0-row", "w3-fp32-block", "w2-e8m0-block", "w2-fp32-block"):
        raise ValueError(
            f"wo_a layout {layout!r}; wanted w3-ue8m0-row, w3-fp32-block, w2-e8m0-block or w2-fp32-block"
        )
    if use_vllm:
        from vllm.model_executor.layers.quantization.utils import fp8_utils

        ws = exps.view(torch.float8_e8m0fnu)
        if layout.startswith("w3"):
            saved = fp8_utils.transform_sf_into_required_layout
            if transform is not None:
                fp8_utils.transform_sf_into_required_layout = transform
            try:
                w, sw = fp8_utils.deepgemm_post_process_fp8_weight_block(
                    wq=w2d.clone(),
                    ws=ws.clone(),
                    quant_block_shape=(128, 128),
                    use_e8m0=layout == "w3-ue8m0-row",
                    is_bmm=True,
                    bmm_batch_size=g,
                )
            finally:
                fp8_utils.transform_sf_into_required_layout = saved
            return w, sw, "vllm"
        w, sw = fp8_utils.process_fp8_weight_block_strategy(w2d.clone(), ws.clone())
        if layout == "w2-fp32-block":
            sw = fp8_utils._upcast_e8m0_to_fp32(sw).contiguous()
        return w, sw, "vllm"
    if layout == "w2-e8m0-block":
        return w2d.clone(), exps.view(torch.float8_e8m0fnu).clone(), "numerics"
    if layout == "w2-fp32-block":
        return w2d.clone(), decode_ue8m0(exps).contiguous(), "numerics"
    w = w2d.view(g, d, r).clone()
    blocks = exps.view(g, d // 128, r // 128)
    if layout == "w3-fp32-block":
        return w, decode_ue8m0(blocks).contiguous(), "numerics"
    per_row = blocks.repeat_interleave(128, 1)  # [g, d, r/128]: each block's exponent on its 128 rows
    sw = pack_ue8m0(per_row).transpose(1, 2).contiguous().transpose(1, 2)  # MN-major
    return w, sw, "numerics"


def rope_cache(max_pos: int, rope_dim: int = ROPE_DIM, base: float = 10000.0) -> torch.Tensor:
    """fp32 ``[max_pos, rope_dim]`` = cos || sin (the layout vLLM's kernel reads)."""
    inv = 1.0 / base ** (torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    f = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], -1).float()


def _decode_act(sa: torch.Tensor, r: int) -> torch.Tensor:
    """fp32 ``[T, G, R/128]`` from vLLM's activation scales (fp32, or packed UE8M0 int32)."""
    if sa.dtype == torch.float32:
        return sa.float()
    shifts = torch.arange(4, device=sa.device, dtype=torch.int32) * 8
    b = ((sa.unsqueeze(-1) >> shifts) & 0xFF).flatten(-2)[..., : r // 128]
    return decode_ue8m0(b)


def activation(
    recipe: Recipe,
    t: int,
    g: int,
    r: int,
    *,
    device: str = "cuda",
    seed: int = 0,
    use_vllm: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor, str]:
    """``(a, sa, source)``: the o_proj input DeepSeek-V4's attention makes for ``recipe`` (T tokens, G groups,
    R = heads_per_group * 512): vLLM's ``fused_inv_rope_fp8_quant`` on a random bf16 attention output when
    vLLM is installed, else numerics' group-major operands."""
    if use_vllm is None:
        use_vllm = _have_vllm()
    tma = tuple(recipe) == RECIPE_SM100
    gen = torch.Generator().manual_seed(seed)
    if use_vllm:
        from vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant import fused_inv_rope_fp8_quant

        hpg = r // HEAD_DIM
        o = (torch.randn(t, g * hpg, HEAD_DIM, generator=gen) * 2).to(torch.bfloat16).to(device)
        positions = torch.randint(0, 4096, (t,), generator=gen).to(device)
        a, sa = fused_inv_rope_fp8_quant(
            o,
            positions,
            rope_cache(4096).to(device),
            n_groups=g,
            heads_per_group=hpg,
            nope_dim=HEAD_DIM - ROPE_DIM,
            rope_dim=ROPE_DIM,
            quant_group_size=128,
            tma_aligned_scales=tma,
        )
        return a, sa, "vllm"
    a = (torch.randn(g, t, r, generator=gen) * 200).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    a = a.to(device).transpose(0, 1)
    ea = torch.randint(127 - 8, 127 - 4, (t, g, r // 128), generator=gen)
    sa = mn_major_tma(pack_ue8m0(ea).to(device) if tma else decode_ue8m0(ea).to(device))
    return a, sa, "numerics"


def reference(
    a: torch.Tensor, sa: torch.Tensor, w2d: torch.Tensor, exps: torch.Tensor, g: int
) -> torch.Tensor:
    """fp64 ``[T, G, D]``: the activation as quantised times the checkpoint's weight and block scales."""
    t, _, r = a.shape
    d = w2d.shape[0] // g
    a64 = a.double() * _decode_act(sa, r).double().repeat_interleave(128, -1)
    s = decode_ue8m0(exps.to(w2d.device)).double().repeat_interleave(128, 0).repeat_interleave(128, 1)
    w64 = (w2d.double() * s).view(g, d, r)
    return torch.einsum("tgr,gdr->tgd", a64, w64)


def build(
    layout: str,
    recipe: Recipe,
    t: int,
    g: int,
    d: int,
    r: int,
    *,
    device: str = "cuda",
    seed: int = 0,
    use_vllm: bool | None = None,
    transform: Transform | None = None,
    checkpoint: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Operands:
    """One o_proj call on ``layout`` with ``recipe``'s activation, and its fp64 reference.

    ``checkpoint``: ``(w2d, exps)`` of a real layer (the checkpoint check); default a random one.
    """
    w2d, exps = checkpoint if checkpoint is not None else checkpoint_wo_a(g, d, r, seed)
    w, sw, src_w = post_process_wo_a(
        layout, w2d, exps, g, device=device, use_vllm=use_vllm, transform=transform
    )
    a, sa, src_a = activation(recipe, t, g, r, device=device, seed=seed + 1, use_vllm=use_vllm)
    out = torch.full((t, g, d), float("nan"), dtype=torch.bfloat16, device=device)
    ref = reference(a, sa, w2d.to(device), exps, g)
    return Operands(
        a,
        sa,
        w,
        sw,
        out,
        ref,
        weight_layout(w, sw, g, d),
        act_layout_of(a, sa),
        "vllm" if "vllm" in (src_w, src_a) else "numerics",
    )


__all__ = [
    "Operands",
    "activation",
    "build",
    "checkpoint_wo_a",
    "post_process_wo_a",
    "reference",
    "rope_cache",
]
