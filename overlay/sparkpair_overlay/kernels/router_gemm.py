"""MoE router GEMM: ``logits[M, N] (fp32) = x[M, K] (bf16) @ weight[N, K].T``.

DeepSeek-V4-Flash's gate (``GateLinear``, audit §1): K = hidden = 4096, N = n_routed_experts
= 256, weight bf16 by default (fp32 when a config forces fp32 routing); M = tokens in the
batch (1..16384). On GB10 vLLM 0.33 sends every call to cuBLAS (``torch.mm(..., out_dtype=fp32)``,
Tier 6) or to a true fp32 ``F.linear`` (Tier 7, fp32 weight).

Paths (all deterministic: every reduction has a fixed order, no atomics):

* ``bf16``  bf16 weight, low M: split-K tiles on the tensor cores (``_router_dot_kernel``) or an
  FMA GEMV (``_router_gemv_kernel``), fp32 accumulation; when split, the K-partials go to a
  workspace and ``_router_reduce_kernel`` sums them in split order (two-stage reduction).
* ``cublas`` bf16 weight, large M: ``torch.mm(x, w.T, out_dtype=torch.float32)`` where cuBLAS wins.
* ``fp32_gemv`` fp32 weight, small M: FMA GEMV in fp32 (x is exact in fp32).
* ``fp32_bf16x3`` fp32 weight, large M: the weight tile is split in registers into three bf16
  terms ``w = hi + mid + lo`` (24 significand bits, exact for normal fp32), and three bf16
  tensor-core products accumulate in fp32 (x is bf16, so it needs no split). Error at fp32 level.

``M`` is never a compile-time specialisation: it is a plain int argument listed in
``do_not_specialize`` (Triton 3.6: neither the ``== 1`` nor the divisible-by-16 specialisation
is applied, ``triton/runtime/jit.py`` ``create_function_from_signature``), as is every stride
that depends on M. So one compiled kernel serves every M, and CUDA-graph capture works for any M.

Public API: :func:`router_gemm`; torch custom op ``torch.ops.sparkpair.router_gemm`` (with a fake
implementation for torch.compile / meta tensors); :data:`ROUTER_GEMM_CONFIGS` (every compiled
variant, for the AOT gate); :func:`router_gemm_with_config` (benchmarks and tests).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from ._common import HAS_TRITON, SEMAPHORES, KernelConfig, cdiv, make_config, require_triton, tl, triton

__all__ = [
    "ROUTER_GEMM_CONFIGS",
    "ROUTER_BF16_PLAN",
    "ROUTER_FP32_PLAN",
    "router_gemm",
    "router_gemm_with_config",
    "select_router_config",
]

# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------

if HAS_TRITON:

    @triton.jit(do_not_specialize=["M", "stride_pk"])
    def _router_dot_kernel(
        out_ptr,  # [M, N] fp32, row stride stride_pm (written by the last CTA when FIXUP)
        sem_ptr,  # int32 tile counters, zero on entry and exit (FIXUP only; see SemaphorePool)
        part_ptr,  # out [M, N] fp32 (SPLIT_K == 1) or workspace [SPLIT_K, M, N] fp32
        x_ptr,  # [M, K] bf16, unit stride along K
        w_ptr,  # [N, K] bf16 (W_SPLIT3=False) or fp32 (W_SPLIT3=True), unit stride along K
        M,
        N,
        K,
        stride_xm,
        stride_wn,
        stride_pk,
        stride_pm,
        one,  # fp32 1.0 at run time: keeps Triton from folding "acc += dot(...)" into the MMA chain
        W_SPLIT3: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SPLIT_K: tl.constexpr,
        N16: tl.constexpr,  # N % 16 == 0: stride_pk = M*N is a multiple of 16 (vector stores)
        FIXUP: tl.constexpr = False,  # SPLIT_K > 1: the last CTA of each tile reduces (one launch)
    ):
        """Split-K tile on the tensor cores; program = (n tile, k split, m tile), n fastest."""
        if N16:
            stride_pk = tl.multiple_of(stride_pk, 16)
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
        for k0 in range(0, k_per, BLOCK_K):
            offs_k = k_lo + k0 + tl.arange(0, BLOCK_K)
            k_mask = offs_k < K
            x = tl.load(
                x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                mask=m_mask[:, None] & k_mask[None, :],
                other=0.0,
            )
            w = tl.load(
                w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
                mask=n_mask[:, None] & k_mask[None, :],
                other=0.0,
            )
            if W_SPLIT3:
                hi = w.to(tl.bfloat16)
                r = w - hi.to(tl.float32)
                mid = r.to(tl.bfloat16)
                lo = (r - mid.to(tl.float32)).to(tl.bfloat16)
                acc += tl.dot(x, tl.trans(hi)) * one
                acc_lo += tl.dot(x, tl.trans(mid), tl.dot(x, tl.trans(lo))) * one
            else:
                acc += tl.dot(x, tl.trans(w)) * one
        if W_SPLIT3:
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

    @triton.jit(do_not_specialize=["M", "stride_pk"])
    def _router_gemv_kernel(
        part_ptr,  # out [M, N] fp32 (SPLIT_K == 1) or workspace [SPLIT_K, M, N] fp32
        x_ptr,  # [M, K] bf16
        w_ptr,  # [N, K] bf16 or fp32
        M,
        N,
        K,
        stride_xm,
        stride_wn,
        stride_pk,
        stride_pm,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr,
        SPLIT_K: tl.constexpr,
        N16: tl.constexpr,
    ):
        """FMA GEMV in fp32 (CUDA cores); fixed-order tree reduction along K inside the tile."""
        if N16:
            stride_pk = tl.multiple_of(stride_pk, 16)
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
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, k_per, BLOCK_K):
            offs_k = k_lo + k0 + tl.arange(0, BLOCK_K)
            k_mask = offs_k < K
            x = tl.load(
                x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :],
                mask=m_mask[:, None] & k_mask[None, :],
                other=0.0,
            ).to(tl.float32)
            w = tl.load(
                w_ptr + offs_n[:, None] * stride_wn + offs_k[None, :],
                mask=n_mask[:, None] & k_mask[None, :],
                other=0.0,
            ).to(tl.float32)
            acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
        p_ptrs = part_ptr + pid_k * stride_pk + offs_m[:, None] * stride_pm + offs_n[None, :]
        tl.store(p_ptrs, acc, mask=m_mask[:, None] & n_mask[None, :])

    @triton.jit(do_not_specialize=["numel"])
    def _router_reduce_kernel(
        out_ptr,  # [M, N] fp32, contiguous
        part_ptr,  # [SPLIT_K, M, N] fp32, contiguous
        numel,  # M * N
        SPLIT_K: tl.constexpr,
        BLOCK: tl.constexpr,
        N16: tl.constexpr,
    ):
        """Second stage of split-K: out = sum over s of part[s], s = 0, 1, ... in that order."""
        if N16:
            numel = tl.multiple_of(numel, 16)
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.load(part_ptr + offs, mask=mask, other=0.0)
        for s in tl.static_range(1, SPLIT_K):
            acc += tl.load(part_ptr + s * numel + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, acc, mask=mask)

# ----------------------------------------------------------------------------------------------
# Configs: every compiled variant, in one place (the AOT gate compiles all of them).
# ----------------------------------------------------------------------------------------------


def _dot(
    name: str, bm: int, bn: int, bk: int, split: int, warps: int, stages: int, split3: bool
) -> KernelConfig:
    return make_config(
        name,
        "_router_dot_kernel",
        warps,
        stages,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        SPLIT_K=split,
        W_SPLIT3=split3,
    )


def _gemv(name: str, bm: int, bn: int, bk: int, split: int, warps: int, w_dtype: str) -> KernelConfig:
    # w_dtype is not a constexpr (the pointer type carries it); it picks the AOT signature.
    return make_config(
        name,
        "_router_gemv_kernel",
        warps,
        1,
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        SPLIT_K=split,
        W_DTYPE=w_dtype,
    )


#: Every router variant. Keys of ``meta``: BLOCK_M/N/K tile sizes (elements), SPLIT_K (K partitions,
#: >1 adds the fixed-order reduce kernel), W_SPLIT3 (dot kernel: fp32 weight via BF16x3) or
#: W_DTYPE (gemv kernel: weight dtype, "bf16" or "fp32"). Each fits GB10's 101,376 B of shared
#: memory (checked by ``sparkpair kernels build`` and tests/aot).
ROUTER_GEMM_CONFIGS: tuple[KernelConfig, ...] = (
    # bf16 weight. Split-K on the tensor cores: ~128 CTAs, 16 KB of weight each at M <= 16.
    _dot("bf16_dot_m16_n16_s8", 16, 16, 256, 8, 4, 3, False),
    _dot("bf16_dot_m16_n16_s8_k512", 16, 16, 512, 8, 4, 1, False),
    _dot("bf16_dot_m16_n16_s16", 16, 16, 256, 16, 4, 1, False),
    _dot("bf16_dot_m16_n32_s16", 16, 32, 128, 16, 4, 2, False),
    _dot("bf16_dot_m32_n32_s8", 32, 32, 128, 8, 4, 3, False),
    _dot("bf16_dot_m64_n64_s4", 64, 64, 128, 4, 4, 3, False),
    _dot("bf16_dot_m128_n128_s1", 128, 128, 64, 1, 8, 3, False),
    # bf16 FMA GEMV: kept as the CUDA-core reference; 1.7x slower than the dot path at M=1 on H200.
    _gemv("bf16_gemv_m4_n8_s4", 4, 8, 256, 4, 4, "bf16"),
    # fp32 weight: fp32 FMA GEMV (exact fp32 arithmetic; slower than BF16x3 on H200 at every M).
    _gemv("fp32_gemv_m4_n8_s8", 4, 8, 128, 8, 4, "fp32"),
    # fp32 weight: BF16x3 on the tensor cores.
    _dot("fp32x3_dot_m16_n16_s8", 16, 16, 128, 8, 4, 3, True),
    _dot("fp32x3_dot_m16_n16_s16", 16, 16, 128, 16, 4, 2, True),
    _dot("fp32x3_dot_m32_n32_s8", 32, 32, 64, 8, 4, 3, True),
    _dot("fp32x3_dot_m64_n64_s2", 64, 64, 64, 2, 4, 3, True),
    _dot("fp32x3_dot_m128_n64_s1", 128, 64, 32, 1, 4, 3, True),
    _dot("fp32x3_dot_m128_n128_s1", 128, 128, 32, 1, 8, 3, True),
)

#: The second-stage reduce kernel's one config (elementwise; no shared memory).
ROUTER_REDUCE_CONFIG: KernelConfig = make_config("reduce", "_router_reduce_kernel", 4, 1, BLOCK=1024)

_CONFIGS_BY_NAME = {c.name: c for c in ROUTER_GEMM_CONFIGS}

#: Dispatch for a bf16 weight: ``(max_M, config name)`` in increasing max_M; ``"cublas"`` means
#: ``torch.mm(x, W.T, out_dtype=fp32)``; beyond the last entry, cuBLAS. Source: H200 sweep at
#: 14999a3 (benchmarks/bench_router_gemm.py, CUDA-graph replay p50, warm L2, 2026-11-29, rows in
#: benchmarks/results/router_gemm.csv): M=1..16 bf16_dot_m16_n16_s8_k512 3.61-3.72 us vs cuBLAS
#: 5.55-6.15; M=32 4.63 vs 6.14; M=64 bf16_dot_m32_n32_s8 5.23 vs 6.31; from M=128 cuBLAS is as
#: fast or faster (128: 6.41, 512: 7.27, 8192: 27.5 us).
ROUTER_BF16_PLAN: tuple[tuple[int, str], ...] = (
    (32, "bf16_dot_m16_n16_s8_k512"),
    (64, "bf16_dot_m32_n32_s8"),
)

#: Dispatch for an fp32 weight: ``(max_M, config name)``; ``"cublas"`` means the true-fp32
#: ``F.linear(x.float(), W)`` (TF32 off); beyond the last entry, the last config. Source: the same
#: sweep: M=1 F.linear 5.62 us vs BF16x3 8.2; M=2..16 fp32x3_dot_m16_n16_s16 7.04-7.22 us vs
#: 12.4-17.8; M=32 fp32x3_dot_m16_n16_s8 10.30 vs 14.15; M=64/128 fp32x3_dot_m32_n32_s8 13.4/17.6
#: vs 14.9/19.7; M=256/512 F.linear 27.5/41.5; M=1024..4096 fp32x3_dot_m64_n64_s2 49/59/115 us vs
#: 70/128/233; M=8192 fp32x3_dot_m128_n64_s1 164 us vs 446. Max rel. error vs fp64 <= 7.1e-7.
ROUTER_FP32_PLAN: tuple[tuple[int, str], ...] = (
    (1, "cublas"),
    (16, "fp32x3_dot_m16_n16_s16"),
    (32, "fp32x3_dot_m16_n16_s8"),
    (128, "fp32x3_dot_m32_n32_s8"),
    (512, "cublas"),
    (4096, "fp32x3_dot_m64_n64_s2"),
    (1 << 62, "fp32x3_dot_m128_n64_s1"),
)


def select_router_config(m: int, weight_dtype: torch.dtype) -> KernelConfig | None:
    """The config :func:`router_gemm` uses for ``m`` rows and this weight dtype (``None``: cuBLAS)."""
    plan = ROUTER_FP32_PLAN if weight_dtype == torch.float32 else ROUTER_BF16_PLAN
    for max_m, name in plan:
        if m <= max_m:
            return None if name == "cublas" else _CONFIGS_BY_NAME[name]
    return None


# ----------------------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------------------


def _check(x: torch.Tensor, weight: torch.Tensor) -> None:
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


def router_gemm_with_config(
    x: torch.Tensor, weight: torch.Tensor, config: KernelConfig | str | None, fixup: bool = True
) -> torch.Tensor:
    """Run one named variant (``None`` or ``"cublas"``: the cuBLAS / torch baseline).

    ``fixup``: for split-K dot configs, reduce in the same launch (last CTA per tile, tile
    counters from :data:`SEMAPHORES`); False, or no counters available, uses the second
    ``_router_reduce_kernel`` launch. Both sum the partials in the same order: identical bits.

    Args:
        x: ``[M, K]`` bf16 activations.
        weight: ``[N, K]`` bf16 or fp32 gate weight.
        config: a :data:`ROUTER_GEMM_CONFIGS` entry or its name.
    Returns:
        ``[M, N]`` fp32 logits (a new tensor).
    Raises:
        ValueError: bad shapes/dtypes, or a config that does not match the weight dtype.
    """
    _check(x, weight)
    m, k = x.shape
    n = weight.shape[0]
    if config is None or config == "cublas":
        if weight.dtype == torch.float32:
            return torch.nn.functional.linear(x.float(), weight)
        if x.is_cuda:
            return torch.mm(x, weight.t(), out_dtype=torch.float32)
        return x.float() @ weight.float().t()
    cfg = _CONFIGS_BY_NAME[config] if isinstance(config, str) else config
    require_triton()
    if not (x.is_cuda or _interpreting()):
        raise ValueError(
            f"router_gemm: Triton path needs CUDA tensors (got {x.device}); "
            "set TRITON_INTERPRET=1 to run it on the CPU"
        )
    meta = cfg.constexprs()
    w_is_fp32 = weight.dtype == torch.float32
    if cfg.kernel == "_router_dot_kernel" and meta["W_SPLIT3"] != w_is_fp32:
        raise ValueError(
            f"router_gemm: config {cfg.name} is for a {'fp32' if meta['W_SPLIT3'] else 'bf16'} "
            f"weight; got {weight.dtype}"
        )
    if cfg.kernel == "_router_gemv_kernel" and (meta["W_DTYPE"] == "fp32") != w_is_fp32:
        raise ValueError(
            f"router_gemm: config {cfg.name} is for a {meta['W_DTYPE']} weight; got {weight.dtype}"
        )
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    out = torch.empty((m, n), device=x.device, dtype=torch.float32)
    if m == 0:
        return out
    split = meta["SPLIT_K"]
    part = out if split == 1 else torch.empty((split, m, n), device=x.device, dtype=torch.float32)
    grid = (cdiv(n, meta["BLOCK_N"]) * split * cdiv(m, meta["BLOCK_M"]),)
    args = (part, x, weight, m, n, k, x.stride(0), weight.stride(0), m * n, n)
    n16 = n % 16 == 0
    if cfg.kernel == "_router_dot_kernel":
        sem = None
        if split > 1 and fixup:
            sem = SEMAPHORES.get(x.device, cdiv(n, meta["BLOCK_N"]) * cdiv(m, meta["BLOCK_M"]))
        _router_dot_kernel[grid](
            out,
            sem if sem is not None else out,
            *args,
            1.0,
            **meta,
            N16=n16,
            FIXUP=sem is not None,
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
        )
        if sem is not None:
            return out
    else:
        meta = {kk: v for kk, v in meta.items() if kk != "W_DTYPE"}
        _router_gemv_kernel[grid](*args, **meta, N16=n16, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if split > 1:
        rmeta = ROUTER_REDUCE_CONFIG.constexprs()
        _router_reduce_kernel[(cdiv(m * n, rmeta["BLOCK"]),)](
            out,
            part,
            m * n,
            SPLIT_K=split,
            **rmeta,
            N16=n16,
            num_warps=ROUTER_REDUCE_CONFIG.num_warps,
            num_stages=ROUTER_REDUCE_CONFIG.num_stages,
        )
    return out


def _router_gemm_impl(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    _check(x, weight)
    return router_gemm_with_config(x, weight, select_router_config(x.shape[0], weight.dtype))


# torch custom op (shows up as one node under torch.compile; the fake gives shape/dtype only).
@torch.library.custom_op("sparkpair::router_gemm", mutates_args=())
def _router_gemm_op(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _router_gemm_impl(x, weight)


@_router_gemm_op.register_fake
def _router_gemm_fake(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    _check(x, weight)
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)


def router_gemm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Router logits ``x @ weight.T`` in fp32, through ``torch.ops.sparkpair.router_gemm``.

    Args:
        x: ``[M, K]`` bf16 hidden states (any M >= 0; unit stride along K is preferred, others are
            copied).
        weight: ``[N, K]`` gate weight, bf16 or fp32.
    Returns:
        ``[M, N]`` fp32 logits. Deterministic: the same inputs give bitwise the same output.
    Dispatch: :data:`ROUTER_BF16_PLAN` / :data:`ROUTER_FP32_PLAN` by weight dtype and M
        (bf16 above the plan's last M goes to cuBLAS ``torch.mm(..., out_dtype=fp32)``).
    Raises:
        ValueError: wrong ranks, dtypes, mismatched K or devices, or CPU tensors without
            ``TRITON_INTERPRET=1``.
        RuntimeError: Triton is not installed.
    """
    return torch.ops.sparkpair.router_gemm(x, weight)


def config_names(configs: Sequence[KernelConfig] = ROUTER_GEMM_CONFIGS) -> list[str]:
    """Names of the configs (benchmarks sweep these)."""
    return [c.name for c in configs]
