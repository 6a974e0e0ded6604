"""Issue 17 round 11 candidate: fp8_einsum's decode tile with tokens on wgmma's M side.

One program = (BLOCK_D weight rows, BLOCK_T tokens) x group x one of SPLIT_R K ranges. Tokens
are the M side (64 rows a warpgroup; the activation tile loads T_LOAD <= BLOCK_T rows by TMA into
the top of a BLOCK_T-row buffer, the rows below it are never stored), weight rows the N side, so
a program can own 32 (or 16) weight rows: the served shape's 4,096 rows give 128 (256) programs
with the whole K each, and no split sum. Per K block: ``total += p * (s_a * s_w)``, the wgmma of
the AHEAD next blocks in flight while block i is promoted. Every scale of the K range is decoded
into shared memory before the K loop (as PATH 4). SPLIT_R == 1 stores bf16 ``out``; SPLIT_R > 1
stores fp32 partials for PATH 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[3] / "overlay"))
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.kernels._scale_decode import load_block_scale  # noqa: E402
from sparkpair_overlay.kernels.fp8_einsum_gluon import _stage_scales  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402


@gluon.jit
def _promote(total, p, sa_smem, sw_smem, i: gl.constexpr, SW_PER_ROW: gl.constexpr, t_lay, d_lay):
    if SW_PER_ROW:
        s_w = sw_smem.index(i).load(d_lay)
        s_a = sa_smem.index(i).load(t_lay)
        return total + p * (s_a[:, None] * s_w[None, :])
    else:
        f = sa_smem.index(i).load(t_lay)
        return total + p * f[:, None]


@gluon.jit
def tm_kernel(
    out_ptr,  # SPLIT_R == 1: bf16 out [T, G, D]; else fp32 partials [SPLIT_R, T, G, D]
    w_desc,  # over w [G*D, R], block [BLOCK_D, 128]
    a_desc,  # over a [G*T, R] (group-major), block [T_LOAD, 128]
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
    stride_wss,
    SA_KIND: gl.constexpr,
    SW_KIND: gl.constexpr,
    SW_PER_ROW: gl.constexpr,
    BLOCK_T: gl.constexpr,
    BLOCK_D: gl.constexpr,
    T_LOAD: gl.constexpr,
    KB_PER: gl.constexpr,
    STAGES: gl.constexpr,
    AHEAD: gl.constexpr,
    SPLIT_R: gl.constexpr,
    USE_PDL: gl.constexpr,
    BATCH_SCALES: gl.constexpr,
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
    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_D, 32]
    )
    t_lay: gl.constexpr = gl.SliceLayout(1, mma)
    d_lay: gl.constexpr = gl.SliceLayout(0, mma)
    w_smem = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, BLOCK_D, 128], w_desc.layout)
    # Each stage holds BLOCK_T activation rows (wgmma's M); TMA fills the first T_LOAD (a power of
    # 2, >= 8); the rows below are stale and their results never stored.
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
        gdc_wait()
    for i in gl.static_range(STAGES):
        tma.async_copy_global_to_shared(
            a_desc, [row_a, (kb0 + i) * 128], bars.index(i), a_smem.index(i).slice(0, T_LOAD)
        )

    # Every scale of the K range in one 2-D load (all in flight at once) and one shared store.
    if BATCH_SCALES:
        sa_smem, sw_smem = _stage_scales(
            sa_ptr, sw_ptr, g, pid_t, pid_d, kb0, T, D,
            stride_sat, stride_sag, stride_sak, stride_swg, stride_swd, stride_swk,
            SA_KIND, SW_KIND, SW_PER_ROW, BLOCK_T, BLOCK_D, KB_PER, num_warps,
        )  # fmt: skip
    else:
        sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
        v1: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        rt = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=v1)
        sa_base = rt * stride_sat + g * stride_sag
        sa_smem = gl.allocate_shared_memory(gl.float32, [KB_PER, BLOCK_T], sl)
        if SW_PER_ROW:
            rd = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=v1)
            sw_base = g * stride_swg + rd * stride_swd
            sw_smem = gl.allocate_shared_memory(gl.float32, [KB_PER, BLOCK_D], sl)
        else:
            gl.static_assert(128 % BLOCK_D == 0, "block weight scales need BLOCK_D to divide 128")
            sw_blk = g * stride_swg + ((pid_d * BLOCK_D) // 128) * stride_swd
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
            s_a = load_block_scale(sa_ptr, sa_base + ka * stride_sak, kb, rt < T, SA_KIND)
            if SW_PER_ROW:
                sw_smem.index(i).store(
                    load_block_scale(sw_ptr, sw_base + kw * stride_swk, kb, rd < D, SW_KIND)
                )
                sa_smem.index(i).store(s_a)
            else:
                s_w = load_block_scale(sw_ptr, sw_blk + kw * stride_swk, kb, pid_d * BLOCK_D < D, SW_KIND)
                sa_smem.index(i).store(s_w * s_a)
        gl.thread_barrier()

    zero = gl.zeros([BLOCK_T, BLOCK_D], gl.float32, mma)
    total = gl.zeros([BLOCK_T, BLOCK_D], gl.float32, mma)
    r0 = zero
    r1 = zero
    r2 = zero
    for i in gl.static_range(KB_PER + AHEAD):
        if i < KB_PER:
            mbarrier.wait(bars.index(i % STAGES), (i // STAGES) & 1)
            cur = warpgroup_mma(
                a_smem.index(i % STAGES),
                w_smem.index(i % STAGES).permute((1, 0)),
                zero,
                use_acc=False,
                is_async=True,
            )
        else:
            cur = zero
        if i >= AHEAD:  # promote block i - AHEAD
            if AHEAD == 1:
                old = r0
            elif AHEAD == 2:
                old = r1
            else:
                old = r2
            if i < KB_PER:
                p = warpgroup_mma_wait(num_outstanding=AHEAD, deps=(old,))
            else:  # draining: the blocks after j are all issued
                p = warpgroup_mma_wait(num_outstanding=KB_PER - 1 - i + AHEAD, deps=(old,))
            if i - AHEAD + STAGES < KB_PER:  # block i - AHEAD's stage is free: refill it
                mbarrier.expect(bars.index((i - AHEAD) % STAGES), nbytes)
                kn = (kb0 + i - AHEAD + STAGES) * 128
                tma.async_copy_global_to_shared(
                    w_desc, [row_w, kn], bars.index((i - AHEAD) % STAGES), w_smem.index((i - AHEAD) % STAGES)
                )
                tma.async_copy_global_to_shared(
                    a_desc,
                    [row_a, kn],
                    bars.index((i - AHEAD) % STAGES),
                    a_smem.index((i - AHEAD) % STAGES).slice(0, T_LOAD),
                )
            total = _promote(total, p, sa_smem, sw_smem, i - AHEAD, SW_PER_ROW, t_lay, d_lay)
        r2 = r1
        r1 = r0
        r0 = cur
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(i))

    offs_t = pid_t * BLOCK_T + gl.arange(0, BLOCK_T, layout=t_lay)
    offs_d = pid_d * BLOCK_D + gl.arange(0, BLOCK_D, layout=d_lay)
    td_mask = (offs_t < T)[:, None] & (offs_d < D)[None, :]
    if SPLIT_R == 1:
        o_offs = offs_t[:, None] * stride_ot + g * stride_og + offs_d[None, :] * stride_od
        gl.store(out_ptr + o_offs, total.to(gl.bfloat16), mask=td_mask)
    else:
        G = gl.num_programs(1)
        p_offs = pid_s * stride_wss + offs_t[:, None] * (G * D) + g * D + offs_d[None, :]
        gl.store(out_ptr + p_offs, total, mask=td_mask)


def descriptor(t: torch.Tensor, block: list[int], smem_rows: int) -> TensorDescriptor:
    """TMA descriptor with ``block`` tiles in the swizzled layout of a ``smem_rows`` x 128 buffer
    (the same 128-byte swizzle for any row count that is a multiple of 8)."""
    lay = gl.NVMMASharedLayout.get_default_for([smem_rows, 128], gl.float8e4nv)
    return TensorDescriptor.from_tensor(t, block, lay)


def launch(cand: dict, a, sa, w, sw, out, recipe) -> None:
    """Run candidate ``cand`` (BLOCK_T, BLOCK_D, T_LOAD or 0 = min(BLOCK_T, T rounded up to a
    power of 2 >= 8), STAGES, AHEAD, SPLIT_R, num_warps, BATCH) on fp8_einsum's operands."""
    sa_kind, sa, sw_kind, sw, per_row = fe._prepare(fe.SUPPORTED_EQUATION, a, sa, w, sw, out, recipe)
    if per_row:
        blocks = fe.block_scales_view(sw)
        if blocks is not None:
            sw, per_row = blocks, False
    t, g, r = a.shape
    d = w.shape[1]
    bt, bd = cand["BLOCK_T"], cand["BLOCK_D"]
    t_load = cand.get("T_LOAD") or min(bt, max(8, 1 << (t - 1).bit_length()))
    split = cand["SPLIT_R"]
    kb = r // 128
    x2 = a.transpose(0, 1).reshape(g * t, r)
    w_desc = descriptor(w.view(g * d, r), [bd, 128], bd)
    a_desc = descriptor(x2, [t_load, 128], bt)
    n_tiles = fe.cdiv(t, bt) * fe.cdiv(d, bd)
    if split == 1:
        dst, strides, wss = out, out.stride(), 0
    else:
        dst, sem = fe._split_workspace(split, t, g, d, out)
        strides, wss = (0, 0, 0), t * g * d
    tm_kernel[(n_tiles, g, split)](
        dst, w_desc, a_desc, sa, sw, t, d, *strides,
        sa.stride(0), sa.stride(1), sa.stride(2), sw.stride(0), sw.stride(1), sw.stride(2), wss,
        SA_KIND=sa_kind, SW_KIND=sw_kind, SW_PER_ROW=per_row, BLOCK_T=bt, BLOCK_D=bd, T_LOAD=t_load,
        KB_PER=kb // split, STAGES=cand["STAGES"], AHEAD=cand["AHEAD"], SPLIT_R=split, USE_PDL=True,
        BATCH_SCALES=cand["BATCH"],
        num_warps=cand["num_warps"], launch_pdl=True,
    )  # fmt: skip
    if split > 1:
        cfg = fe.make_config("tm", "_fp8_einsum_gluon_kernel", 4, 1, SPLIT_R=split, USE_PDL=True, PATH=4)
        args = fe._kernel_args(a, sa, w, sw, out)
        kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
        fe._launch_split_sum(cfg, t, g, d, out, dst, sem, args, kinds, {"launch_pdl": True})
