"""The decode tile: ``_fp8_einsum_decode_kernel`` (few tokens on GB10).

Weight rows on the MMA's M side (the few tokens are its N), KB_PER 128-wide K blocks per CTA,
every weight tile and its scales loaded at once, first, then the activations, then KB_PER
``tl.dot`` MMAs on fp8 operands into one fp32 accumulator, each K block's partial promoted with
its scales. One K split writes bf16 ``out``; several store fp32 partials that
:mod:`.split_sum` adds. Launched with programmatic dependent launch (``USE_PDL``): the weight and
its scales are loaded before ``gdc_wait``, so the weight stream may start while the kernel before
this one on the stream finishes; ``a``, ``sa``, the workspace and ``out`` are touched only after
it. Caller contract (as the router's): no kernel right before this one writes ``w`` or ``sw``
(model parameters).

Configs: :data:`sparkpair_overlay.kernels.fp8_einsum_configs.FP8_EINSUM_DECODE_CONFIGS`.
"""

from __future__ import annotations

from .._common import HAS_TRITON, tl, triton

KERNEL = "_fp8_einsum_decode_kernel"

if HAS_TRITON:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    from .._scale_decode import load_block_scale as _load_scale

    @triton.jit
    def _dec_w(w_ptrs, sw_ptr, sw_offs, sw_mask, kb, num_kb, d_mask, stride_swk, SW_KIND: tl.constexpr):
        """K block ``kb``'s weight tile [BLOCK_D, 128] and its weight scale(s)."""
        kb_ok = kb < num_kb
        w = tl.load(w_ptrs, mask=d_mask[:, None] & kb_ok, other=0.0)
        if SW_KIND == 1:
            kw = kb // 4
        else:
            kw = kb
        s_w = _load_scale(sw_ptr, sw_offs + kw * stride_swk, kb, sw_mask & kb_ok, SW_KIND)
        return w, s_w

    @triton.jit
    def _dec_a(a_ptrs, sa_ptr, sa_base, kb, num_kb, t_mask, stride_sak, SA_KIND: tl.constexpr):
        """K block ``kb``'s activation tile [BLOCK_T, 128] and its per-token scales."""
        kb_ok = kb < num_kb
        a = tl.load(a_ptrs, mask=t_mask[:, None] & kb_ok, other=0.0)
        if SA_KIND == 1:
            ka = kb // 4
        else:
            ka = kb
        s_a = _load_scale(sa_ptr, sa_base + ka * stride_sak, kb, t_mask & kb_ok, SA_KIND)
        return a, s_a

    @triton.jit
    def _dec_mma(acc, w, s_w, a, s_a, SW_VEC: tl.constexpr):
        """``acc[d, t] += dot(w, a.T)[d, t] * s_w * s_a[t]`` (weight rows on the MMA's M side)."""
        part = tl.dot(w, tl.trans(a))
        if SW_VEC:
            acc += part * (s_w[:, None] * s_a[None, :])
        else:
            acc += part * (s_w * s_a)[None, :]
        return acc

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_decode_kernel(
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
        BLOCK_R: tl.constexpr,  # == 128 (one scale block per K block)
        SPLIT_R: tl.constexpr,  # K splits (the launcher's value: R / (128 * KB_PER))
        KB_PER: tl.constexpr,  # K blocks (of 128) per CTA, all loaded at once
        USE_PDL: tl.constexpr,  # launched with programmatic dependent launch
    ):
        """Decode: one CTA per (D tile, T tile) x group x KB_PER K blocks (split-K over R).

        Every weight tile of the CTA and its scales are loaded first, all at once (KB_PER
        independent loads in flight; no software pipeline to fill), and under ``USE_PDL``
        before ``gdc_wait``: the weight is a parameter that no earlier kernel writes. Then the
        activations and their scales, then KB_PER MMAs with the weight rows on the M side
        (mma.sync's M from D; the few tokens are its N). One K split (SPLIT_R == 1) writes
        ``out``; several write fp32 partials ``ws[s, t, g, d]``, summed by the split sum in split order.
        """
        tl.static_assert((KB_PER == 1) | (KB_PER == 2) | (KB_PER == 4), "KB_PER: 1, 2 or 4")
        if USE_PDL:
            gdc_launch_dependents()
        pid = tl.program_id(0)
        g = tl.program_id(1)
        pid_s = tl.program_id(2)
        num_d = tl.cdiv(D, BLOCK_D)
        pid_d = pid % num_d
        pid_t = pid // num_d
        offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        offs_r = tl.arange(0, BLOCK_R)
        t_mask = offs_t < T
        d_mask = offs_d < D
        num_kb = R // BLOCK_R
        kb0 = pid_s * KB_PER
        w_ptrs = w_ptr + g * stride_wg + offs_d[:, None] * stride_wd + (kb0 * BLOCK_R + offs_r)[None, :]
        if SW_PER_ROW:
            sw_offs = g * stride_swg + offs_d * stride_swd
            sw_mask = d_mask
        else:
            tl.static_assert(128 % BLOCK_D == 0, "block weight scales need BLOCK_D to divide 128")
            sw_offs = g * stride_swg + ((pid_d * BLOCK_D) // 128) * stride_swd
            sw_mask = pid_d * BLOCK_D < D
        # The weight and its scales: every load issued before any is used.
        sws = (sw_ptr, sw_offs, sw_mask)
        w0, s_w0 = _dec_w(w_ptrs, *sws, kb0, num_kb, d_mask, stride_swk, SW_KIND)
        if KB_PER >= 2:
            w1, s_w1 = _dec_w(w_ptrs + BLOCK_R, *sws, kb0 + 1, num_kb, d_mask, stride_swk, SW_KIND)
        if KB_PER >= 4:
            w2, s_w2 = _dec_w(w_ptrs + 2 * BLOCK_R, *sws, kb0 + 2, num_kb, d_mask, stride_swk, SW_KIND)
            w3, s_w3 = _dec_w(w_ptrs + 3 * BLOCK_R, *sws, kb0 + 3, num_kb, d_mask, stride_swk, SW_KIND)
        if USE_PDL:
            gdc_wait()  # a, sa (and the workspace, out) may be written by the kernels before this one
        a_ptrs = a_ptr + offs_t[:, None] * stride_at + g * stride_ag + (kb0 * BLOCK_R + offs_r)[None, :]
        sas = (sa_ptr, offs_t * stride_sat + g * stride_sag)
        a0, s_a0 = _dec_a(a_ptrs, *sas, kb0, num_kb, t_mask, stride_sak, SA_KIND)
        if KB_PER >= 2:
            a1, s_a1 = _dec_a(a_ptrs + BLOCK_R, *sas, kb0 + 1, num_kb, t_mask, stride_sak, SA_KIND)
        if KB_PER >= 4:
            a2, s_a2 = _dec_a(a_ptrs + 2 * BLOCK_R, *sas, kb0 + 2, num_kb, t_mask, stride_sak, SA_KIND)
            a3, s_a3 = _dec_a(a_ptrs + 3 * BLOCK_R, *sas, kb0 + 3, num_kb, t_mask, stride_sak, SA_KIND)
        # K blocks in order from 0: the same additions on every run.
        acc = tl.zeros((BLOCK_D, BLOCK_T), dtype=tl.float32)
        acc = _dec_mma(acc, w0, s_w0, a0, s_a0, SW_PER_ROW)
        if KB_PER >= 2:
            acc = _dec_mma(acc, w1, s_w1, a1, s_a1, SW_PER_ROW)
        if KB_PER >= 4:
            acc = _dec_mma(acc, w2, s_w2, a2, s_a2, SW_PER_ROW)
            acc = _dec_mma(acc, w3, s_w3, a3, s_a3, SW_PER_ROW)
        td_mask = d_mask[:, None] & t_mask[None, :]
        if SPLIT_R == 1:
            o_ptrs = out_ptr + offs_t[None, :] * stride_ot + g * stride_og + offs_d[:, None]
            tl.store(o_ptrs, acc.to(tl.bfloat16), mask=td_mask)
        else:
            G = tl.num_programs(1)
            p_offs = pid_s * stride_wss + offs_t[None, :] * (G * D) + g * D + offs_d[:, None]
            tl.store(ws_ptr + p_offs, acc, mask=td_mask)
