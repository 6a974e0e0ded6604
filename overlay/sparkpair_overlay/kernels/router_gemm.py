"""MoE router GEMM: ``logits[M, N] (fp32) = x[M, K] (bf16) @ weight[N, K].T``.

DeepSeek-V4-Flash's gate (``GateLinear``, docs/reference/vllm-code-paths.md#router-tiers): K = hidden =
4096, N = n_routed_experts
= 256, weight bf16 by default (fp32 when a config forces fp32 routing); M = tokens in the
batch (1..16384). On GB10 vLLM 0.33 sends every call to cuBLAS (``torch.mm(..., out_dtype=fp32)``,
tier 5 of gate_linear.py's docstring in 0.32.0) or to a true fp32 ``F.linear`` (tier 6, fp32 weight).

Paths (all deterministic: every reduction has a fixed order; the only atomic is a tile counter
that elects which CTA sums the split-K partials, and that CTA sums them in split order):

* bf16 weight, M <= 4: ``_router_rows_kernel``, a whole-K GEMV per pair of weight rows on the
  CUDA cores (fp32 products, ``tl.sum`` tree), no split and no reduction.
* bf16 weight, M <= 128: ``_router_dot_kernel``, split-K tiles on the tensor cores, one BLOCK_K
  step per CTA, each storing its fp32 partial; ``_router_reduce_kernel`` sums them in a second
  launch, made with PDL so it is resident and waiting (``gdc_wait``) when the partials land
  (configs with ``REDUCE_BLOCK`` > 0). The older one-launch form, where the last CTA of each
  output tile sums the partials (``FIXUP``; tile counters from ``SEMAPHORES``), pays a fence, an
  atomic and the partials' reads in series at the GEMM's tail: on the H200 it costs 1.1-1.5 us
  per call against 0.3-0.6 us for the PDL second launch (benchmarks/README.md, "What took the
  router under its bars").
* bf16 weight, larger M: cuBLAS ``torch.mm(x, w.T, out_dtype=torch.float32)``, which wins there.
* fp32 weight, M = 1: ``_router_rows_kernel`` in fp32 (x is exact in fp32; each product is
  rounded once, as in an fp32 GEMM).
* fp32 weight, larger M: BF16x3. The caller splits the weight once, where it is loaded, into
  three bf16 planes ``w = hi + mid + lo`` (:func:`bf16x3_split`; 24 significand bits) and passes
  them as ``planes``; three bf16 tensor-core products accumulate in fp32 (x is bf16, so it needs
  no split). The ``hi`` product is folded into the fp32 accumulator at least every 512 K elements
  (long MMA chains lose accuracy: H200, 4096-long chain 4.8e-6 max rel. error vs 5.4e-7 in
  512-long chunks). Error at fp32 level. Without ``planes`` each weight tile is split in
  registers (``W_MODE`` 1; same accuracy, slower at large M).

Programmatic dependent launch (``USE_PDL``, sm_90+): the kernel lets the next kernel on the
stream launch at once and reads nothing an earlier kernel writes (``x``, counters, partials)
before ``gdc_wait``; the weight tile is loaded before the wait. Caller contract: the weight is
not written by the kernel immediately before this one on the stream (true for model
parameters; :func:`bf16x3_split` synchronises the stream after writing its planes).

``M`` is never a compile-time specialisation: it is a plain int argument listed in
``do_not_specialize`` (Triton 3.6: neither the ``== 1`` nor the divisible-by-16 specialisation
is applied, ``triton/runtime/jit.py`` ``create_function_from_signature``), as is every stride
that depends on M. So one compiled kernel serves every M, and CUDA-graph capture works for any M.

Public API: :func:`router_gemm`; torch custom op ``torch.ops.sparkpair.router_gemm`` (with a fake
implementation for torch.compile / meta tensors); :data:`ROUTER_GEMM_CONFIGS` (every compiled
variant, for the AOT gate); :func:`router_gemm_with_config` (benchmarks and tests);
:func:`bf16x3_split`; :func:`select_router_config`.
"""

from __future__ import annotations

import os

import torch

from ._common import HAS_TRITON, SEMAPHORES, KernelConfig, cdiv, require_triton, tl, triton
from .router_gemm_configs import (
    CONFIGS_BY_NAME,
    ROUTER_GEMM_CONFIGS,
    W_BF16X3,
    _reduce_config_for,
    config_weight,
    configs_for,
    reduce_config,
    select_router_config,
    takes_k,
    uses_tile_counters,
    validate_config,
)

#: The configs and dispatch live in :mod:`.router_gemm_configs`; the kernel's public API names
#: the ones a caller needs beside the launchers (the AOT gate, the probe, benchmarks, tests).
__all__ = [
    "ROUTER_GEMM_CONFIGS",
    "bf16x3_split",
    "configs_for",
    "reduce_config",
    "router_gemm",
    "router_gemm_with_config",
    "select_router_config",
    "uses_tile_counters",
    "validate_config",
]

# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------

if HAS_TRITON:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit
    def _split3(w):
        """fp32 tile -> bf16 ``hi, mid, lo`` with ``hi + mid + lo == w`` (round-to-nearest each)."""
        hi = w.to(tl.bfloat16)
        r = w - hi.to(tl.float32)
        mid = r.to(tl.bfloat16)
        lo = (r - mid.to(tl.float32)).to(tl.bfloat16)
        return hi, mid, lo

    @triton.jit
    def _load_x(x_ptr, offs_m, offs_k, m_mask, k_mask, stride_xm):
        return tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
            mask=m_mask[:, None] & k_mask[None, :],
            other=0.0,
        )

    @triton.jit(do_not_specialize=["M", "stride_pk"])
    def _router_dot_kernel(
        out_ptr,  # [M, N] fp32, row stride stride_pm (written by the last CTA when FIXUP)
        sem_ptr,  # int32 tile counters, zero on entry and exit (FIXUP only; see SemaphorePool)
        part_ptr,  # out [M, N] fp32 (SPLIT_K == 1) or workspace [SPLIT_K, M, N] fp32
        x_ptr,  # [M, K] bf16, unit stride along K
        w_ptr,  # W_MODE 0: [N, K] bf16; 1: [N, K] fp32; 2: [3, N, K] bf16 (hi, mid, lo); unit K stride
        M,
        N,
        K,
        stride_xm,
        stride_wn,
        stride_w3,  # W_MODE 2: stride between the hi / mid / lo planes (elements)
        stride_pk,
        stride_pm,
        one,  # fp32 1.0 at run time: keeps Triton from folding "acc += dot(...)" into the MMA chain
        W_MODE: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SPLIT_K: tl.constexpr,
        N16: tl.constexpr,  # N % 16 == 0: stride_pk = M*N is a multiple of 16 (vector stores)
        FIXUP: tl.constexpr = False,  # SPLIT_K > 1: the last CTA of each tile reduces (one launch)
        USE_PDL: tl.constexpr = False,  # launched with programmatic dependent launch (sm_90+)
        ONE_TILE: tl.constexpr = False,  # the launcher guarantees one BLOCK_K step per CTA
        HI_CHUNK: tl.constexpr = 1,  # W_MODE 2: BLOCK_K steps the hi product chains in the MMA
    ):
        """Split-K tile on the tensor cores; program = (n tile, k split, m tile), n fastest.

        With ``USE_PDL`` the next kernel on the stream may launch at once, and this one reads
        nothing that an earlier kernel writes (``x``, counters, partials) before ``gdc_wait``;
        with ``ONE_TILE`` too, the weight tile (read-only parameters) is loaded before the wait,
        overlapping the previous kernel's tail.
        """
        if N16:
            stride_pk = tl.multiple_of(stride_pk, 16)
        if USE_PDL:
            gdc_launch_dependents()
        pid = tl.program_id(0)
        num_n = tl.cdiv(N, BLOCK_N)
        pid_n = pid % num_n
        rest = pid // num_n
        pid_k = rest % SPLIT_K
        pid_m = rest // SPLIT_K
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        m_mask = offs_m < M
        n_mask = offs_n < N
        k_per = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
        k_lo = pid_k * k_per
        # Each BLOCK_K chunk's products are summed on the tensor cores from a fresh zero, then
        # added to the fp32 accumulator on the CUDA cores (round-to-nearest). Chaining all of K
        # through the MMA accumulator loses accuracy (H200 sweep, 2026-11-30: max rel. error
        # 5e-6 with one 4096-long chain vs 5e-7 with 512-long chains).
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_lo = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if ONE_TILE:
            offs_k = k_lo + tl.arange(0, BLOCK_K)
            k_mask = offs_k < K
            w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
            w_mask = n_mask[:, None] & k_mask[None, :]
            w = tl.load(w_ptrs, mask=w_mask, other=0.0)
            if W_MODE == 2:
                w_mid = tl.load(w_ptrs + stride_w3, mask=w_mask, other=0.0)
                w_lo = tl.load(w_ptrs + 2 * stride_w3, mask=w_mask, other=0.0)
            if USE_PDL:
                gdc_wait()
            x = _load_x(x_ptr, offs_m, offs_k, m_mask, k_mask, stride_xm)
            if W_MODE == 0:
                acc = tl.dot(x, tl.trans(w))
            elif W_MODE == 1:
                hi, mid, lo = _split3(w)
                acc = tl.dot(x, tl.trans(hi)) + tl.dot(x, tl.trans(mid), tl.dot(x, tl.trans(lo)))
            else:
                acc = tl.dot(x, tl.trans(w)) + tl.dot(x, tl.trans(w_mid), tl.dot(x, tl.trans(w_lo)))
        elif W_MODE == 2 and HI_CHUNK > 1:
            # W_MODE 2, MMA-chained: the hi product chains through the tensor cores for HI_CHUNK
            # steps (BLOCK_K * HI_CHUNK of K) before it is folded into acc on the CUDA cores; the
            # mid and lo products (2**-8 and 2**-16 of hi) chain through all of K. Keeps the
            # wgmma pipeline full; error stays at the chunk length's level.
            if USE_PDL:
                gdc_wait()
            k_end = tl.minimum(K, k_lo + k_per)
            for kg in range(0, k_per, BLOCK_K * HI_CHUNK):
                part = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for kk in range(0, BLOCK_K * HI_CHUNK, BLOCK_K):
                    offs_k = k_lo + kg + kk + tl.arange(0, BLOCK_K)
                    k_mask = offs_k < k_end
                    x = _load_x(x_ptr, offs_m, offs_k, m_mask, k_mask, stride_xm)
                    w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
                    w_mask = n_mask[:, None] & k_mask[None, :]
                    w = tl.load(w_ptrs, mask=w_mask, other=0.0)
                    w_mid = tl.load(w_ptrs + stride_w3, mask=w_mask, other=0.0)
                    w_lo = tl.load(w_ptrs + 2 * stride_w3, mask=w_mask, other=0.0)
                    part = tl.dot(x, tl.trans(w), part)
                    acc_lo = tl.dot(x, tl.trans(w_mid), acc_lo)
                    acc_lo = tl.dot(x, tl.trans(w_lo), acc_lo)
                acc += part
            acc = acc + acc_lo
        else:
            if USE_PDL:
                gdc_wait()
            for k0 in range(0, k_per, BLOCK_K):
                offs_k = k_lo + k0 + tl.arange(0, BLOCK_K)
                k_mask = offs_k < K
                x = _load_x(x_ptr, offs_m, offs_k, m_mask, k_mask, stride_xm)
                w_ptrs = w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :]
                w_mask = n_mask[:, None] & k_mask[None, :]
                w = tl.load(w_ptrs, mask=w_mask, other=0.0)
                if W_MODE == 0:
                    acc += tl.dot(x, tl.trans(w)) * one
                elif W_MODE == 1:
                    hi, mid, lo = _split3(w)
                    acc += tl.dot(x, tl.trans(hi)) * one
                    acc_lo += tl.dot(x, tl.trans(mid), tl.dot(x, tl.trans(lo))) * one
                else:
                    w_mid = tl.load(w_ptrs + stride_w3, mask=w_mask, other=0.0)
                    w_lo = tl.load(w_ptrs + 2 * stride_w3, mask=w_mask, other=0.0)
                    acc += tl.dot(x, tl.trans(w)) * one
                    acc_lo += tl.dot(x, tl.trans(w_mid), tl.dot(x, tl.trans(w_lo))) * one
            if W_MODE != 0:
                acc = acc + acc_lo
        mn_mask = m_mask[:, None] & n_mask[None, :]
        p_offs = offs_m[:, None] * stride_pm + offs_n[None, :]
        tl.store(part_ptr + pid_k * stride_pk + p_offs, acc, mask=mn_mask)
        if FIXUP:
            # Every thread's partial is stored before thread 0's release (CUTLASS barrier pattern).
            tl.debug_barrier()
            tile = pid_m * num_n + pid_n
            arrived = tl.atomic_add(sem_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_K - 1:
                tot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for s in tl.static_range(SPLIT_K):  # split order: deterministic
                    tot += tl.load(
                        part_ptr + s * stride_pk + p_offs, mask=mn_mask, other=0.0, cache_modifier=".cg"
                    )
                tl.store(out_ptr + p_offs, tot, mask=mn_mask)
                tl.store(sem_ptr + tile, 0)

    @triton.jit(do_not_specialize=["M"])
    def _router_rows_kernel(
        out_ptr,  # [M, N] fp32, row stride stride_om
        x_ptr,  # [M, K] bf16, unit stride along K
        w_ptr,  # [N, K] bf16 or fp32, unit stride along K
        M,
        N,
        K,
        stride_xm,
        stride_wn,
        stride_om,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,  # >= K (power of two): the whole K in one tile, no split, no reduce
        USE_PDL: tl.constexpr = False,
    ):
        """GEMV for tiny M on the CUDA cores: program = (BLOCK_N weight rows, BLOCK_M tokens).

        Each program holds its whole weight rows (loaded before ``gdc_wait`` under PDL: they are
        read-only parameters), multiplies in fp32 (bf16 x and bf16/fp32 w are exact in fp32;
        each product is rounded once) and sums K with ``tl.sum``'s fixed tree: deterministic.
        """
        if USE_PDL:
            gdc_launch_dependents()
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        m_mask = offs_m < M
        n_mask = offs_n < N
        k_mask = offs_k < K
        w = tl.load(
            w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
            mask=n_mask[:, None] & k_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        if USE_PDL:
            gdc_wait()
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
            mask=m_mask[:, None] & k_mask[None, :],
            other=0.0,
        ).to(tl.float32)
        acc = tl.sum(x[:, None, :] * w[None, :, :], axis=2)
        tl.store(
            out_ptr + offs_m[:, None] * stride_om + offs_n[None, :],
            acc,
            mask=m_mask[:, None] & n_mask[None, :],
        )

    @triton.jit(do_not_specialize=["numel"])
    def _router_reduce_kernel(
        out_ptr,  # [M, N] fp32, contiguous
        part_ptr,  # [SPLIT_K, M, N] fp32, contiguous
        numel,  # M * N
        SPLIT_K: tl.constexpr,
        BLOCK: tl.constexpr,
        N16: tl.constexpr,
        USE_PDL: tl.constexpr = False,  # launched with PDL right after the partials' kernel
    ):
        """Second stage of split-K: out = 0 + part[0] + part[1] + ... in that order (the same
        additions, so the same bits, as the one-launch fixup).

        With ``USE_PDL`` it lets the next kernel launch at once and reads the partials only after
        ``gdc_wait`` (the partials' kernel has completed and its writes are visible).
        """
        if USE_PDL:
            gdc_launch_dependents()
            gdc_wait()
        if N16:
            numel = tl.multiple_of(numel, 16)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for s in tl.static_range(SPLIT_K):
            acc += tl.load(part_ptr + s * numel + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, acc, mask=mask)

# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise ValueError(
            "router_gemm: x and weight must be torch.Tensors; got "
            f"{type(x).__name__} and {type(weight).__name__}"
        )
    if x.dim() != 2 or weight.dim() != 2:
        raise ValueError(
            f"router_gemm: x must be [M, K] and weight [N, K]; got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"router_gemm: K differs: x has K={x.shape[1]}, weight has K={weight.shape[1]}")
    if x.dtype != torch.bfloat16:
        raise ValueError(f"router_gemm: x must be bfloat16; got {x.dtype}")
    if weight.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"router_gemm: weight must be bfloat16 or float32; got {weight.dtype}")
    if x.device != weight.device:
        raise ValueError(f"router_gemm: x on {x.device}, weight on {weight.device}; they must share a device")


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _kernels_interpreted() -> bool:
    """True when the kernels were built by Triton's interpreter (TRITON_INTERPRET=1 at import),
    which has no ``griddepcontrol``: PDL is then off."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_router_dot_kernel, InterpretedFunction)


#: Largest finite bfloat16, ``(2 - 2**-7) * 2**127`` (torch.finfo(torch.bfloat16).max).
BF16_MAX = float(torch.finfo(torch.bfloat16).max)
#: Below this max|w| the ``lo`` plane loses bits to bf16's subnormal range (bf16 keeps fp32's
#: exponent range, 8 significand bits: ``lo`` sits 2**-16 below ``hi``, so |w| >= 2**-110 keeps
#: it normal; 2**-100 leaves margin for the row's smaller entries).
BF16X3_MIN_AMAX = 2.0**-100


def bf16x3_split(weight: torch.Tensor) -> torch.Tensor:
    """The BF16x3 form of an fp32 weight: ``[3, N, K]`` bf16 planes ``hi, mid, lo`` with
    ``hi + mid + lo == weight`` exactly (8 + 8 + 8 significand bits) for ``2**-110 <= |w| <
    BF16_MAX`` (~3.39e38, above which ``hi`` would round to infinity).

    Call it where the weight is loaded (the overlay's ``GateLinear`` subclass does, after every
    ``process_weights_after_loading``) and pass the result to :func:`router_gemm` as ``planes``;
    recompute it after writing the weight. It allocates 1.5x the fp32 weight (6 MiB for
    DeepSeek-V4-Flash's 256 x 4096 gate) and synchronises the stream (the PDL kernels read the
    planes before their ``griddepcontrol.wait``, so the planes must be complete, not merely
    ordered, before the next launch): not for CUDA-graph capture.

    Raises:
        ValueError: ``weight`` is not a 2-D fp32 tensor on a real device, or holds values BF16x3
            cannot carry at fp32 accuracy: NaN, +-inf, ``|w| >= BF16_MAX``, or all nonzero
            ``|w| < 2**-100`` (use fp32 ``F.linear`` for such a weight).
    """
    if weight.dim() != 2 or weight.dtype != torch.float32:
        raise ValueError(
            f"bf16x3_split: weight must be 2-D float32; got {tuple(weight.shape)} {weight.dtype}"
        )
    if weight.device.type == "meta":
        raise ValueError("bf16x3_split: weight is on the meta device; the split needs its values")
    if weight.is_cuda and torch.cuda.is_current_stream_capturing():
        raise ValueError("bf16x3_split: cannot split inside CUDA-graph capture (it allocates and syncs)")
    amax = float(weight.abs().max()) if weight.numel() else 0.0
    if not amax < BF16_MAX:  # also catches NaN
        raise ValueError(
            f"bf16x3_split: weight holds |w| = {amax:.4g}; BF16x3 carries only finite |w| < {BF16_MAX:.4g}"
        )
    if 0.0 < amax < BF16X3_MIN_AMAX:
        raise ValueError(
            f"bf16x3_split: weight's max |w| = {amax:.4g} is below {BF16X3_MIN_AMAX:.4g}; "
            "the lo plane would lose bits to bf16 subnormals"
        )
    hi = weight.to(torch.bfloat16)
    r = weight - hi.float()
    mid = r.to(torch.bfloat16)
    lo = (r - mid.float()).to(torch.bfloat16)
    planes = torch.stack((hi, mid, lo)).contiguous()
    if planes.is_cuda:
        torch.cuda.current_stream(planes.device).synchronize()
    return planes


def _check_planes(planes: torch.Tensor, weight: torch.Tensor) -> None:
    want = (3, *weight.shape)
    if weight.dtype != torch.float32:
        raise ValueError(f"router_gemm: planes are for an fp32 weight; the weight is {weight.dtype}")
    if tuple(planes.shape) != want or planes.dtype != torch.bfloat16:
        raise ValueError(
            f"router_gemm: planes must be bf16 {list(want)} (bf16x3_split(weight)); "
            f"got {planes.dtype} {list(planes.shape)}"
        )
    if planes.device != weight.device:
        raise ValueError(f"router_gemm: planes on {planes.device}, weight on {weight.device}")
    if not planes.is_contiguous():
        raise ValueError("router_gemm: planes must be contiguous (as bf16x3_split returns them)")


#: The kernels compute element offsets in int32 (``offs * stride``, Triton's default for arguments
#: that fit 32 bits): every offset of every operand must stay below this.
INT32_OFFSET_LIMIT = 2**31


def _int32_indexable(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t``, or a contiguous copy when a row stride would overflow int32 offsets.

    Raises:
        ValueError: even the contiguous tensor has ``INT32_OFFSET_LIMIT`` or more elements.
    """
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True))
    if t.numel() == 0 or last < INT32_OFFSET_LIMIT:
        return t
    if t.numel() >= INT32_OFFSET_LIMIT:
        raise ValueError(
            f"router_gemm: {what} {list(t.shape)} holds {t.numel()} elements; the kernels index in "
            f"int32 and take fewer than 2**31 ({INT32_OFFSET_LIMIT}): split the batch"
        )
    return t.contiguous()


def router_gemm_with_config(
    x: torch.Tensor,
    weight: torch.Tensor,
    config: KernelConfig | str | None,
    fixup: bool = True,
    pdl: bool | None = None,
    planes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run one named variant (``None`` or ``"cublas"``: the cuBLAS / torch baseline).

    ``fixup``: for split-K dot configs whose REDUCE_BLOCK is 0, reduce in the same launch (last
    CTA per tile, tile counters from :data:`SEMAPHORES`); False, or no counters available, uses
    the second ``_router_reduce_kernel`` launch, as configs with REDUCE_BLOCK > 0 always do
    (:func:`reduce_config`). Every form computes ``0 + p0 + p1 + ...`` in split order: identical
    bits.
    ``pdl``: override the config's programmatic dependent launch (None: the config's; always
    off when Triton's interpreter built the kernels: it has no ``griddepcontrol``).

    Args:
        x: ``[M, K]`` bf16 activations.
        weight: ``[N, K]`` bf16 or fp32 gate weight.
        config: a :data:`ROUTER_GEMM_CONFIGS` entry or its name.
        planes: ``bf16x3_split(weight)``; required by the configs that read it (``W_MODE`` 2).
    Returns:
        ``[M, N]`` fp32 logits (a new tensor).
    Raises:
        ValueError: bad shapes/dtypes, an unknown config, a config that does not match the weight
            dtype or K, or a pre-split config without ``planes``.
    """
    _check(x, weight)
    if planes is not None:
        _check_planes(planes, weight)
    m, k = x.shape
    n = weight.shape[0]
    if config is None or config == "cublas":
        if weight.dtype == torch.float32:
            return torch.nn.functional.linear(x.float(), weight)
        if x.is_cuda:
            return torch.mm(x, weight.t(), out_dtype=torch.float32)
        return x.float() @ weight.float().t()
    if isinstance(config, str):
        if config not in CONFIGS_BY_NAME:
            raise ValueError(
                f"router_gemm: unknown config {config!r}; choose from cublas, {', '.join(CONFIGS_BY_NAME)}"
            )
        cfg = CONFIGS_BY_NAME[config]
    elif isinstance(config, KernelConfig) and config.kernel in ("_router_dot_kernel", "_router_rows_kernel"):
        cfg = config
        if CONFIGS_BY_NAME.get(cfg.name) is not cfg:  # hand-built: check it before Triton sees it
            validate_config(cfg)
    else:
        raise ValueError(f"router_gemm: config must be a router KernelConfig or its name; got {config!r}")
    if not isinstance(fixup, bool):
        raise ValueError(f"router_gemm: fixup must be True or False; got {fixup!r}")
    if pdl is not None and not isinstance(pdl, bool):
        raise ValueError(f"router_gemm: pdl must be None, True or False; got {pdl!r}")
    meta = cfg.constexprs()
    w_kind = config_weight(cfg)
    if (w_kind == "fp32") != (weight.dtype == torch.float32):
        raise ValueError(f"router_gemm: config {cfg.name} is for a {w_kind} weight; got {weight.dtype}")
    if not takes_k(cfg, k):
        raise ValueError(f"router_gemm: config {cfg.name} takes K <= {meta['BLOCK_K']}; got K={k}")
    if meta.get("W_MODE") == W_BF16X3 and planes is None:
        raise ValueError(
            f"router_gemm: config {cfg.name} reads the pre-split weight; pass planes=bf16x3_split(weight)"
        )
    require_triton()
    if not (x.is_cuda or _interpreting()):
        raise ValueError(
            f"router_gemm: Triton path needs CUDA tensors (got {x.device}); "
            "set TRITON_INTERPRET=1 to run it on the CPU"
        )
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    x = _int32_indexable(x, "x")  # the kernels index with int32 arithmetic
    weight = _int32_indexable(weight, "weight")
    if planes is not None:
        _int32_indexable(planes, "planes")  # contiguous already: raises when too large
    if "USE_PDL" in meta:
        meta["USE_PDL"] = bool(meta["USE_PDL"] if pdl is None else pdl) and not _kernels_interpreted()
    launch = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    if meta.get("USE_PDL"):
        launch["launch_pdl"] = True
    if meta.get("SPLIT_K", 1) * m * n >= INT32_OFFSET_LIMIT:
        raise ValueError(
            f"router_gemm: config {cfg.name}: the output [{m}, {n}] and its "
            f"{meta.get('SPLIT_K', 1)} split-K partial(s) hold {meta.get('SPLIT_K', 1) * m * n} elements; "
            "the kernels index in int32 and take fewer than 2**31: split the batch"
        )
    out = torch.empty((m, n), device=x.device, dtype=torch.float32)
    if m == 0:
        return out
    n16 = n % 16 == 0
    if cfg.kernel == "_router_rows_kernel":
        meta.pop("W_DTYPE")
        grid: tuple[int, ...] = (cdiv(n, meta["BLOCK_N"]), cdiv(m, meta["BLOCK_M"]))
        _router_rows_kernel[grid](out, x, weight, m, n, k, x.stride(0), weight.stride(0), n, **meta, **launch)
        return out
    split = meta["SPLIT_K"]
    part = out if split == 1 else torch.empty((split, m, n), device=x.device, dtype=torch.float32)
    grid = (cdiv(n, meta["BLOCK_N"]) * split * cdiv(m, meta["BLOCK_M"]),)
    w_arg, stride_w3 = weight, 0
    if meta["W_MODE"] == W_BF16X3:
        assert planes is not None  # checked above
        w_arg, stride_w3 = planes, planes.stride(0)
    meta["ONE_TILE"] = bool(meta.get("ONE_TILE", False)) and cdiv(cdiv(k, split), meta["BLOCK_K"]) == 1
    meta.pop("REDUCE_BLOCK", 0)  # a launcher setting, not a constexpr
    sem = None
    if fixup and uses_tile_counters(cfg):
        sem = SEMAPHORES.get(x.device, cdiv(n, meta["BLOCK_N"]) * cdiv(m, meta["BLOCK_M"]))
    _router_dot_kernel[grid](
        out,
        sem if sem is not None else out,
        part,
        x,
        w_arg,
        m,
        n,
        k,
        x.stride(0),
        w_arg.stride(-2),
        stride_w3,
        m * n,
        n,
        1.0,
        **meta,
        N16=n16,
        FIXUP=sem is not None,
        **launch,
    )
    if split > 1 and sem is None:
        rcfg = _reduce_config_for(cfg, meta.get("USE_PDL", False))
        rmeta = rcfg.constexprs()
        _router_reduce_kernel[(cdiv(m * n, rmeta["BLOCK"]),)](
            out,
            part,
            m * n,
            **rmeta,
            N16=n16,
            num_warps=rcfg.num_warps,
            num_stages=rcfg.num_stages,
            **({"launch_pdl": True} if rmeta["USE_PDL"] else {}),
        )
    return out


def _router_gemm_impl(x: torch.Tensor, weight: torch.Tensor, planes: torch.Tensor | None) -> torch.Tensor:
    _check(x, weight)  # before select reads the shapes; router_gemm_with_config checks the planes
    cfg = select_router_config(x.shape[0], weight.dtype, x.shape[1], presplit=planes is not None)
    return router_gemm_with_config(x, weight, cfg, planes=planes)


# torch custom op (shows up as one node under torch.compile; the fake gives shape/dtype only).
@torch.library.custom_op("sparkpair::router_gemm", mutates_args=())
def _router_gemm_op(
    x: torch.Tensor, weight: torch.Tensor, planes: torch.Tensor | None = None
) -> torch.Tensor:
    return _router_gemm_impl(x, weight, planes)


@_router_gemm_op.register_fake
def _router_gemm_fake(
    x: torch.Tensor, weight: torch.Tensor, planes: torch.Tensor | None = None
) -> torch.Tensor:
    _check(x, weight)
    if planes is not None:
        _check_planes(planes, weight)
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)


def router_gemm(x: torch.Tensor, weight: torch.Tensor, planes: torch.Tensor | None = None) -> torch.Tensor:
    """Router logits ``x @ weight.T`` in fp32, through ``torch.ops.sparkpair.router_gemm``.

    Args:
        x: ``[M, K]`` bf16 hidden states (any M >= 0; unit stride along K is preferred, others are
            copied).
        weight: ``[N, K]`` gate weight, bf16 or fp32.
        planes: fp32 weight only: its ``bf16x3_split(weight)`` ``[3, N, K]`` bf16, made once where
            the weight is loaded. With it, M > 4 runs BF16x3 from the planes (fastest); without it,
            each weight tile is split in registers (same accuracy, slower at large M). Either way
            the weight must be finite with ``|w| < 3.39e38``; a non-finite x gives NaN where fp32
            ``F.linear`` may give +-inf (inf * 0 in the lower planes).
    Returns:
        ``[M, N]`` fp32 logits. Deterministic: the same inputs give bitwise the same output.
    Dispatch: :data:`~.router_gemm_configs.ROUTER_BF16_DISPATCH` / ``ROUTER_FP32_DISPATCH``
        (``ROUTER_FP32_NO_PLANES_DISPATCH`` without planes) by weight dtype, M and K (bf16 above
        the table's last M goes to cuBLAS
        ``torch.mm(..., out_dtype=fp32)``).
    Raises:
        ValueError: wrong ranks, dtypes, mismatched K or devices, planes that do not match the
            weight, or CPU tensors without ``TRITON_INTERPRET=1``.
        RuntimeError: Triton is not installed.
    """
    out: torch.Tensor = torch.ops.sparkpair.router_gemm(x, weight, planes)
    return out
