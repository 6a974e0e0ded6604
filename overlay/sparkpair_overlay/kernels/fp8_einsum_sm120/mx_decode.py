"""The block-scaled decode tile: ``_fp8_einsum_mx_decode_kernel`` (few tokens, block-scaled MMA).

The MMA of :mod:`.mx_tile` (``tl.dot_scaled``, exponents read straight from the served layouts,
non-power-of-two fp32 scales written NaN) with weight rows on its M side and the tokens on its N
side, one BLOCK_K-wide K tile per CTA: R / BLOCK_K K splits, each storing an fp32 partial that
:mod:`.split_sum` adds (one split writes bf16 ``out``). Launched with programmatic dependent
launch: the weight tile and its exponents are loaded before ``gdc_wait``, as :mod:`.decode` does
(same caller contract: no kernel right before this one writes ``w`` or ``sw``).

Configs: :data:`sparkpair_overlay.kernels.fp8_einsum_configs.FP8_EINSUM_MX_CONFIGS` (``mxd_*``).
"""

from __future__ import annotations

from .._common import HAS_TRITON, tl, triton

KERNEL = "_fp8_einsum_mx_decode_kernel"

if HAS_TRITON:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    from .._scale_decode import load_block_exponents as _load_exponents
    from ._mx import mx_dot

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_mx_decode_kernel(
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
        BLOCK_K: tl.constexpr,  # K per dot_scaled and per CTA: a multiple of 128 dividing 512
        SPLIT_R: tl.constexpr,  # K splits (the launcher's value: R / BLOCK_K)
        USE_PDL: tl.constexpr,  # launched with programmatic dependent launch
    ):
        """A (D tile, T tile) of group ``program_id(1)``, K tile ``program_id(2)``; one split writes
        bf16 ``out``, several write fp32 partials ``ws[s, t, g, d]``."""
        tl.static_assert((512 % BLOCK_K == 0) & (BLOCK_K % 128 == 0), "BLOCK_K: 128, 256 or 512")
        if USE_PDL:
            gdc_launch_dependents()
        g = tl.program_id(1)
        pid = tl.program_id(0)
        pid_s = tl.program_id(2)
        num_d = tl.cdiv(D, BLOCK_D)
        pid_d = pid % num_d
        pid_t = pid // num_d
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
        acc = tl.zeros((BLOCK_D, BLOCK_T), dtype=tl.float32)
        kt = pid_s
        w = tl.load(w_ptrs + kt * BLOCK_K, mask=d_mask[:, None], other=0.0)
        ew, odd_d = _load_exponents(sw_ptr, sw_rows, d_mask, kt * KB, stride_swk, SW_KIND, NV)
        if USE_PDL:
            gdc_wait()  # a, sa, the workspace and out may be written by the kernels before this one
        a = tl.load(a_ptrs + kt * BLOCK_K, mask=t_mask[:, None], other=0.0)
        ea, odd_t = _load_exponents(sa_ptr, sa_rows, t_mask, kt * KB, stride_sak, SA_KIND, NV)
        acc = mx_dot(acc, a, ea, w, ew, True, False)
        G = tl.num_programs(1)
        if (SA_KIND == 0) | (SW_KIND == 0):
            acc = tl.where(odd_d[:, None] | odd_t[None, :], float("nan"), acc)
        td_mask = d_mask[:, None] & t_mask[None, :]
        o_offs = offs_t[None, :] * stride_ot + g * stride_og + offs_d[:, None]
        p_offs = offs_t[None, :] * (G * D) + g * D + offs_d[:, None]
        if SPLIT_R == 1:
            tl.store(out_ptr + o_offs, acc.to(tl.bfloat16), mask=td_mask)
        else:
            tl.store(ws_ptr + pid_s * stride_wss + p_offs, acc, mask=td_mask)
