"""The promoting tile loop: ``_fp8_einsum_tile_kernel`` (prefill and mid T on GB10).

One CTA per (T tile, D tile, K split) of group ``program_id(1)``: a software-pipelined loop over
128-wide K blocks, ``tl.dot`` on fp8 operands into an fp32 MMA partial per K block, scaled into the
fp32 accumulator ("promotion"). Block weight scales give each tile one scale per K block (every
config's BLOCK_D divides 128): one FMA per element; per-row weight scales cost an FMUL and an FMA.
``SHARE_CHECK`` tiles on per-row scales first check whether all their rows hold the same raw scale
entries (DeepGEMM's per-row copies of 128x128 block scales) and then take the one-scale loop.
``SPLIT_R`` > 1: every split stores an fp32 partial and the last CTA of each tile (an atomic
counter per tile, ``sem_ptr``) sums them in split order and writes bf16 ``out``: one launch.

Configs: :data:`sparkpair_overlay.kernels.fp8_einsum_configs.FP8_EINSUM_TILE_CONFIGS`.
"""

from __future__ import annotations

from .._common import HAS_TRITON, tl, triton

KERNEL = "_fp8_einsum_tile_kernel"

if HAS_TRITON:
    from .._scale_decode import load_block_scale as _load_scale

    @triton.jit
    def _k_loop(
        acc,
        a_ptrs,
        w_ptrs,
        sa_ptr,
        sw_ptr,
        sa_base,
        sw_offs,
        sw_mask,
        kb_lo,
        kb_hi,
        t_mask,
        d_mask,
        stride_sak,
        stride_swk,
        SA_KIND: tl.constexpr,
        SW_KIND: tl.constexpr,
        SW_VEC: tl.constexpr,
        BLOCK_R: tl.constexpr,
        STAGES: tl.constexpr,
    ):
        """K blocks ``kb_lo .. kb_hi-1``: ``acc += dot(a_k, w_k.T) * sa_k * sw_k`` in fp32.

        ``SW_VEC``: one weight scale per tile row (``sw_offs`` is ``[BLOCK_D]``): FMUL + FMA per
        element; else one for the whole tile (``sw_offs`` scalar): one FMA per element.
        ``STAGES``: software-pipeline depth of this loop (``None``: the launch's num_stages).
        """
        for kb in tl.range(kb_lo, kb_hi, num_stages=STAGES):
            a = tl.load(a_ptrs, mask=t_mask[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=d_mask[:, None], other=0.0)
            if SA_KIND == 1:
                ka = kb // 4
            else:
                ka = kb
            if SW_KIND == 1:
                kw = kb // 4
            else:
                kw = kb
            s_a = _load_scale(sa_ptr, sa_base + ka * stride_sak, kb, t_mask, SA_KIND)
            s_w = _load_scale(sw_ptr, sw_offs + kw * stride_swk, kb, sw_mask, SW_KIND)
            part = tl.dot(a, tl.trans(w))
            if SW_VEC:
                acc += part * (s_a[:, None] * s_w[None, :])
            else:
                acc += part * (s_a * s_w)[:, None]
            a_ptrs += BLOCK_R
            w_ptrs += BLOCK_R
        return acc

    @triton.jit
    def _rows_share_scales(sw_ptr, sw_offs, sw_first, lo, hi, d_mask, stride_swk):
        """Whether every row of the tile holds its first row's raw scale entries ``lo .. hi-1``
        (one reduction for the whole range)."""
        differ = tl.zeros_like(sw_offs)
        for k in range(lo, hi):
            v = tl.load(sw_ptr + sw_offs + k * stride_swk, mask=d_mask)
            v0 = tl.load(sw_ptr + sw_first + k * stride_swk)
            differ |= tl.where(d_mask & (v != v0), 1, 0)
        return tl.max(differ, axis=0) == 0

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_tile_kernel(
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
        BLOCK_R: tl.constexpr,  # == 128 (one scale block per step)
        GROUP_T: tl.constexpr,  # T tiles per swizzle group (L2 reuse of w)
        SPLIT_R: tl.constexpr = 1,  # K splits; >1: the last CTA of each tile sums them (one launch)
        SHARE_CHECK: tl.constexpr = False,  # per-row sw: tiles whose rows share it take the 1-scale loop
        ROW_STAGES: tl.constexpr = 2,  # SHARE_CHECK: pipeline depth of the per-row loop
    ):
        """(T tile, D tile, K split) per CTA, a software-pipelined loop over K blocks."""
        g = tl.program_id(1)
        pid = tl.program_id(0)
        pid_s = tl.program_id(2)
        num_d = tl.cdiv(D, BLOCK_D)
        num_t = tl.cdiv(T, BLOCK_T)
        # Swizzle: GROUP_T consecutive T tiles share each D tile's weight slab in L2.
        width = GROUP_T * num_d
        group_id = pid // width
        first_t = group_id * GROUP_T
        size_t = tl.minimum(num_t - first_t, GROUP_T)
        pid_t = first_t + (pid % width) % size_t
        pid_d = (pid % width) // size_t

        offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
        offs_r = tl.arange(0, BLOCK_R)
        t_mask = offs_t < T
        d_mask = offs_d < D
        # int32 offsets: the largest operand (T=16384, G=8, R=4096: 2**29 elements) fits.
        a_ptrs = a_ptr + offs_t[:, None] * stride_at + g * stride_ag + offs_r[None, :]
        w_ptrs = w_ptr + g * stride_wg + offs_d[:, None] * stride_wd + offs_r[None, :]
        sa_base = offs_t * stride_sat + g * stride_sag
        if SW_PER_ROW:
            sw_first = g * stride_swg + (pid_d * BLOCK_D) * stride_swd
        else:
            # Block scales: the tile's rows lie in one 128-row weight block, one scale per K block.
            tl.static_assert(128 % BLOCK_D == 0, "block weight scales need BLOCK_D to divide 128")
            sw_first = g * stride_swg + ((pid_d * BLOCK_D) // 128) * stride_swd
        first_ok = pid_d * BLOCK_D < D

        acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
        num_kb = R // BLOCK_R
        kb_per = tl.cdiv(num_kb, SPLIT_R)
        kb_lo = pid_s * kb_per
        kb_hi = tl.minimum(kb_lo + kb_per, num_kb)
        a_ptrs += kb_lo * BLOCK_R
        w_ptrs += kb_lo * BLOCK_R
        # The weight scales this tile reads per K block: one per row (per-row recipe), or the one
        # scale of the 128-row block the tile lies in (block recipe).
        if SW_PER_ROW:
            sw_offs = g * stride_swg + offs_d * stride_swd
            sw_mask = d_mask
        else:
            sw_offs = sw_first
            sw_mask = first_ok
        if SW_PER_ROW and SHARE_CHECK:
            # Per-row scales that are block scales broadcast to every row (DeepGEMM's weight
            # transform on sm_10x/sm_12x, vllm-code-paths.md) take the one-scale-per-tile loop: the
            # same values, so the same bits. Other tiles take the per-row loop, pipelined at its
            # own depth (the two loops share their shared-memory buffers).
            if SW_KIND == 1:  # four K blocks' exponents per int32 word
                s_lo = kb_lo // 4
                s_hi = (kb_hi + 3) // 4
            else:
                s_lo = kb_lo
                s_hi = kb_hi
            if _rows_share_scales(sw_ptr, sw_offs, sw_first, s_lo, s_hi, d_mask, stride_swk):
                acc = _k_loop(
                    acc,
                    a_ptrs,
                    w_ptrs,
                    sa_ptr,
                    sw_ptr,
                    sa_base,
                    sw_first,
                    first_ok,
                    kb_lo,
                    kb_hi,
                    t_mask,
                    d_mask,
                    stride_sak,
                    stride_swk,
                    SA_KIND,
                    SW_KIND,
                    False,
                    BLOCK_R,
                    None,
                )
            else:
                acc = _k_loop(
                    acc,
                    a_ptrs,
                    w_ptrs,
                    sa_ptr,
                    sw_ptr,
                    sa_base,
                    sw_offs,
                    d_mask,
                    kb_lo,
                    kb_hi,
                    t_mask,
                    d_mask,
                    stride_sak,
                    stride_swk,
                    SA_KIND,
                    SW_KIND,
                    True,
                    BLOCK_R,
                    ROW_STAGES,
                )
        else:
            acc = _k_loop(
                acc,
                a_ptrs,
                w_ptrs,
                sa_ptr,
                sw_ptr,
                sa_base,
                sw_offs,
                sw_mask,
                kb_lo,
                kb_hi,
                t_mask,
                d_mask,
                stride_sak,
                stride_swk,
                SA_KIND,
                SW_KIND,
                SW_PER_ROW,
                BLOCK_R,
                None,
            )

        td_mask = t_mask[:, None] & d_mask[None, :]
        o_ptrs = out_ptr + offs_t[:, None] * stride_ot + g * stride_og + offs_d[None, :]
        if SPLIT_R == 1:
            tl.store(o_ptrs, acc.to(tl.bfloat16), mask=td_mask)
        else:
            G = tl.num_programs(1)
            w_offs = offs_t[:, None] * (G * D) + g * D + offs_d[None, :]
            tl.store(ws_ptr + pid_s * stride_wss + w_offs, acc, mask=td_mask)
            # Every thread's partial is stored before thread 0's release (CUTLASS barrier pattern).
            tl.debug_barrier()
            tile = g * tl.num_programs(0) + pid
            arrived = tl.atomic_add(sem_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_R - 1:
                tot = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
                for s in tl.static_range(SPLIT_R):  # split order: deterministic
                    tot += tl.load(
                        ws_ptr + s * stride_wss + w_offs, mask=td_mask, other=0.0, cache_modifier=".cg"
                    )
                tl.store(o_ptrs, tot.to(tl.bfloat16), mask=td_mask)
                tl.store(sem_ptr + tile, 0)
