"""The split sum: ``_fp8_einsum_split_sum_kernel``, the second launch of a K-split decode.

``out[t, g, d] = bf16(0 + ws[0, t, g, d] + ws[1, t, g, d] + ...)`` in split order (bitwise
deterministic), after :mod:`.decode` or the block-scaled decode tile (:mod:`.mx_decode`) stored
``SPLIT_R`` fp32 partials. Program = (BLOCK_D outputs along D, g, t). Launched with programmatic
dependent launch when the first launch has it, so it is resident and waiting when the partials
land; it reads them only after ``gdc_wait``. No MMA.

Configs: :func:`sparkpair_overlay.kernels.fp8_einsum_configs.split_sum_config`.
"""

from __future__ import annotations

from .._common import HAS_TRITON, tl, triton

KERNEL = "_fp8_einsum_split_sum_kernel"

if HAS_TRITON:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_split_sum_kernel(
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
        BLOCK_D: tl.constexpr,  # outputs along D per program
        SPLIT_R: tl.constexpr,  # partials to add
        USE_PDL: tl.constexpr,  # launched with programmatic dependent launch
    ):
        """``out = bf16(sum of the SPLIT_R partials)`` for BLOCK_D outputs of one (t, g)."""
        if USE_PDL:
            gdc_launch_dependents()
            gdc_wait()
        g = tl.program_id(1)
        t = tl.program_id(2)
        G = tl.num_programs(1)
        offs_d = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)
        mask = offs_d < D
        p_offs = t * (G * D) + g * D + offs_d
        tot = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for s in tl.static_range(SPLIT_R):  # split order: deterministic
            tot += tl.load(ws_ptr + s * stride_wss + p_offs, mask=mask, other=0.0)
        tl.store(out_ptr + t * stride_ot + g * stride_og + offs_d, tot.to(tl.bfloat16), mask=mask)
