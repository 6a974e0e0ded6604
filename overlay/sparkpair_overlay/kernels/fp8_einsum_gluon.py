"""fp8_einsum's decode and mid-T tiles for compute capability 9.x, written in Gluon (``PATH`` 4 and 5).

``PATH`` 4, the split tile: one program = (D tile of BLOCK_D weight rows and T tile of BLOCK_T
tokens) x group x one of SPLIT_R K ranges of KB_PER 128-wide K blocks. Weight rows are wgmma's M
side (64 rows per warpgroup), tokens its N side. Each K range stores an fp32 partial
``ws[s, t, g, d]``; ``PATH`` 2 of ``_fp8_einsum_kernel`` sums them in split order (deterministic).

``PATH`` 5, the token-row tile: one program = (BLOCK_D weight rows, BLOCK_T tokens) x group with
the whole K. Tokens are wgmma's M side (64 rows per warpgroup; 8 warps = 128 tokens), weight rows
its N side, so a program can own as few as 32 weight rows: the served shape's 4,096 rows give 128
programs with no K split and no split sum; it stores bf16 ``out`` itself.

What both do that Triton's ``tl.dot`` form (``PATH`` 1 / 3) cannot:

* every scale of the program's K range (per-token activation scales; the weight's 128x128 block
  scale or per-row scales) is decoded into shared memory before the K loop with one 2-D load (all
  in flight at once; staged a K block at a time, the loads ran in series, one global load's
  latency per K block), so the step after each TMA wait is the wgmma and the promotion only;
* the wgmma of K block i is issued before block i-1's is waited for and promoted
  (``warpgroup_mma_wait(num_outstanding=1)``), so the tensor cores work during the promotion;
* weight and activation tiles arrive by TMA in a STAGES-deep ring (one mbarrier per stage), the
  weight's first STAGES tiles issued before the PDL wait (no earlier kernel writes it).

Per K block: ``total += p * (s_w * s_a)`` with ``p`` the block's fp32 wgmma product, the same
order as ``PATH`` 1. Measured and chosen in ``benchmarks/results/explore-2026-12-02-k17e/README.md``
(run 6: PATH 4) and ``benchmarks/results/explore-2026-12-04-k17k/README.md`` (the batched staging,
PATH 5).

Gluon (``triton.experimental.gluon``, Triton 3.6) and wgmma: sm_90a only; :data:`HAS_GLUON` is
False where either import fails, and the dispatcher never picks ``PATH`` 4 or 5 then.
"""

from __future__ import annotations

from typing import Any

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    HAS_GLUON = True
except ImportError:  # no Triton, or a Triton without Gluon's Hopper API
    HAS_GLUON = False


def tensor_descriptor(t: Any, block: list[int]) -> Any:
    """A host-side TMA descriptor over 2-D fp8 e4m3 ``t`` (row-major, 16-byte-aligned rows) with
    ``block`` = [rows, 128] tiles in the NVMMA shared layout wgmma reads."""
    return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, gl.float8e4nv))


if HAS_GLUON:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    from triton.runtime.jit import constexpr_function

    @constexpr_function
    def _next_power_of_2(n: int) -> int:
        """The smallest power of 2 >= ``n`` (a compile-time value: ``gl.arange`` needs one)."""
        return 1 << (int(n) - 1).bit_length()

    @constexpr_function
    def _warps_along(n: int, num_warps: int) -> int:
        """Warps a row of ``n`` elements takes at 32 lanes a warp (1 .. num_warps)."""
        return max(1, min(int(num_warps), int(n) // 32))

    from ._scale_decode import load_block_scale

    @gluon.jit
    def _promote(
        total, p, sa_smem, sw_smem, i: gl.constexpr, SW_PER_ROW: gl.constexpr, TOKENS_M: gl.constexpr, mma
    ):
        """``total + p * (s_w * s_a)`` for K block ``i`` of the program's range, scales from
        shared memory (block weight scales: the product was staged). ``p``, ``total``: [BLOCK_T,
        BLOCK_D] with tokens on the rows (``TOKENS_M``, PATH 5), else [BLOCK_D, BLOCK_T] (PATH 4)."""
        rows: gl.constexpr = gl.SliceLayout(1, mma)
        cols: gl.constexpr = gl.SliceLayout(0, mma)
        if TOKENS_M:
            if SW_PER_ROW:
                s_w = sw_smem.index(i).load(cols)
                s_a = sa_smem.index(i).load(rows)
                out = total + p * (s_a[:, None] * s_w[None, :])
            else:
                f = sa_smem.index(i).load(rows)
                out = total + p * f[:, None]
        else:
            if SW_PER_ROW:
                s_w = sw_smem.index(i).load(rows)
                s_a = sa_smem.index(i).load(cols)
                out = total + p * (s_w[:, None] * s_a[None, :])
            else:
                f = sa_smem.index(i).load(cols)
                out = total + p * f[None, :]
        return out

    @gluon.jit
    def _block_mma(w_smem, a_smem, s: gl.constexpr, zero, TOKENS_M: gl.constexpr):
        """Stage ``s``'s wgmma, issued asynchronously: tokens x weight rows (``TOKENS_M``) or
        weight rows x tokens; K-major operands both ways."""
        if TOKENS_M:
            lhs, rhs = a_smem.index(s), w_smem.index(s).permute((1, 0))
        else:
            lhs, rhs = w_smem.index(s), a_smem.index(s).permute((1, 0))
        return warpgroup_mma(lhs, rhs, zero, use_acc=False, is_async=True)

    @gluon.jit
    def _open_ring(
        w_desc, a_desc, g, T, D, pid_t, pid_d, kb0,
        BLOCK_T: gl.constexpr, BLOCK_D: gl.constexpr, STAGES: gl.constexpr, USE_PDL: gl.constexpr,
    ):  # fmt: skip
        """The STAGES-deep TMA ring of tile (``pid_t``, ``pid_d``) of group ``g``, its first STAGES
        K blocks in flight from K block ``kb0``: the weight's issued before the PDL wait (no earlier
        kernel writes it), the activations' after it. Returns ``(w_smem, a_smem, bars, row_w,
        row_a)``, the last two the tile's first rows in the 2-D views the descriptors are over."""
        w_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_D, 128], w_desc.layout)
        a_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_T, 128], a_desc.layout)
        bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for i in gl.static_range(STAGES):
            mbarrier.init(bars.index(i), count=1)
        nbytes: gl.constexpr = w_desc.block_type.nbytes + a_desc.block_type.nbytes
        row_w = g * D + pid_d * BLOCK_D
        row_a = g * T + pid_t * BLOCK_T
        for i in gl.static_range(STAGES):
            mbarrier.expect(bars.index(i), nbytes)
            tma.async_copy_global_to_shared(w_desc, [row_w, (kb0 + i) * 128], bars.index(i), w_smem.index(i))
        if USE_PDL:
            gdc_wait()  # a and sa may be written by the kernel before this one
        for i in gl.static_range(STAGES):
            tma.async_copy_global_to_shared(a_desc, [row_a, (kb0 + i) * 128], bars.index(i), a_smem.index(i))
        return w_smem, a_smem, bars, row_w, row_a

    @gluon.jit
    def _k_loop(
        w_desc, a_desc, w_smem, a_smem, bars, row_w, row_a, kb0, sa_smem, sw_smem, zero,
        KB: gl.constexpr, STAGES: gl.constexpr, SW_PER_ROW: gl.constexpr, TOKENS_M: gl.constexpr, mma,
        total,
    ):  # fmt: skip
        """``total`` (zeros, laid out as ``zero``) plus the promoted products of K blocks ``kb0 ..
        kb0 + KB`` through the ring: block i's wgmma is issued before block i-1's is waited for,
        then block i-1's stage is refilled and its product promoted. The barriers are invalidated
        at the end. (``total`` is passed in, not made here: the sm_90a builds are then byte for
        byte those of the kernels measured in round 11.)"""
        nbytes: gl.constexpr = w_desc.block_type.nbytes + a_desc.block_type.nbytes
        mbarrier.wait(bars.index(0), 0)
        prev = _block_mma(w_smem, a_smem, 0, zero, TOKENS_M)
        for i in gl.static_range(1, KB):
            mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
            cur = _block_mma(w_smem, a_smem, i % STAGES, zero, TOKENS_M)
            p = warpgroup_mma_wait(num_outstanding=1, deps=(prev,))
            if i - 1 + STAGES < KB:  # block i-1's stage is free: refill it
                sp = (i - 1) % STAGES
                mbarrier.expect(bars.index(sp), nbytes)
                kn = (kb0 + i - 1 + STAGES) * 128
                tma.async_copy_global_to_shared(w_desc, [row_w, kn], bars.index(sp), w_smem.index(sp))
                tma.async_copy_global_to_shared(a_desc, [row_a, kn], bars.index(sp), a_smem.index(sp))
            total = _promote(total, p, sa_smem, sw_smem, i - 1, SW_PER_ROW, TOKENS_M, mma)
            prev = cur
        p = warpgroup_mma_wait(num_outstanding=0, deps=(prev,))
        total = _promote(total, p, sa_smem, sw_smem, KB - 1, SW_PER_ROW, TOKENS_M, mma)
        for i in gl.static_range(STAGES):
            mbarrier.invalidate(bars.index(i))
        return total

    @gluon.jit
    def _stage_scales(
        sa_ptr, sw_ptr, g, pid_t, pid_d, kb0, T, D,
        stride_sat, stride_sag, stride_sak, stride_swg, stride_swd, stride_swk,
        SA_KIND: gl.constexpr, SW_KIND: gl.constexpr, SW_PER_ROW: gl.constexpr,
        BLOCK_T: gl.constexpr, BLOCK_D: gl.constexpr, KB_PER: gl.constexpr, num_warps: gl.constexpr,
    ):  # fmt: skip
        """Every scale of the K range ``kb0 .. kb0 + KB_PER`` decoded into shared memory with one
        2-D load (all in flight at once) and one store: ``(sa_smem, sw_smem)``, each
        ``[KB_ROWS, n]`` fp32 (KB_ROWS: KB_PER up to a power of 2; rows past KB_PER hold 1.0, never
        read) read a K block's row at a time. Block weight scales: ``sa_smem`` holds ``s_w * s_a``
        and ``sw_smem`` is the same buffer."""
        KB_ROWS: gl.constexpr = _next_power_of_2(KB_PER)
        sl2: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])  # row-major, written 2-D
        sl1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])  # the same bytes, by row
        # lanes along the row (tokens), warps along it as far as it reaches, the rest over K blocks:
        # each element held once (a warps-along-the-row layout wider than the row replicates it
        # and, for fp32 scales, pushed PATH 5's build past 255 registers)
        WT: gl.constexpr = _warps_along(BLOCK_T, num_warps)
        s2: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [num_warps // WT, WT], [1, 0])
        kbs = kb0 + gl.arange(0, KB_ROWS, layout=gl.SliceLayout(1, s2))
        in_k = kbs < kb0 + KB_PER
        if SA_KIND == 1:
            ka = kbs // 4
        else:
            ka = kbs
        rt = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=gl.SliceLayout(0, s2))
        s_a = load_block_scale(
            sa_ptr,
            (rt * stride_sat + g * stride_sag)[None, :] + (ka * stride_sak)[:, None],
            kbs[:, None],
            in_k[:, None] & (rt < T)[None, :],
            SA_KIND,
        )
        sa_buf = gl.allocate_shared_memory(gl.float32, [KB_ROWS, BLOCK_T], sl2)
        if SW_PER_ROW:
            WD: gl.constexpr = _warps_along(BLOCK_D, num_warps)
            sd: gl.constexpr = gl.BlockedLayout([1, 1], [1, 32], [num_warps // WD, WD], [1, 0])
            kbd = kb0 + gl.arange(0, KB_ROWS, layout=gl.SliceLayout(1, sd))
            if SW_KIND == 1:
                kwd = kbd // 4
            else:
                kwd = kbd
            rd = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=gl.SliceLayout(0, sd))
            s_w = load_block_scale(
                sw_ptr,
                (g * stride_swg + rd * stride_swd)[None, :] + (kwd * stride_swk)[:, None],
                kbd[:, None],
                (kbd < kb0 + KB_PER)[:, None] & (rd < D)[None, :],
                SW_KIND,
            )
            sw_buf = gl.allocate_shared_memory(gl.float32, [KB_ROWS, BLOCK_D], sl2)
            sw_buf.store(s_w)
            sa_buf.store(s_a)
            gl.thread_barrier()
            return sa_buf._reinterpret(gl.float32, [KB_ROWS, BLOCK_T], sl1), sw_buf._reinterpret(
                gl.float32, [KB_ROWS, BLOCK_D], sl1
            )
        else:
            gl.static_assert(128 % BLOCK_D == 0, "block weight scales need BLOCK_D to divide 128")
            sw_blk = g * stride_swg + ((pid_d * BLOCK_D) // 128) * stride_swd
            if SW_KIND == 1:
                kw = kbs // 4
            else:
                kw = kbs
            sw_mask = in_k & (pid_d * BLOCK_D < D)
            s_w = load_block_scale(sw_ptr, sw_blk + kw * stride_swk, kbs, sw_mask, SW_KIND)
            sa_buf.store(s_w[:, None] * s_a)
            gl.thread_barrier()
            sa_smem = sa_buf._reinterpret(gl.float32, [KB_ROWS, BLOCK_T], sl1)
            return sa_smem, sa_smem

    # T and the scale strides (which follow T through the TMA padding of ``sa``) are not
    # specialised: one build per config serves every T (as ``_fp8_einsum_kernel``).
    @gluon.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_gluon_kernel(
        ws_ptr,  # fp32 partials [SPLIT_R, T, G, D] contiguous
        w_desc,  # TMA descriptor over w viewed [G*D, R], block [BLOCK_D, 128]
        a_desc,  # TMA descriptor over a viewed [G*T, R] (group-major), block [BLOCK_T, 128]
        sa_ptr,
        sw_ptr,
        T,
        D,
        stride_sat,
        stride_sag,
        stride_sak,
        stride_swg,
        stride_swd,
        stride_swk,
        stride_wss,
        SA_KIND: gl.constexpr,
        SW_KIND: gl.constexpr,
        SW_PER_ROW: gl.constexpr,
        BLOCK_T: gl.constexpr,
        BLOCK_D: gl.constexpr,
        KB_PER: gl.constexpr,
        STAGES: gl.constexpr,
        USE_PDL: gl.constexpr,
        num_warps: gl.constexpr,
    ):
        if USE_PDL:
            gdc_launch_dependents()
        pid = gl.program_id(0)
        g = gl.program_id(1)
        pid_s = gl.program_id(2)
        num_d = gl.cdiv(D, BLOCK_D)
        pid_d = pid % num_d
        pid_t = pid // num_d
        kb0 = pid_s * KB_PER
        WARPS_D: gl.constexpr = num_warps if BLOCK_D // 16 >= num_warps else BLOCK_D // 16
        mma: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0],
            warps_per_cta=[WARPS_D, num_warps // WARPS_D],
            instr_shape=[16, BLOCK_T // (num_warps // WARPS_D), 32],
        )
        d_lay: gl.constexpr = gl.SliceLayout(1, mma)
        t_lay: gl.constexpr = gl.SliceLayout(0, mma)
        w_smem, a_smem, bars, row_w, row_a = _open_ring(
            w_desc, a_desc, g, T, D, pid_t, pid_d, kb0, BLOCK_T, BLOCK_D, STAGES, USE_PDL
        )
        sa_smem, sw_smem = _stage_scales(
            sa_ptr, sw_ptr, g, pid_t, pid_d, kb0, T, D,
            stride_sat, stride_sag, stride_sak, stride_swg, stride_swd, stride_swk,
            SA_KIND, SW_KIND, SW_PER_ROW, BLOCK_T, BLOCK_D, KB_PER, num_warps,
        )  # fmt: skip
        zero = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
        total = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
        total = _k_loop(
            w_desc, a_desc, w_smem, a_smem, bars, row_w, row_a, kb0, sa_smem, sw_smem, zero,
            KB_PER, STAGES, SW_PER_ROW, False, mma, total,
        )  # fmt: skip

        offs_t = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=t_lay)
        offs_d = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=d_lay)
        td_mask = (offs_d < D)[:, None] & (offs_t < T)[None, :]
        G = gl.num_programs(1)
        p_offs = pid_s * stride_wss + offs_t[None, :] * (G * D) + g * D + offs_d[:, None]
        gl.store(ws_ptr + p_offs, total, mask=td_mask)

    @gluon.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak"])
    def _fp8_einsum_gluon_tm_kernel(
        out_ptr,  # bf16 out [T, G, D] (any strides)
        w_desc,  # TMA descriptor over w viewed [G*D, R], block [BLOCK_D, 128]
        a_desc,  # TMA descriptor over a viewed [G*T, R] (group-major), block [BLOCK_T, 128]
        sa_ptr,
        sw_ptr,
        T,
        D,
        stride_ot,
        stride_og,
        stride_od,
        stride_sat,
        stride_sag,
        stride_sak,
        stride_swg,
        stride_swd,
        stride_swk,
        SA_KIND: gl.constexpr,
        SW_KIND: gl.constexpr,
        SW_PER_ROW: gl.constexpr,
        BLOCK_T: gl.constexpr,
        BLOCK_D: gl.constexpr,
        KB: gl.constexpr,
        STAGES: gl.constexpr,
        num_warps: gl.constexpr,
    ):
        """PATH 5: the whole K of (BLOCK_T tokens, BLOCK_D weight rows, group), tokens on wgmma's
        M side; stores bf16 ``out``. Launched with PDL (the weight's first STAGES tiles load before
        the wait). Activation rows past T in a tile belong to the next group (or are TMA's zero
        fill); their results are never stored. The K coordinates are run-time values (``kb0``, 0):
        as compile-time constants, the sm_90a build for fp32 scales and the served strides took
        255 registers and spilled 232 B (244 and none this way), and ran 15.3 against 9.5 us warm
        at T = 128 on the H200 (run 5 of
        benchmarks/results/explore-2026-12-04-k17k/README.md)."""
        gdc_launch_dependents()
        pid = gl.program_id(0)
        g = gl.program_id(1)
        kb0 = gl.program_id(2) * KB  # 0 (one program along K), kept a run-time value: see above
        num_d = gl.cdiv(D, BLOCK_D)
        pid_d = pid % num_d
        pid_t = pid // num_d
        mma: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_D, 32]
        )
        t_lay: gl.constexpr = gl.SliceLayout(1, mma)
        d_lay: gl.constexpr = gl.SliceLayout(0, mma)
        w_smem, a_smem, bars, row_w, row_a = _open_ring(
            w_desc, a_desc, g, T, D, pid_t, pid_d, kb0, BLOCK_T, BLOCK_D, STAGES, True
        )
        sa_smem, sw_smem = _stage_scales(
            sa_ptr, sw_ptr, g, pid_t, pid_d, kb0, T, D,
            stride_sat, stride_sag, stride_sak, stride_swg, stride_swd, stride_swk,
            SA_KIND, SW_KIND, SW_PER_ROW, BLOCK_T, BLOCK_D, KB, num_warps,
        )  # fmt: skip
        zero = gl.zeros([BLOCK_T, BLOCK_D], gl.float32, mma)
        total = gl.zeros([BLOCK_T, BLOCK_D], gl.float32, mma)
        total = _k_loop(
            w_desc, a_desc, w_smem, a_smem, bars, row_w, row_a, kb0, sa_smem, sw_smem, zero,
            KB, STAGES, SW_PER_ROW, True, mma, total,
        )  # fmt: skip

        offs_t = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=t_lay)
        offs_d = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=d_lay)
        mask = (offs_t < T)[:, None] & (offs_d < D)[None, :]
        o_offs = offs_t[:, None] * stride_ot + g * stride_og + offs_d[None, :] * stride_od
        gl.store(out_ptr + o_offs, total.to(gl.bfloat16), mask=mask)
