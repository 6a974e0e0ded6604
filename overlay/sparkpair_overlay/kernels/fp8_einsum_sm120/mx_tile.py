"""The block-scaled tile loop: ``_fp8_einsum_mx_tile_kernel`` (prefill on GB10).

``tl.dot_scaled(e4m3, ue8m0)``: the tensor core applies the scales itself (the MXFP8 MMA,
``mma.sync ... kind::mxf8f6f4.block_scale`` on sm_120/sm_121 with Triton 3.8,
docs/reference/triton-gb10.md). Each 32-wide K vector takes the exponent byte of its 128-wide
scale block (repeated over its four vectors: exact), read straight from the served layouts
(packed int32 words, exponent bytes, or the exponent field of fp32 scales; no copy). fp32 scales
must be powers of two (vLLM's are: docs/reference/vllm-code-paths.md#o_proj-scales); an output
whose token or weight row has a fp32 scale that is not is written NaN, never a wrong number.

One CTA per (T tile, D tile) of group ``program_id(1)``, tokens on the MMA's M side, a pipelined
loop over BLOCK_K-wide K tiles. ``PROMOTE``: each K tile's MMA result is added to an fp32
accumulator outside the MMA (as DeepSeek's kernels promote every 128 of K); else every K tile
accumulates in the MMA itself over the whole K (whether sm_120/sm_121's MMA accumulates in full
fp32 over K = 4096 is what the probe measures against fp64 for both).

Configs: :data:`sparkpair_overlay.kernels.fp8_einsum_configs.FP8_EINSUM_MX_CONFIGS` (``mx_*``).
"""

from __future__ import annotations

from .._common import HAS_TRITON, tl, triton

KERNEL = "_fp8_einsum_mx_tile_kernel"

if HAS_TRITON:
    from .._scale_decode import load_block_exponents as _load_exponents
    from ._mx import mx_dot

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_mx_tile_kernel(
        out_ptr,  # [T, G, D] bf16, unit stride along D
        ws_ptr,  # SPLIT_R > 1: fp32 partials [SPLIT_R, T, G, D] contiguous (else unused)
        sem_ptr,  # tile loop, SPLIT_R > 1: int32 tile counters, zero on entry and exit (else unused)
        a_ptr,  # [T, G, R] e4m3, unit stride along R
        sa_ptr,  # scales of a: fp32 / int32 packed / uint8, [T, G, Ks]
        w_ptr,  # [G, D, R] e4m3, unit stride along R
        sw_ptr,  # scales of w: [G, D or D/128, Ks]
        T,
        D,
        R,
        stride_ot,
        stride_og,
        stride_at,
        stride_ag,
        stride_wg,
        stride_wd,
        stride_sat,
        stride_sag,
        stride_sak,
        stride_swg,
        stride_swd,
        stride_swk,
        stride_wss,  # T*G*D: workspace stride between splits
        SA_KIND: tl.constexpr,
        SW_KIND: tl.constexpr,
        SW_PER_ROW: tl.constexpr,  # True: sw indexed by d; False: by d // 128
        BLOCK_T: tl.constexpr,
        BLOCK_D: tl.constexpr,
        BLOCK_K: tl.constexpr,  # K per dot_scaled: a multiple of 128 dividing 512
        GROUP_T: tl.constexpr,  # T tiles per swizzle group (L2 reuse of w)
        SPLIT_R: tl.constexpr,  # K splits (1: every config writes bf16 out)
        PROMOTE: tl.constexpr,  # each K tile's MMA result added in fp32 (else MMA-accumulated)
    ):
        """A (T tile, D tile) of group ``program_id(1)``, K split ``program_id(2)``; one split writes
        bf16 ``out``, several write fp32 partials ``ws[s, t, g, d]``."""
        tl.static_assert((512 % BLOCK_K == 0) & (BLOCK_K % 128 == 0), "BLOCK_K: 128, 256 or 512")
        g = tl.program_id(1)
        pid = tl.program_id(0)
        pid_s = tl.program_id(2)
        num_d = tl.cdiv(D, BLOCK_D)
        num_t = tl.cdiv(T, BLOCK_T)
        width = GROUP_T * num_d  # swizzle: GROUP_T consecutive T tiles share a weight slab in L2
        first_t = (pid // width) * GROUP_T
        size_t = tl.minimum(num_t - first_t, GROUP_T)
        pid_t = first_t + (pid % width) % size_t
        pid_d = (pid % width) // size_t
        offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        offs_k = tl.arange(0, BLOCK_K)
        t_mask = offs_t < T
        d_mask = offs_d < D
        a_ptrs = a_ptr + offs_t[:, None] * stride_at + g * stride_ag + offs_k[None, :]
        w_ptrs = w_ptr + g * stride_wg + offs_d[:, None] * stride_wd + offs_k[None, :]
        sa_rows = offs_t * stride_sat + g * stride_sag
        if SW_PER_ROW:
            sw_rows = g * stride_swg + offs_d * stride_swd
        else:
            sw_rows = g * stride_swg + (offs_d // 128) * stride_swd
        NV: tl.constexpr = BLOCK_K // 32
        KB: tl.constexpr = BLOCK_K // 128
        acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
        num_kt = R // BLOCK_K
        kt_per = tl.cdiv(num_kt, SPLIT_R)
        kt_lo = pid_s * kt_per
        kt_hi = tl.minimum(kt_lo + kt_per, num_kt)
        odd_t = tl.zeros((BLOCK_T,), dtype=tl.int1)
        odd_d = tl.zeros((BLOCK_D,), dtype=tl.int1)
        for kt in tl.range(kt_lo, kt_hi):  # tile indices: keeps the 16-byte loads
            a = tl.load(a_ptrs + kt * BLOCK_K, mask=t_mask[:, None], other=0.0)
            w = tl.load(w_ptrs + kt * BLOCK_K, mask=d_mask[:, None], other=0.0)
            ea, ot = _load_exponents(sa_ptr, sa_rows, t_mask, kt * KB, stride_sak, SA_KIND, NV)
            ew, od = _load_exponents(sw_ptr, sw_rows, d_mask, kt * KB, stride_swk, SW_KIND, NV)
            acc = mx_dot(acc, a, ea, w, ew, False, PROMOTE)
            odd_t |= ot
            odd_d |= od
        G = tl.num_programs(1)
        if (SA_KIND == 0) | (SW_KIND == 0):
            acc = tl.where(odd_t[:, None] | odd_d[None, :], float("nan"), acc)
        td_mask = t_mask[:, None] & d_mask[None, :]
        o_offs = offs_t[:, None] * stride_ot + g * stride_og + offs_d[None, :]
        p_offs = offs_t[:, None] * (G * D) + g * D + offs_d[None, :]
        if SPLIT_R == 1:
            tl.store(out_ptr + o_offs, acc.to(tl.bfloat16), mask=td_mask)
        else:
            tl.store(ws_ptr + pid_s * stride_wss + p_offs, acc, mask=td_mask)
