"""Round 5 candidate (issue 17): the o_proj decode tile written in Gluon for Hopper (sm_90a).

What differs from PATH 1 (``_decode_tile``): the weight and activation tiles go global -> shared
memory by TMA (one mbarrier per tile, no register staging), and the wgmma of K block i is
issued *before* K block i-1's product is waited for and promoted (two accumulators in turn,
``warpgroup_mma_wait(num_outstanding=1)``), so the tensor cores work while the previous block's
per-token x per-block scales are applied. Same summation order as PATH 1 (``0 + p0*s0 + p1*s1 +
...`` per split; PATH 2 sums the splits in order), so results are deterministic run to run.

Exploration only: if it wins, it moves into the overlay.
"""

from __future__ import annotations

import triton
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.kernels._common import cdiv, make_config
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


@gluon.jit
def _gdc_wait():
    gl.inline_asm_elementwise(
        "griddepcontrol.wait; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )


@gluon.jit
def _gdc_launch():
    gl.inline_asm_elementwise(
        "griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1
    )


@gluon.jit
def _exp_byte_to_f32(e):
    bits = gl.where(e == 0, 0x00400000, e << 23)
    bits = gl.where(e == 255, 0x7FC00000, bits)
    return bits.to(gl.float32, bitcast=True)


@gluon.jit
def _scale(ptr, offs, kb, mask, KIND: gl.constexpr):
    """One K block's scales at ``ptr + offs + (kb or kb // 4) * stride`` (the caller adds it)."""
    if KIND == 0:
        s = gl.load(ptr + offs, mask=mask, other=1.0)
    elif KIND == 1:
        word = gl.load(ptr + offs, mask=mask, other=127)
        s = _exp_byte_to_f32((word >> ((kb % 4) * 8)) & 0xFF)
    else:
        s = _exp_byte_to_f32(gl.load(ptr + offs, mask=mask, other=127).to(gl.int32))
    return s


@gluon.jit
def _block_scale(
    sa_ptr,
    sa_offs,
    t_mask,
    sw_ptr,
    sw_offs,
    sw_mask,
    kb,
    stride_sak,
    stride_swk,
    SA_KIND: gl.constexpr,
    SW_KIND: gl.constexpr,
    SW_PER_ROW: gl.constexpr,
):
    """``[BLOCK_D, BLOCK_T]`` (per-row) or ``[1, BLOCK_T]`` factor of K block ``kb``."""
    if SA_KIND == 1:
        ka = kb // 4
    else:
        ka = kb
    if SW_KIND == 1:
        kw = kb // 4
    else:
        kw = kb
    s_a = _scale(sa_ptr, sa_offs + ka * stride_sak, kb, t_mask, SA_KIND)
    s_w = _scale(sw_ptr, sw_offs + kw * stride_swk, kb, sw_mask, SW_KIND)
    if SW_PER_ROW:
        return s_w[:, None] * s_a[None, :]
    else:
        return (s_w * s_a)[None, :]


@gluon.jit
def _scale_vecs(
    sa_ptr,
    sa_offs,
    t_mask,
    sw_ptr,
    sw_offs,
    sw_mask,
    kb,
    stride_sak,
    stride_swk,
    SA_KIND: gl.constexpr,
    SW_KIND: gl.constexpr,
):
    """Run 4 (``LATE_ROW_SCALE``): K block ``kb``'s weight scale(s) and per-token scales, kept as
    vectors until the promotion forms their product (no [BLOCK_D, BLOCK_T] factor held across an
    iteration)."""
    if SA_KIND == 1:
        ka = kb // 4
    else:
        ka = kb
    if SW_KIND == 1:
        kw = kb // 4
    else:
        kw = kb
    s_a = _scale(sa_ptr, sa_offs + ka * stride_sak, kb, t_mask, SA_KIND)
    s_w = _scale(sw_ptr, sw_offs + kw * stride_swk, kb, sw_mask, SW_KIND)
    return s_w, s_a


@gluon.jit
def _promote(total, p, s_w, s_a, SW_PER_ROW: gl.constexpr):
    """``total + p * factor`` with the factor of :func:`_block_scale`, formed here; per-row as
    ``(p * s_w) * s_a`` (run 5), so that no part of it can be computed before ``p`` is ready (with
    power-of-two UE8M0 scales the same bits as ``p * (s_w * s_a)``)."""
    if SW_PER_ROW:
        return total + (p * s_w[:, None]) * s_a[None, :]
    else:
        return total + p * (s_w * s_a)[None, :]


@gluon.jit
def _smem_promote(
    total,
    p,
    sa_smem,
    sw_smem,
    i: gl.constexpr,
    SW_PER_ROW: gl.constexpr,
    d_lay: gl.constexpr,
    t_lay: gl.constexpr,
):
    """Run 6: ``total + p * factor`` of K block ``i`` (of the CTA's range), its scales read from
    shared memory (per-row: ``p * (s_w * s_a)``; else the staged ``s_w * s_a``)."""
    if SW_PER_ROW:
        s_w = sw_smem.index(i).load(d_lay)
        s_a = sa_smem.index(i).load(t_lay)
        return total + p * (s_w[:, None] * s_a[None, :])
    else:
        f = sa_smem.index(i).load(t_lay)
        return total + p * f[None, :]


@gluon.jit
def _gl_decode_kernel(
    out_ptr, ws_ptr, w_desc, a_desc, sa_ptr, sw_ptr,
    T, D, num_kb,
    stride_ot, stride_og, stride_sat, stride_sag, stride_sak, stride_swg, stride_swd, stride_swk, stride_wss,
    SA_KIND: gl.constexpr, SW_KIND: gl.constexpr, SW_PER_ROW: gl.constexpr,
    BLOCK_T: gl.constexpr, BLOCK_D: gl.constexpr, KB_PER: gl.constexpr, SPLIT_R: gl.constexpr,
    USE_PDL: gl.constexpr, num_warps: gl.constexpr,
):  # fmt: skip
    if USE_PDL:
        _gdc_launch()
    pid = gl.program_id(0)
    g = gl.program_id(1)
    pid_s = gl.program_id(2)
    num_d = gl.cdiv(D, BLOCK_D)
    pid_d = pid % num_d
    pid_t = pid // num_d
    kb0 = pid_s * KB_PER

    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_T, 32]
    )
    d_lay: gl.constexpr = gl.SliceLayout(1, mma)
    t_lay: gl.constexpr = gl.SliceLayout(0, mma)

    w_smem = gl.allocate_shared_memory(gl.float8e4nv, [KB_PER, BLOCK_D, 128], w_desc.layout)
    a_smem = gl.allocate_shared_memory(gl.float8e4nv, [KB_PER, BLOCK_T, 128], a_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [2 * KB_PER, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2 * KB_PER):
        mbarrier.init(bars.index(i), count=1)

    # The weight first (a parameter no earlier kernel writes: before the PDL wait).
    row_w = g * D + pid_d * BLOCK_D
    for i in gl.static_range(KB_PER):
        mbarrier.expect(bars.index(i), w_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(w_desc, [row_w, (kb0 + i) * 128], bars.index(i), w_smem.index(i))
    if USE_PDL:
        _gdc_wait()
    row_a = g * T + pid_t * BLOCK_T
    for i in gl.static_range(KB_PER):
        mbarrier.expect(bars.index(KB_PER + i), a_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(
            a_desc, [row_a, (kb0 + i) * 128], bars.index(KB_PER + i), a_smem.index(i)
        )

    offs_t = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=t_lay)
    offs_d = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=d_lay)
    t_mask = offs_t < T
    d_mask = offs_d < D
    sa_offs = offs_t * stride_sat + g * stride_sag
    if SW_PER_ROW:
        sw_offs = g * stride_swg + offs_d * stride_swd
        sw_mask = d_mask
    else:
        sw_offs = g * stride_swg + ((pid_d * BLOCK_D) // 128) * stride_swd
        sw_mask = pid_d * BLOCK_D < D
    sc = (sa_ptr, sa_offs, t_mask, sw_ptr, sw_offs, sw_mask)

    zero = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
    total = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
    mbarrier.wait(bars.index(0), 0)
    mbarrier.wait(bars.index(KB_PER), 0)
    prev = warpgroup_mma(w_smem.index(0), a_smem.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
    s_prev = _block_scale(*sc, kb0, stride_sak, stride_swk, SA_KIND, SW_KIND, SW_PER_ROW)
    for i in gl.static_range(1, KB_PER):
        mbarrier.wait(bars.index(i), 0)
        mbarrier.wait(bars.index(KB_PER + i), 0)
        cur = warpgroup_mma(
            w_smem.index(i), a_smem.index(i).permute((1, 0)), zero, use_acc=False, is_async=True
        )
        p = warpgroup_mma_wait(num_outstanding=1, deps=(prev,))
        total = total + p * s_prev
        s_prev = _block_scale(*sc, kb0 + i, stride_sak, stride_swk, SA_KIND, SW_KIND, SW_PER_ROW)
        prev = cur
    p = warpgroup_mma_wait(num_outstanding=0, deps=(prev,))
    total = total + p * s_prev
    for i in gl.static_range(2 * KB_PER):
        mbarrier.invalidate(bars.index(i))

    td_mask = d_mask[:, None] & t_mask[None, :]
    if SPLIT_R == 1:
        o_ptrs = out_ptr + offs_t[None, :] * stride_ot + g * stride_og + offs_d[:, None]
        gl.store(o_ptrs, total.to(gl.bfloat16), mask=td_mask)
    else:
        G = gl.num_programs(1)
        p_offs = pid_s * stride_wss + offs_t[None, :] * (G * D) + g * D + offs_d[:, None]
        gl.store(ws_ptr + p_offs, total, mask=td_mask)


def gl_decode(a, b, out, recipe, bt=32, bd=128, kb_per=4, warps=8, pdl=True):
    """``fp8_einsum('bhr,hdr->bhd')`` through the Gluon decode tile (a group-major, w contiguous)."""
    (x, sa), (w, sw) = a, b
    sa_kind, sa, sw_kind, sw, per_row = fe._prepare("bhr,hdr->bhd", x, sa, w, sw, out, recipe)
    t, g, r = x.shape
    d = w.shape[1]
    assert x.stride(1) == t * x.stride(0) and w.is_contiguous()
    x2 = x.transpose(0, 1).reshape(g * t, r)  # a view: group-major
    assert x2.data_ptr() == x.data_ptr()
    w2 = w.view(g * d, r)
    f8 = gl.float8e4nv
    w_desc = TensorDescriptor.from_tensor(w2, [bd, 128], gl.NVMMASharedLayout.get_default_for([bd, 128], f8))
    a_desc = TensorDescriptor.from_tensor(x2, [bt, 128], gl.NVMMASharedLayout.get_default_for([bt, 128], f8))
    split = cdiv(r // 128, kb_per)
    ws, sem = fe._split_workspace(split, t, g, d, out)
    grid = (cdiv(t, bt) * cdiv(d, bd), g, split)
    _gl_decode_kernel[grid](
        out, ws, w_desc, a_desc, sa, sw, t, d, r // 128,
        out.stride(0), out.stride(1), sa.stride(0), sa.stride(1), sa.stride(2),
        sw.stride(0), sw.stride(1), sw.stride(2), t * g * d,
        SA_KIND=sa_kind, SW_KIND=sw_kind, SW_PER_ROW=per_row,
        BLOCK_T=bt, BLOCK_D=bd, KB_PER=kb_per, SPLIT_R=split, USE_PDL=pdl,
        num_warps=warps, **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    if split > 1:
        cfg = make_config("gl", "_fp8_einsum_kernel", warps, 1, SPLIT_R=split, USE_PDL=pdl)
        args = fe._kernel_args(x, sa, w, sw, out)
        kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
        fe._launch_split_sum(cfg, t, g, d, out, ws, sem, args, kinds, {"launch_pdl": True} if pdl else {})


def compile_only(bt=32, bd=128, kb_per=4, warps=8, sa_kind=1, sw_kind=1, per_row=True):
    """Compile the kernel for sm_90a on a machine without a GPU; return the compiled kernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    f8 = gl.float8e4nv
    wl = gl.NVMMASharedLayout.get_default_for([bd, 128], f8)
    al = gl.NVMMASharedLayout.get_default_for([bt, 128], f8)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as TD  # noqa: F401

    sig = {
        "out_ptr": "*bf16", "ws_ptr": "*fp32",
        "w_desc": f"tensordesc<fp8e4nv[{bd}, 128],{wl!r}>",
        "a_desc": f"tensordesc<fp8e4nv[{bt}, 128],{al!r}>",
        "sa_ptr": "*i32" if sa_kind == 1 else "*fp32", "sw_ptr": "*i32" if sw_kind == 1 else "*fp32",
        "T": "i32", "D": "i32", "num_kb": "i32",
        **{k: "i32" for k in ("stride_ot", "stride_og", "stride_sat", "stride_sag", "stride_sak",
                              "stride_swg", "stride_swd", "stride_swk", "stride_wss")},
    }  # fmt: skip
    consts = dict(
        SA_KIND=sa_kind, SW_KIND=sw_kind, SW_PER_ROW=per_row, BLOCK_T=bt, BLOCK_D=bd,
        KB_PER=kb_per, SPLIT_R=8, USE_PDL=True, num_warps=warps,
    )  # fmt: skip
    for k in consts:
        sig[k] = "constexpr"
    names = list(sig)
    src = GluonASTSource(_gl_decode_kernel, sig, constexprs={(names.index(k),): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


@gluon.jit
def _gl_pipe_kernel(
    out_ptr, ws_ptr, sem_ptr, w_desc, a_desc, sa_ptr, sw_ptr,
    T, D, num_kb,
    stride_ot, stride_og, stride_sat, stride_sag, stride_sak, stride_swg, stride_swd, stride_swk, stride_wss,
    SA_KIND: gl.constexpr, SW_KIND: gl.constexpr, SW_PER_ROW: gl.constexpr,
    BLOCK_T: gl.constexpr, BLOCK_D: gl.constexpr, KB_PER: gl.constexpr, SPLIT_R: gl.constexpr,
    STAGES: gl.constexpr, USE_PDL: gl.constexpr, num_warps: gl.constexpr,
    LATE_ROW_SCALE: gl.constexpr = False, FUSED_SUM: gl.constexpr = False, DYN_LOOP: gl.constexpr = False,
    SCALES_SMEM: gl.constexpr = False,
):  # fmt: skip
    """Run 3 form: KB_PER K blocks per CTA through a STAGES-deep TMA ring (unrolled); the stage of
    block i-1 is refilled with block i-1+STAGES as soon as block i-1's wgmma has been waited for,
    while block i's wgmma runs."""
    if USE_PDL:
        _gdc_launch()
    pid = gl.program_id(0)
    g = gl.program_id(1)
    pid_s = gl.program_id(2)
    num_d = gl.cdiv(D, BLOCK_D)
    pid_d = pid % num_d
    pid_t = pid // num_d
    kb0 = pid_s * KB_PER
    # Warps along D while each owns >= 16 rows (wgmma's m), the rest along T (run 5: 8 warps on a
    # 64-row tile halve the accumulator registers per thread).
    WARPS_D: gl.constexpr = num_warps if BLOCK_D // 16 >= num_warps else BLOCK_D // 16
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0],
        warps_per_cta=[WARPS_D, num_warps // WARPS_D],
        instr_shape=[16, BLOCK_T // (num_warps // WARPS_D), 32],
    )
    d_lay: gl.constexpr = gl.SliceLayout(1, mma)
    t_lay: gl.constexpr = gl.SliceLayout(0, mma)
    w_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_D, 128], w_desc.layout)
    a_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_T, 128], a_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(bars.index(i), count=1)
    nbytes: gl.constexpr = w_desc.block_type.nbytes + a_desc.block_type.nbytes
    row_w = g * D + pid_d * BLOCK_D
    row_a = g * T + pid_t * BLOCK_T
    for i in gl.static_range(STAGES):
        if i < KB_PER:
            mbarrier.expect(bars.index(i), nbytes)
            tma.async_copy_global_to_shared(w_desc, [row_w, (kb0 + i) * 128], bars.index(i), w_smem.index(i))
    if USE_PDL:
        _gdc_wait()
    for i in gl.static_range(STAGES):
        if i < KB_PER:
            tma.async_copy_global_to_shared(a_desc, [row_a, (kb0 + i) * 128], bars.index(i), a_smem.index(i))

    offs_t = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=t_lay)
    offs_d = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=d_lay)
    t_mask = offs_t < T
    d_mask = offs_d < D
    sa_offs = offs_t * stride_sat + g * stride_sag
    if SW_PER_ROW:
        sw_offs = g * stride_swg + offs_d * stride_swd
        sw_mask = d_mask
    else:
        sw_offs = g * stride_swg + ((pid_d * BLOCK_D) // 128) * stride_swd
        sw_mask = pid_d * BLOCK_D < D
    sc = (sa_ptr, sa_offs, t_mask, sw_ptr, sw_offs, sw_mask)
    if SCALES_SMEM:
        # Run 6: every scale of the CTA's K range, decoded once into shared memory before the loop
        # (one rank-1 buffer a K block; the loads are independent, all issued at once).
        sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        v1: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        rt = gl.arange(0, BLOCK_T, layout=v1)
        t_ok = pid_t * BLOCK_T + rt < T
        sa_base1 = (pid_t * BLOCK_T + rt) * stride_sat + g * stride_sag
        sa_smem = gl.allocate_shared_memory(gl.float32, [KB_PER, BLOCK_T], sl)
        if SW_PER_ROW:
            rd = gl.arange(0, BLOCK_D, layout=v1)
            d_ok = pid_d * BLOCK_D + rd < D
            sw_base1 = g * stride_swg + (pid_d * BLOCK_D + rd) * stride_swd
            sw_smem = gl.allocate_shared_memory(gl.float32, [KB_PER, BLOCK_D], sl)
        else:
            sw_smem = sa_smem
        for i in gl.static_range(KB_PER):
            kb = kb0 + i
            if SA_KIND == 1:
                ka = kb // 4
            else:
                ka = kb
            if SW_KIND == 1:
                kw = kb // 4
            else:
                kw = kb
            s_a1 = _scale(sa_ptr, sa_base1 + ka * stride_sak, kb, t_ok, SA_KIND)
            if SW_PER_ROW:
                sw_smem.index(i).store(_scale(sw_ptr, sw_base1 + kw * stride_swk, kb, d_ok, SW_KIND))
                sa_smem.index(i).store(s_a1)
            else:
                s_w1 = _scale(sw_ptr, sw_offs + kw * stride_swk, kb, sw_mask, SW_KIND)
                sa_smem.index(i).store(s_w1 * s_a1)
        gl.thread_barrier()
    zero = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
    total = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
    mbarrier.wait(bars.index(0), 0)
    prev = warpgroup_mma(w_smem.index(0), a_smem.index(0).permute((1, 0)), zero, use_acc=False, is_async=True)
    if LATE_ROW_SCALE:
        sw_prev, sa_prev = _scale_vecs(*sc, kb0, stride_sak, stride_swk, SA_KIND, SW_KIND)
    elif not SCALES_SMEM:
        s_prev = _block_scale(*sc, kb0, stride_sak, stride_swk, SA_KIND, SW_KIND, SW_PER_ROW)
    if DYN_LOOP:  # run 5: a loop the compiler does not unroll (scale loads stay in their step)
        for i in range(1, KB_PER):
            mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
            cur = warpgroup_mma(
                w_smem.index(i % STAGES),
                a_smem.index(i % STAGES).permute((1, 0)),
                zero,
                use_acc=False,
                is_async=True,
            )
            p = warpgroup_mma_wait(num_outstanding=1, deps=(prev,))
            if i - 1 + STAGES < KB_PER:
                sp = (i - 1) % STAGES
                mbarrier.expect(bars.index(sp), nbytes)
                kn = (kb0 + i - 1 + STAGES) * 128
                tma.async_copy_global_to_shared(w_desc, [row_w, kn], bars.index(sp), w_smem.index(sp))
                tma.async_copy_global_to_shared(a_desc, [row_a, kn], bars.index(sp), a_smem.index(sp))
            total = total + p * s_prev
            s_prev = _block_scale(*sc, kb0 + i, stride_sak, stride_swk, SA_KIND, SW_KIND, SW_PER_ROW)
            prev = cur
    for i in gl.static_range(1, KB_PER if not DYN_LOOP else 1):
        mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
        cur = warpgroup_mma(
            w_smem.index(i % STAGES),
            a_smem.index(i % STAGES).permute((1, 0)),
            zero,
            use_acc=False,
            is_async=True,
        )
        p = warpgroup_mma_wait(num_outstanding=1, deps=(prev,))
        if i - 1 + STAGES < KB_PER:  # block i-1's stage is free: refill it
            sp = (i - 1) % STAGES
            mbarrier.expect(bars.index(sp), nbytes)
            kn = (kb0 + i - 1 + STAGES) * 128
            tma.async_copy_global_to_shared(w_desc, [row_w, kn], bars.index(sp), w_smem.index(sp))
            tma.async_copy_global_to_shared(a_desc, [row_a, kn], bars.index(sp), a_smem.index(sp))
        if SCALES_SMEM:
            total = _smem_promote(total, p, sa_smem, sw_smem, i - 1, SW_PER_ROW, d_lay, t_lay)
        elif LATE_ROW_SCALE:
            total = _promote(total, p, sw_prev, sa_prev, SW_PER_ROW)
            sw_prev, sa_prev = _scale_vecs(*sc, kb0 + i, stride_sak, stride_swk, SA_KIND, SW_KIND)
        else:
            total = total + p * s_prev
            s_prev = _block_scale(*sc, kb0 + i, stride_sak, stride_swk, SA_KIND, SW_KIND, SW_PER_ROW)
        prev = cur
    p = warpgroup_mma_wait(num_outstanding=0, deps=(prev,))
    if SCALES_SMEM:
        total = _smem_promote(total, p, sa_smem, sw_smem, KB_PER - 1, SW_PER_ROW, d_lay, t_lay)
    elif LATE_ROW_SCALE:
        total = _promote(total, p, sw_prev, sa_prev, SW_PER_ROW)
    else:
        total = total + p * s_prev
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))
    td_mask = d_mask[:, None] & t_mask[None, :]
    if SPLIT_R == 1:
        o_ptrs = out_ptr + offs_t[None, :] * stride_ot + g * stride_og + offs_d[:, None]
        gl.store(o_ptrs, total.to(gl.bfloat16), mask=td_mask)
    else:
        G = gl.num_programs(1)
        w_offs = offs_t[None, :] * (G * D) + g * D + offs_d[:, None]
        gl.store(ws_ptr + pid_s * stride_wss + w_offs, total, mask=td_mask)
        if FUSED_SUM:
            # Run 4: the CTA that finishes its tile last sums the partials in split order (one
            # launch; the same additions as PATH 2) and zeroes the tile's counter again.
            gl.thread_barrier()
            tile = g * gl.num_programs(0) + pid
            arrived = gl.atomic_add(sem_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == SPLIT_R - 1:
                tot = gl.zeros([BLOCK_D, BLOCK_T], gl.float32, mma)
                for s in gl.static_range(SPLIT_R):
                    tot += gl.load(
                        ws_ptr + s * stride_wss + w_offs, mask=td_mask, other=0.0, cache_modifier=".cg"
                    )
                o_ptrs = out_ptr + offs_t[None, :] * stride_ot + g * stride_og + offs_d[:, None]
                gl.store(o_ptrs, tot.to(gl.bfloat16), mask=td_mask)
                gl.store(sem_ptr + tile, 0)


#: (registers, spilled bytes, shared bytes) of the last gl_pipe launch's kernel.
LAST_BUILD: dict[str, tuple[int, int, int]] = {}


def gl_pipe(
    a,
    b,
    out,
    recipe,
    bt=32,
    bd=64,
    split=1,
    stages=8,
    warps=4,
    pdl=True,
    sum_splits=True,
    late=False,
    fused=False,
    dyn=False,
    smem_scales=False,
):
    """``fp8_einsum('bhr,hdr->bhd')`` through ``_gl_pipe_kernel``: K in ``split`` parts.

    ``sum_splits=False`` (diagnostic only, wrong output): the partials are not summed, to time
    the split-sum launch's share of a call."""
    (x, sa), (w, sw) = a, b
    sa_kind, sa, sw_kind, sw, per_row = fe._prepare("bhr,hdr->bhd", x, sa, w, sw, out, recipe)
    t, g, r = x.shape
    d = w.shape[1]
    assert x.stride(1) == t * x.stride(0) and w.is_contiguous()
    x2 = x.transpose(0, 1).reshape(g * t, r)
    assert x2.data_ptr() == x.data_ptr()
    w2 = w.view(g * d, r)
    f8 = gl.float8e4nv
    w_desc = TensorDescriptor.from_tensor(w2, [bd, 128], gl.NVMMASharedLayout.get_default_for([bd, 128], f8))
    a_desc = TensorDescriptor.from_tensor(x2, [bt, 128], gl.NVMMASharedLayout.get_default_for([bt, 128], f8))
    kb_per = cdiv(r // 128, split)
    ws, sem = fe._split_workspace(split, t, g, d, out)
    grid = (cdiv(t, bt) * cdiv(d, bd), g, split)
    n_tiles = grid[0] * g
    sem_t = fe.SEMAPHORES.get(x.device, n_tiles) if fused and split > 1 else None
    if fused and split > 1 and sem_t is None:
        raise RuntimeError("gl_pipe(fused=True): no tile counters (first call inside a graph capture?)")
    k = _gl_pipe_kernel[grid](
        out, ws, sem_t if sem_t is not None else sem, w_desc, a_desc, sa, sw, t, d, r // 128,
        out.stride(0), out.stride(1), sa.stride(0), sa.stride(1), sa.stride(2),
        sw.stride(0), sw.stride(1), sw.stride(2), t * g * d,
        SA_KIND=sa_kind, SW_KIND=sw_kind, SW_PER_ROW=per_row,
        BLOCK_T=bt, BLOCK_D=bd, KB_PER=kb_per, SPLIT_R=split, STAGES=min(stages, kb_per), USE_PDL=pdl,
        LATE_ROW_SCALE=late, FUSED_SUM=fused, DYN_LOOP=dyn, SCALES_SMEM=smem_scales,
        num_warps=warps, **({"launch_pdl": True} if pdl else {}),
    )  # fmt: skip
    if k is not None and hasattr(k, "n_regs"):
        LAST_BUILD["gl_pipe"] = (k.n_regs, k.n_spills, k.metadata.shared)
    if split > 1 and sum_splits and not fused:
        cfg = make_config("gl", "_fp8_einsum_kernel", warps, 1, SPLIT_R=split, USE_PDL=pdl)
        args = fe._kernel_args(x, sa, w, sw, out)
        kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
        fe._launch_split_sum(cfg, t, g, d, out, ws, sem, args, kinds, {"launch_pdl": True} if pdl else {})


if __name__ == "__main__":
    import sys

    k = compile_only(*[int(x) for x in sys.argv[1:5]] if len(sys.argv) > 4 else ())
    print(k.metadata.shared, "B shared;", k.n_regs if hasattr(k, "n_regs") else "")
    print("\n".join(ln for ln in k.asm["ptx"].splitlines() if "wgmma" in ln or "cp.async.bulk" in ln)[:3000])
