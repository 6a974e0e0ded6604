"""Block-scaled FP8 ``einsum('bhr,hdr->bhd')`` for DeepSeek-V4's o_proj (``wo_a``), in Triton.

Computes, for every token t, group g and output row d::

    out[t, g, d] = sum_r a[t, g, r] * sa[t, g, r // 128] * w[g, d, r] * sw_(g, d, r // 128)

with fp8 e4m3 products on the tensor cores, accumulated in fp32, written as bf16. Shapes
(docs/reference/vllm-code-paths.md#dsv4-shapes): TP=2: G=4, R=4096, D=1024; TP=1: G=8.

The overlay routes o_proj here on compute capability family 120 only (GB10 is 12.1), so every
path below is one GB10 runs: ``mma.sync`` on fp8 operands, nothing that needs TMA descriptors,
wgmma or another architecture. What Triton emits for sm_121a depends on its version: Triton 3.8
(the image's, required by torch 2.14) emits native fp8 ``mma.sync ... e4m3.e4m3`` for ``tl.dot``
and the block-scaled ``mma.sync ... kind::mxf8f6f4.block_scale ... ue8m0`` for ``tl.dot_scaled``;
Triton 3.6 upcasts both to f16/bf16 (docs/reference/triton-gb10.md). The AOT gate
(:mod:`.aot`) checks the instructions of every sm_121a build.

Calling convention: the same as ``vllm.utils.deep_gemm.fp8_einsum`` as
``vllm/models/deepseek_v4/nvidia/ops/o_proj.py`` calls it::

    fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)

Operands:

* ``a``: e4m3fn ``[T, G, R]``, any strides with unit stride along R (vLLM's activation quant
  gives the group-major strides ``(R, T*R, 1)``).
* ``w``: e4m3fn ``[G, D, R]``, unit stride along R.
* ``out``: bf16 ``[T, G, D]``, unit stride along D; written in place.
* ``recipe``: ``(1, 128, 128)`` (sw per 128x128 weight block) or ``(1, 1, 128)`` (sw per weight
  row and 128-wide K block). ``sa`` is per token and 128-wide K block in both.

Scale encodings (decoded in the kernel, bit-exact):

* fp32: ``sa [T, G, R/128]``; ``sw [G, D/128, R/128]`` (recipe (1,128,128)) or ``[G, D, R/128]``.
* int32 packed UE8M0: ``sa [T, G, R/512]``, ``sw [G, D, R/512]`` (recipe (1,1,128)): four
  exponents per int32, K block k in byte ``k % 4`` (bits ``8*(k%4)`` .. ``8*(k%4)+7``) of word
  ``k // 4``.
* ``torch.float8_e8m0fnu`` (or ``torch.uint8`` holding the same bytes): one exponent byte per
  block, same shapes as fp32. It is viewed as uint8 before the launch, never handed to Triton
  as ``float8_e8m0fnu`` (field bug B02).

An exponent byte ``e`` decodes to ``2**(e - 127)`` exactly: fp32 bits ``e << 23`` for
1 <= e <= 254, the subnormal ``2**-127`` for e = 0, NaN for e = 255 (the ``float8_e8m0fnu``
definition). Any strides are accepted for the scales, including vLLM's MN-major TMA-aligned
layout (token dim contiguous, T padded to a multiple of 4: strides ``(1, K_s*T4, T4)``).

Per-row weight scales that repeat one value on every row of each 128-row block (DeepGEMM's
per-row copies of 128x128 block scales, the layout GB10 serves) are handed to the kernels as
block scales once :func:`block_scales_view` has said so; before that, ``SHARE_CHECK`` configs
check once per tile whether its rows hold identical raw per-row scale entries and then take the
one-scale loop. The bits are the same either way.

Two kernels, four paths:

* ``_fp8_einsum_kernel`` (``tl.dot`` on fp8, each 128-wide K block's fp32 MMA partial scaled into
  the fp32 accumulator: "promotion"), with a constexpr ``PATH``:

  * 0, the tile loop (prefill and mid T): a (T tile, D tile, K split) per CTA, a
    software-pipelined loop over 128-wide K blocks; split configs sum their partials in the last
    CTA of each tile. Block weight scales give each tile one scale per K block (every config's
    BLOCK_D divides 128; the launcher refuses a config that does not): one FMA per element;
    per-row scales cost an FMUL and an FMA.
  * 1, decode: weight rows on the MMA's M side (the few tokens are its N), KB_PER K blocks per
    CTA, every weight tile and its scales loaded at once, first, then the activations, then
    KB_PER MMAs into one fp32 accumulator; each K split stores an fp32 partial. Launched with
    programmatic dependent launch (``USE_PDL``): the weight and its scales are loaded before
    ``gdc_wait``, so the weight stream may start while the kernel before this one on the stream
    finishes; ``a``, ``sa``, the workspace and ``out`` are touched only after it. Caller contract
    (as the router's): no kernel right before this one writes ``w`` or ``sw`` (model parameters).
  * 2, the split sum of paths 1 and the block-scaled decode tiles: a second launch (with PDL when
    the first has it, so it is resident and waiting when the partials land) adds
    ``0 + p0 + p1 + ...`` in split order and writes bf16 ``out``.

* ``_fp8_einsum_mx_kernel``, the block-scaled path: ``tl.dot_scaled(e4m3, ue8m0)``, the tensor
  core applying the scales itself (the MXFP8 MMA on sm_120/sm_121 with Triton 3.8). Each 32-wide
  K vector takes the exponent byte of its 128-wide scale block (repeated over its four vectors:
  exact), read straight from the served layouts (packed int32 words, exponent bytes, or the
  exponent field of fp32 scales; no copy). fp32 scales must be powers of two (vLLM's are:
  docs/reference/vllm-code-paths.md#o_proj-scales); an output whose token or weight row has a fp32
  scale that is not (its exponent alone would be inexact) is written NaN, never a wrong number.
  Two forms, by constexpr:

  * the tile loop (``ONE_TILE`` False; prefill): (T tile, D tile) per CTA, tokens on the MMA's M
    side, a pipelined loop over BLOCK_K-wide K tiles. ``PROMOTE``: each K tile's MMA result is
    added to an fp32 accumulator outside the MMA (as DeepSeek's kernels promote every 128 of K);
    else every K tile accumulates in the MMA itself over the whole K. Both exist because whether
    sm_120/sm_121's MMA accumulates in full fp32 over K = 4096 is unknown without the device
    (the probe measures the error of both against fp64).
  * the decode tile (``ONE_TILE`` True): weight rows on the M side, one BLOCK_K-wide K tile per
    CTA (K split in R / BLOCK_K parts, summed by PATH 2), the weight and its scales loaded before
    ``gdc_wait`` as PATH 1 does.

T (tokens) and the scale strides (which depend on T through the TMA padding T4 = 4*ceil(T/4))
are ``do_not_specialize`` kernel arguments, so one compiled kernel per config serves T = 1 .. 16384
(no recompilation per T; CUDA-graph safe: the launcher does no host sync and allocates nothing,
but for the first call on a per-row weight-scale tensor, outside graph capture: see
:func:`block_scales_view`).
The operand strides stay specialised: they are T-independent, or (``a``'s group stride T*R in the
group-major layout) always a multiple of 16, so their specialisation never changes with T and
keeps the 16-byte vector loads. Total elements per operand must stay below 2**31 (int32 offsets).

Every path adds in a fixed order: bitwise deterministic run to run.

Public API: :func:`fp8_einsum`; torch custom op ``torch.ops.sparkpair.fp8_einsum`` (mutates
``out``; fake implementation registered); :data:`FP8_EINSUM_CONFIGS` (every config of both
kernels), :data:`FP8_EINSUM_MX_CONFIGS` (the block-scaled ones), :data:`FP8_EINSUM_SUM_CONFIGS`
(PATH 2, for the AOT build); the GB10 plan :data:`FP8_EINSUM_PLAN_UE8M0` /
:data:`FP8_EINSUM_PLAN_FP32` and :func:`select_fp8_einsum_config`; :func:`fp8_einsum_with_config`.
"""

from __future__ import annotations

import os
import weakref

import torch

from ._common import (
    HAS_TRITON,
    SEMAPHORES,
    KernelConfig,
    cdiv,
    make_config,
    require_triton,
    tl,
    triton,
)
from .fp8_einsum_plan import (
    FP8_EINSUM_PLAN,
    FP8_EINSUM_PLAN_FP32,
    FP8_EINSUM_PLAN_UE8M0,
    UNBOUNDED,
    PlanTable,
    default_plan,
    plan_config_name,
    plan_problem,
)

__all__ = [
    "FP8_EINSUM_CONFIGS",
    "FP8_EINSUM_DECODE_CONFIGS",
    "FP8_EINSUM_MX_CONFIGS",
    "FP8_EINSUM_PLAN",
    "FP8_EINSUM_PLAN_CANDIDATES",
    "FP8_EINSUM_PLAN_FP32",
    "FP8_EINSUM_PLAN_UE8M0",
    "FP8_EINSUM_SUM_CONFIGS",
    "MX_KERNEL",
    "SUPPORTED_EQUATION",
    "UNBOUNDED",
    "active_plan",
    "block_scales_view",
    "candidate_range",
    "decode_ue8m0",
    "fp8_einsum",
    "fp8_einsum_with_config",
    "kernel_path",
    "rows_repeat_in_blocks",
    "select_fp8_einsum_config",
    "split_sum_config",
    "unpack_ue8m0_int32",
    "use_plan",
]

SUPPORTED_EQUATION = "bhr,hdr->bhd"
SCALE_BLOCK = 128  # K elements per scale, both recipes (docs/reference/vllm-code-paths.md#o_proj-scales)
MX_VECTOR = 32  # K elements per exponent byte of tl.dot_scaled's e8m0 scales (OCP MX spec)
MX_KERNEL = "_fp8_einsum_mx_kernel"  # KernelConfig.kernel of the block-scaled configs

# Scale kinds (constexpr SA_KIND / SW_KIND).
_SCALE_FP32 = 0
_SCALE_PACKED_I32 = 1
_SCALE_U8 = 2


# ----------------------------------------------------------------------------------------------
# Kernel
# ----------------------------------------------------------------------------------------------

if HAS_TRITON:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    from ._scale_decode import load_block_exponents as _load_exponents
    from ._scale_decode import load_block_scale as _load_scale

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

    @triton.jit
    def _dec_w(w_ptrs, sw_ptr, sw_offs, sw_mask, kb, num_kb, d_mask, stride_swk, SW_KIND: tl.constexpr):
        """PATH 1: K block ``kb``'s weight tile [BLOCK_D, 128] and its weight scale(s)."""
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
        """PATH 1: K block ``kb``'s activation tile [BLOCK_T, 128] and its per-token scales."""
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
        """PATH 1: ``acc[d, t] += dot(w, a.T)[d, t] * s_w * s_a[t]`` (weight rows on the MMA's M side)."""
        part = tl.dot(w, tl.trans(a))
        if SW_VEC:
            acc += part * (s_w[:, None] * s_a[None, :])
        else:
            acc += part * (s_w * s_a)[None, :]
        return acc

    @triton.jit
    def _decode_tile(
        out_ptr,
        ws_ptr,
        a_ptr,
        sa_ptr,
        w_ptr,
        sw_ptr,
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
        stride_wss,
        SA_KIND: tl.constexpr,
        SW_KIND: tl.constexpr,
        SW_PER_ROW: tl.constexpr,
        BLOCK_T: tl.constexpr,
        BLOCK_D: tl.constexpr,
        BLOCK_R: tl.constexpr,
        SPLIT_R: tl.constexpr,
        KB_PER: tl.constexpr,
        USE_PDL: tl.constexpr,
    ):
        """PATH 1, decode: one CTA per (D tile, T tile) x group x KB_PER K blocks (split-K over R).

        Every weight tile of the CTA and its scales are loaded first, all at once (KB_PER
        independent loads in flight; no software pipeline to fill), and under ``USE_PDL``
        before ``gdc_wait``: the weight is a parameter that no earlier kernel writes. Then the
        activations and their scales, then KB_PER MMAs with the weight rows on the M side
        (mma.sync's M from D; the few tokens are its N). One K split (SPLIT_R == 1) writes
        ``out``; several write fp32 partials ``ws[s, t, g, d]``, summed by PATH 2 in split order.
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

    @triton.jit
    def _split_sum(
        out_ptr,
        ws_ptr,
        D,
        stride_ot,
        stride_og,
        stride_wss,
        BLOCK: tl.constexpr,
        SPLIT_R: tl.constexpr,
        USE_PDL: tl.constexpr,
    ):
        """PATH 2: ``out[t, g, d] = bf16(0 + ws[0] + ws[1] + ...)`` in split order; program =
        (BLOCK outputs along D, g, t). Under ``USE_PDL`` it is resident before the partials'
        kernel ends and reads them only after ``gdc_wait``."""
        if USE_PDL:
            gdc_launch_dependents()
            gdc_wait()
        g = tl.program_id(1)
        t = tl.program_id(2)
        G = tl.num_programs(1)
        offs_d = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs_d < D
        p_offs = t * (G * D) + g * D + offs_d
        tot = tl.zeros((BLOCK,), dtype=tl.float32)
        for s in tl.static_range(SPLIT_R):  # split order: deterministic
            tot += tl.load(ws_ptr + s * stride_wss + p_offs, mask=mask, other=0.0)
        tl.store(out_ptr + t * stride_ot + g * stride_og + offs_d, tot.to(tl.bfloat16), mask=mask)

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_kernel(
        out_ptr,  # [T, G, D] bf16, unit stride along D
        ws_ptr,  # SPLIT_R > 1: fp32 partials [SPLIT_R, T, G, D] contiguous (else unused)
        sem_ptr,  # SPLIT_R > 1: int32 tile counters, zero on entry and exit (see SemaphorePool)
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
        PATH: tl.constexpr = 0,  # 0 tile loop, 1 decode tile, 2 split sum
        KB_PER: tl.constexpr = 1,  # PATH 1: K blocks (of 128) per CTA, all loaded at once
        USE_PDL: tl.constexpr = False,  # PATH 1/2: launched with programmatic dependent launch
    ):
        if PATH == 1:
            _decode_tile(
                out_ptr,
                ws_ptr,
                a_ptr,
                sa_ptr,
                w_ptr,
                sw_ptr,
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
                stride_wss,
                SA_KIND,
                SW_KIND,
                SW_PER_ROW,
                BLOCK_T,
                BLOCK_D,
                BLOCK_R,
                SPLIT_R,
                KB_PER,
                USE_PDL,
            )
        elif PATH == 2:
            _split_sum(out_ptr, ws_ptr, D, stride_ot, stride_og, stride_wss, BLOCK_D, SPLIT_R, USE_PDL)
        else:
            _tile_loop(
                out_ptr,
                ws_ptr,
                sem_ptr,
                a_ptr,
                sa_ptr,
                w_ptr,
                sw_ptr,
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
                stride_wss,
                SA_KIND,
                SW_KIND,
                SW_PER_ROW,
                BLOCK_T,
                BLOCK_D,
                BLOCK_R,
                GROUP_T,
                SPLIT_R,
                SHARE_CHECK,
                ROW_STAGES,
            )

    @triton.jit
    def _tile_loop(
        out_ptr,
        ws_ptr,
        sem_ptr,
        a_ptr,
        sa_ptr,
        w_ptr,
        sw_ptr,
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
        stride_wss,
        SA_KIND: tl.constexpr,
        SW_KIND: tl.constexpr,
        SW_PER_ROW: tl.constexpr,
        BLOCK_T: tl.constexpr,
        BLOCK_D: tl.constexpr,
        BLOCK_R: tl.constexpr,
        GROUP_T: tl.constexpr,
        SPLIT_R: tl.constexpr,
        SHARE_CHECK: tl.constexpr,
        ROW_STAGES: tl.constexpr,
    ):
        """PATH 0: (T tile, D tile, K split) per CTA, a software-pipelined loop over K blocks."""
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

    @triton.jit
    def _mx_dot(acc, a, ea, w, ew, TOKENS_ON_N: tl.constexpr, PROMOTE: tl.constexpr):
        """Block-scaled path: one K tile's ``dot_scaled`` of the activations ``a [BLOCK_T, BLOCK_K]``
        and the weight ``w [BLOCK_D, BLOCK_K]`` with their exponents, into ``acc`` (``[BLOCK_D,
        BLOCK_T]`` with the tokens on the MMA's N side, else ``[BLOCK_T, BLOCK_D]``). ``PROMOTE``:
        the MMA starts from zero and its result is added to ``acc`` in fp32 (``tl.fma(part, 1, acc)``:
        Triton folds a plain ``acc + part`` back into the MMA's accumulator); else the MMA
        accumulates into ``acc`` itself."""
        if TOKENS_ON_N:
            if PROMOTE:
                acc = tl.fma(tl.dot_scaled(w, ew, "e4m3", tl.trans(a), ea, "e4m3"), 1.0, acc)
            else:
                acc = tl.dot_scaled(w, ew, "e4m3", tl.trans(a), ea, "e4m3", acc)
        else:
            if PROMOTE:
                acc = tl.fma(tl.dot_scaled(a, ea, "e4m3", tl.trans(w), ew, "e4m3"), 1.0, acc)
            else:
                acc = tl.dot_scaled(a, ea, "e4m3", tl.trans(w), ew, "e4m3", acc)
        return acc

    @triton.jit(do_not_specialize=["T", "stride_sat", "stride_sag", "stride_sak", "stride_wss"])
    def _fp8_einsum_mx_kernel(
        out_ptr,  # [T, G, D] bf16, unit stride along D
        ws_ptr,  # SPLIT_R > 1: fp32 partials [SPLIT_R, T, G, D] contiguous (else unused)
        sem_ptr,  # unused (the arguments of _fp8_einsum_kernel, so one launcher serves both)
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
        SPLIT_R: tl.constexpr,  # K splits (the launcher's value: R / BLOCK_K for ONE_TILE)
        TOKENS_ON_N: tl.constexpr,  # tokens on the MMA's N side (decode), weight rows on M
        PROMOTE: tl.constexpr,  # each K tile's MMA result added in fp32 (else MMA-accumulated)
        ONE_TILE: tl.constexpr,  # one K tile per CTA, weight loaded before gdc_wait (decode)
        USE_PDL: tl.constexpr,  # launched with programmatic dependent launch
    ):
        """The block-scaled path (see the module docstring): a (T tile, D tile) of group
        ``program_id(1)``, K split ``program_id(2)``; one split writes bf16 ``out``, several write
        fp32 partials ``ws[s, t, g, d]`` that PATH 2 of ``_fp8_einsum_kernel`` sums."""
        tl.static_assert((512 % BLOCK_K == 0) & (BLOCK_K % 128 == 0), "BLOCK_K: 128, 256 or 512")
        if USE_PDL:
            gdc_launch_dependents()
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
        if TOKENS_ON_N:
            acc = tl.zeros((BLOCK_D, BLOCK_T), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
        if ONE_TILE:
            kt = pid_s
            w = tl.load(w_ptrs + kt * BLOCK_K, mask=d_mask[:, None], other=0.0)
            ew, odd_d = _load_exponents(sw_ptr, sw_rows, d_mask, kt * KB, stride_swk, SW_KIND, NV)
            if USE_PDL:
                gdc_wait()  # a, sa, the workspace and out may be written by the kernels before this one
            a = tl.load(a_ptrs + kt * BLOCK_K, mask=t_mask[:, None], other=0.0)
            ea, odd_t = _load_exponents(sa_ptr, sa_rows, t_mask, kt * KB, stride_sak, SA_KIND, NV)
            acc = _mx_dot(acc, a, ea, w, ew, TOKENS_ON_N, False)
        else:
            if USE_PDL:
                gdc_wait()
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
                acc = _mx_dot(acc, a, ea, w, ew, TOKENS_ON_N, PROMOTE)
                odd_t |= ot
                odd_d |= od
        G = tl.num_programs(1)
        if TOKENS_ON_N:
            if (SA_KIND == 0) | (SW_KIND == 0):
                acc = tl.where(odd_d[:, None] | odd_t[None, :], float("nan"), acc)
            td_mask = d_mask[:, None] & t_mask[None, :]
            o_offs = offs_t[None, :] * stride_ot + g * stride_og + offs_d[:, None]
            p_offs = offs_t[None, :] * (G * D) + g * D + offs_d[:, None]
        else:
            if (SA_KIND == 0) | (SW_KIND == 0):
                acc = tl.where(odd_t[:, None] | odd_d[None, :], float("nan"), acc)
            td_mask = t_mask[:, None] & d_mask[None, :]
            o_offs = offs_t[:, None] * stride_ot + g * stride_og + offs_d[None, :]
            p_offs = offs_t[:, None] * (G * D) + g * D + offs_d[None, :]
        if SPLIT_R == 1:
            tl.store(out_ptr + o_offs, acc.to(tl.bfloat16), mask=td_mask)
        else:
            tl.store(ws_ptr + pid_s * stride_wss + p_offs, acc, mask=td_mask)


# ----------------------------------------------------------------------------------------------
# Configs
# ----------------------------------------------------------------------------------------------


def _cfg(
    name: str,
    bt: int,
    bd: int,
    warps: int,
    stages: int,
    group_t: int = 8,
    split_r: int = 1,
    row_stages: int = 2,
    share_check: bool = False,
) -> KernelConfig:
    if SCALE_BLOCK % bd != 0:
        # The kernel reads one weight scale per tile and K block for 128x128 block scales.
        raise ValueError(f"fp8_einsum config {name}: BLOCK_D={bd} must divide {SCALE_BLOCK}")
    return make_config(
        name,
        "_fp8_einsum_kernel",
        warps,
        stages,
        BLOCK_T=bt,
        BLOCK_D=bd,
        BLOCK_R=SCALE_BLOCK,
        GROUP_T=group_t,
        SPLIT_R=split_r,
        ROW_STAGES=row_stages,
        SHARE_CHECK=share_check,
    )


#: Every ``_fp8_einsum_kernel`` tile-loop config (tile sizes in elements; BLOCK_R is the 128-wide
#: scale block). Shared memory per config is ``(BLOCK_T + BLOCK_D) * 128 B * num_stages`` plus
#: Triton's scratch; each fits GB10's 101,376 B and spills nothing on sm_121a with Triton 3.8
#: (checked by ``sparkpair kernels build`` and tests/aot: the 4-warp 128x64 and 64x128-with-share-
#: check tiles of 4 stages spilled 8-16 B there on per-row scales, so they have 8 warps).
FP8_EINSUM_CONFIGS: tuple[KernelConfig, ...] = (
    # decode, T <= 128: K split in SPLIT_R parts (one launch; the last CTA of a tile sums the fp32
    # partials in split order) so 256-1024 CTAs each stream 1/SPLIT_R of the weight rows.
    _cfg("t16_d32_r4_s4", 16, 32, 4, 4, split_r=4),
    _cfg("t16_d64_r4_s4", 16, 64, 4, 4, split_r=4),
    _cfg("t16_d64_r8_s3", 16, 64, 4, 3, split_r=8),
    _cfg("t16_d128_r4_s4", 16, 128, 4, 4, split_r=4),
    _cfg("t32_d32_r4_s4", 32, 32, 4, 4, split_r=4),
    _cfg("t32_d64_r2_s4", 32, 64, 4, 4, split_r=2),
    _cfg("t32_d64_r4_s4", 32, 64, 4, 4, split_r=4),
    _cfg("t64_d64_r2_s4", 64, 64, 4, 4, split_r=2),
    # no split: mid T and prefill.
    _cfg("t16_d32_s6", 16, 32, 4, 6),
    _cfg("t64_d64_s4", 64, 64, 4, 4),
    _cfg("t64_d128_s4", 64, 128, 4, 4),
    _cfg("t128_d64_s4_w8", 128, 64, 8, 4),
    _cfg("t128_d128_s3_w8", 128, 128, 8, 3),
    # prefill, 8 warps: with one scale per tile and K block (block weight scales) the promotion is
    # one FMA per element.
    _cfg("t128_d64_s3_w8", 128, 64, 8, 3),
    # prefill, per-row weight scales: each tile checks once whether its rows share their scales
    # (DeepGEMM's layout on sm_10x/sm_12x) and then takes the one-scale loop; else the per-row
    # loop, pipelined 2 deep.
    _cfg("t64_d128_s4_w8_bc", 64, 128, 8, 4, share_check=True),
)


def _dcfg(name: str, bt: int, bd: int, kb_per: int, warps: int, pdl: bool = True) -> KernelConfig:
    """A decode config (PATH 1): a BLOCK_D x BLOCK_T tile over ``kb_per`` K blocks per CTA.

    SPLIT_R is the K splits at the served R = 4096 (32 K blocks); the launcher recomputes it
    from R, so the AOT build (served shapes) and the runtime use the same constexprs.
    """
    if SCALE_BLOCK % bd != 0:
        raise ValueError(f"fp8_einsum config {name}: BLOCK_D={bd} must divide {SCALE_BLOCK}")
    return make_config(
        name,
        "_fp8_einsum_kernel",
        warps,
        1,
        BLOCK_T=bt,
        BLOCK_D=bd,
        BLOCK_R=SCALE_BLOCK,
        GROUP_T=1,
        SPLIT_R=cdiv(_SERVED_KB, kb_per),
        ROW_STAGES=2,
        SHARE_CHECK=False,
        PATH=1,
        KB_PER=kb_per,
        USE_PDL=pdl,
    )


# K blocks of the served o_proj (R = 4096, docs/reference/vllm-code-paths.md#dsv4-shapes)
_SERVED_R = 4096
_SERVED_KB = _SERVED_R // SCALE_BLOCK

#: Decode configs (PATH 1). Names: dec_t<BLOCK_T>_d<BLOCK_D>_k<KB_PER>_w<warps>[_nopdl]. Grid on
#: the served TP=2 shape (G=4, D=1024, R=4096, one T tile): (1024/BLOCK_D, 4, 32/KB_PER) CTAs
#: (TP=1, G=8: twice as many), each holding BLOCK_D * KB_PER * 128 weight bytes in flight; then
#: (D/256, 4, T) CTAs of the split sum. sm_121a builds with Triton 3.8 (the AOT gate; registers
#: over the scale layouts / shared bytes, no spill): dec_t16_d128_k4_w8 (GB10's plan, T <= 16) 256
#: CTAs of 64 KB, 100-122 x 256 threads / 67,584 B, one per GB10 SM by shared memory, 5.3 waves on
#: 48 SMs; dec_t16_d64_k4_w4 512 CTAs of 32 KB, 102-108 x 128 / 34,816 B; dec_t32_d64_k4_w4 239-255
#: x 128 / 34,816 B; dec_t32_d128_k4_w8 189-192 x 256 / 69,632 B; dec_t16_d64_k2_w4 (16 K splits)
#: 56-62 x 128 / 18,432 B. (dec_t32_d64_k2_w4, 104-106 registers with Triton's bundled CUDA 13.3
#: ptxas, spilled 8 B with the CUDA 12.9 ptxas the docker stand-in assembles with: dropped.) The
#: plan's choice among them: FP8_EINSUM_PLAN_UE8M0.
FP8_EINSUM_DECODE_CONFIGS: tuple[KernelConfig, ...] = (
    _dcfg("dec_t16_d64_k4_w4", 16, 64, 4, 4),
    _dcfg("dec_t16_d128_k4_w8", 16, 128, 4, 8),
    _dcfg("dec_t32_d128_k4_w8", 32, 128, 4, 8),
    _dcfg("dec_t32_d64_k4_w4", 32, 64, 4, 4),
    _dcfg("dec_t16_d64_k2_w4", 16, 64, 2, 4),
    # Reference (no plan uses it): the same tile launched without PDL, split sum included.
    _dcfg("dec_t16_d64_k4_w4_nopdl", 16, 64, 4, 4, pdl=False),
)
FP8_EINSUM_CONFIGS = FP8_EINSUM_CONFIGS + FP8_EINSUM_DECODE_CONFIGS


def _mxcfg(
    name: str,
    bt: int,
    bd: int,
    bk: int,
    warps: int,
    stages: int,
    *,
    promote: bool = True,
    decode: bool = False,
    group_t: int = 8,
) -> KernelConfig:
    """A block-scaled config (``_fp8_einsum_mx_kernel``): BLOCK_T x BLOCK_D tiles over
    ``bk``-wide K tiles. ``decode``: the decode tile (tokens on the MMA's N side, one K tile per
    CTA, launched with PDL; SPLIT_R is the K splits at the served R = 4096, recomputed by the
    launcher from R); else the tile loop, ``promote`` choosing per-K-tile promotion or MMA
    accumulation."""
    if 512 % bk != 0 or bk % SCALE_BLOCK != 0:
        raise ValueError(f"fp8_einsum config {name}: BLOCK_K={bk} must be 128, 256 or 512")
    return make_config(
        name,
        MX_KERNEL,
        warps,
        stages,
        BLOCK_T=bt,
        BLOCK_D=bd,
        BLOCK_K=bk,
        GROUP_T=1 if decode else group_t,
        SPLIT_R=_SERVED_R // bk if decode else 1,
        TOKENS_ON_N=decode,
        PROMOTE=promote and not decode,
        ONE_TILE=decode,
        USE_PDL=decode,
    )


#: Block-scaled configs (``_fp8_einsum_mx_kernel``). Names: mx_t<BLOCK_T>_d<BLOCK_D>_k<BLOCK_K>_w
#: <warps>_s<stages>[_acc: MMA-accumulated over the whole K] (the tile loop), mxd_... (the decode
#: tile). sm_121a builds with Triton 3.8 (the AOT gate; packed-int32 per-row scales), registers /
#: shared bytes, every one ``mma.sync ... kind::mxf8f6f4.block_scale ... ue8m0`` with no spill:
#: mx_t128_d64_k128_w8_s4 190 / 83,200 (one 128x64 tile of 256 threads; the promoted 128x128 and
#: 4-warp tiles hit 255 registers and spilled); mx_t128_d128_k128_w8_s3_acc 175 / 73,728 (a
#: promoted 128x128 tile keeps the MMA's result beside the accumulator: 255 registers, spilled);
#: mx_t64_d64_k128_w4_s4 187 / 55,296 and its _acc 145; mxd_t16_d64_k512_w4 157 / 36,864;
#: mxd_t16_d128_k512_w8 158 / 69,632. On sm_90 (the H200 proxy) Triton decomposes dot_scaled
#: (upcast to bf16, scaled, bf16 wgmma): correct, not a speed proxy.
FP8_EINSUM_MX_CONFIGS: tuple[KernelConfig, ...] = (
    _mxcfg("mx_t128_d64_k128_w8_s4", 128, 64, 128, 8, 4),
    _mxcfg("mx_t128_d128_k128_w8_s3_acc", 128, 128, 128, 8, 3, promote=False),
    _mxcfg("mx_t64_d64_k128_w4_s4", 64, 64, 128, 4, 4),
    _mxcfg("mx_t64_d64_k128_w4_s4_acc", 64, 64, 128, 4, 4, promote=False),
    _mxcfg("mxd_t16_d64_k512_w4", 16, 64, 512, 4, 1, decode=True),
    _mxcfg("mxd_t16_d128_k512_w8", 16, 128, 512, 8, 1, decode=True),
    _mxcfg("mxd_t32_d128_k512_w8", 32, 128, 512, 8, 1, decode=True),
)
FP8_EINSUM_CONFIGS = FP8_EINSUM_CONFIGS + FP8_EINSUM_MX_CONFIGS

#: Elements of D per program of the split sum (PATH 2): 4 warps, 2 outputs per thread; grid
#: (D / SUM_BLOCK, G, T) = 16 x T programs on the served TP=2 shape. The sum is latency-bound (a
#: few KB per program, read once from L2), so more, smaller programs finish it sooner: runs 4 and 5
#: of benchmarks/results/explore-2026-12-03-k17g/README.md (H200, cold p50 us through the public
#: dispatch, the same bits at every value): 256 against the previous 1024 at T = 16 / 32 / 36, fp32
#: 6.38-6.60 / 8.55-8.68 / 8.84-8.98 against 7.73-7.87 / 9.67-9.76 / 11.19-11.23, int32-bcast
#: 7.17-7.33 / 8.25-8.44 / 8.58-9.09 against 7.57-7.67 / 9.27-9.34 / 10.50-10.80; 128 and 64 no
#: better overall (64 slower from T = 16, 128 slower at T = 128).
SUM_BLOCK = 256


def split_sum_config(cfg: KernelConfig) -> KernelConfig:
    """The PATH 2 config that sums ``cfg``'s SPLIT_R partials (launched with PDL iff ``cfg`` is)."""
    split, pdl = cfg["SPLIT_R"], cfg["USE_PDL"]
    return make_config(
        f"reduce_fp8_s{split}{'_pdl' if pdl else ''}",
        "_fp8_einsum_kernel",
        4,
        1,
        BLOCK_T=16,
        BLOCK_D=SUM_BLOCK,
        BLOCK_R=SCALE_BLOCK,
        GROUP_T=1,
        SPLIT_R=split,
        ROW_STAGES=2,
        SHARE_CHECK=False,
        PATH=2,
        KB_PER=1,
        USE_PDL=pdl,
    )


def _path(cfg: KernelConfig) -> int:
    return cfg.constexprs().get("PATH", 0)


#: The split-sum configs of every decode config that splits K (compiled by the AOT gate).
FP8_EINSUM_SUM_CONFIGS: tuple[KernelConfig, ...] = tuple(
    {
        (sc := split_sum_config(c)).name: sc
        for c in FP8_EINSUM_CONFIGS
        if (c.kernel == MX_KERNEL or _path(c) == 1) and c["SPLIT_R"] > 1
    }.values()
)


_CONFIGS_BY_NAME = {c.name: c for c in FP8_EINSUM_CONFIGS}

#: The plan tables in force in this process, by ``fp32_scales`` (both scales fp32): GB10's built-in
#: defaults (:mod:`.fp8_einsum_plan`, with the evidence they rest on) until :func:`use_plan` installs
#: the probe's per-range choice for the served layout.
_ACTIVE_PLANS: dict[bool, PlanTable] = {False: FP8_EINSUM_PLAN_UE8M0, True: FP8_EINSUM_PLAN_FP32}


def use_plan(plan: PlanTable | None, fp32_scales: bool) -> PlanTable:
    """Make ``plan`` the table :func:`select_fp8_einsum_config` reads for one scale encoding (``None``:
    the built-in default again); returns the table it replaced.

    The overlay calls it once per process, before the model is built, with the kernel plan's per-range
    choice (:class:`sparkpair_overlay.o_proj_configs.ConfigPlan`). Later calls are plain Python dict reads
    at launch time (a CUDA graph replays the configs it captured).

    Raises:
        ValueError: the table is not usable (:func:`.fp8_einsum_plan.plan_problem`: empty, not
            increasing, not ending at UNBOUNDED, or naming a config this module does not have).
    """
    table = default_plan(fp32_scales) if plan is None else tuple((int(m), str(n)) for m, n in plan)
    problem = plan_problem(table, _CONFIGS_BY_NAME)
    if problem is not None:
        raise ValueError(f"fp8_einsum.use_plan: {problem}; wanted ((max_T, config name), ...)")
    old = _ACTIVE_PLANS[fp32_scales]
    _ACTIVE_PLANS[fp32_scales] = table
    return old


def active_plan(fp32_scales: bool) -> PlanTable:
    """The table in force for one scale encoding (see :func:`use_plan`)."""
    return _ACTIVE_PLANS[fp32_scales]


def select_fp8_einsum_config(t: int, fp32_scales: bool = False) -> KernelConfig:
    """The config :func:`fp8_einsum` uses for ``t`` tokens: the table in force (:func:`active_plan`)
    for fp32 scales (``fp32_scales``: both scales fp32) or the other encodings."""
    return _CONFIGS_BY_NAME[plan_config_name(_ACTIVE_PLANS[fp32_scales], t)]


def kernel_path(cfg: KernelConfig) -> str:
    """The kernel path a config runs, as the probe's ``kernel_paths`` rows name it: ``decode``
    (PATH 1), ``tile-split`` / ``tile`` (PATH 0 with / without a K split), ``mx-decode`` (the
    block-scaled decode tile), ``mx-tile`` (block-scaled tile loop, promoted per K tile) or
    ``mx-tile-acc`` (accumulated in the MMA over the whole K)."""
    meta = cfg.constexprs()
    if cfg.kernel == MX_KERNEL:
        if meta["ONE_TILE"]:
            return "mx-decode"
        return "mx-tile" if meta["PROMOTE"] else "mx-tile-acc"
    if meta.get("PATH", 0) == 1:
        return "decode"
    if meta.get("PATH", 0) == 2:
        return "split-sum"
    return "tile-split" if meta["SPLIT_R"] > 1 else "tile"


#: Token counts up to which a decode tile (tokens on the MMA's N side, every CTA streaming its weight
#: slice once per T tile) is worth timing: past 64 each extra T tile reads the weight again.
DECODE_TILE_MAX_T = 64
#: Token counts up to which a K-split tile loop is worth timing (the split trades partial-sum traffic
#: for CTAs; from a few hundred tokens the unsplit grid fills the GPU).
SPLIT_TILE_MAX_T = 256


def candidate_range(cfg: KernelConfig) -> tuple[int, int] | None:
    """The token counts ``[lo, hi]`` at which the probe times ``cfg`` as a candidate of the plan
    (``hi`` :data:`.fp8_einsum_plan.UNBOUNDED` for no end), or ``None`` for a config no plan takes (the
    no-PDL reference tile, the split sums). Decode tiles: 1..:data:`DECODE_TILE_MAX_T`; K-split tile
    loops and the 16-token unsplit tile: 1..:data:`SPLIT_TILE_MAX_T`; tile loops of 64 tokens from 17,
    of 128 tokens from 65 (fewer tokens leave most of the tile empty), to no end."""
    path = kernel_path(cfg)
    if path == "split-sum" or (path == "decode" and not cfg["USE_PDL"]):
        return None
    if path in ("decode", "mx-decode"):
        return 1, DECODE_TILE_MAX_T
    if path == "tile-split" or cfg["BLOCK_T"] <= 32:
        return 1, SPLIT_TILE_MAX_T
    return (17 if cfg["BLOCK_T"] <= 64 else 65), UNBOUNDED


#: Every config the plan may take (:func:`candidate_range` is not ``None``), in definition order.
FP8_EINSUM_PLAN_CANDIDATES: tuple[KernelConfig, ...] = tuple(
    c for c in FP8_EINSUM_CONFIGS if candidate_range(c) is not None
)


# ----------------------------------------------------------------------------------------------
# Scale handling (host side; also the reference decoders the tests use)
# ----------------------------------------------------------------------------------------------

_E8M0 = getattr(torch, "float8_e8m0fnu", None)


def decode_ue8m0(exp_bytes: torch.Tensor) -> torch.Tensor:
    """Exponent bytes -> fp32 ``2**(e-127)`` exactly (e=0 -> 2**-127, e=255 -> NaN).

    Args:
        exp_bytes: any integer tensor holding 0..255, or a ``float8_e8m0fnu`` tensor.
    Returns:
        fp32 tensor of the same shape.
    """
    if _E8M0 is not None and exp_bytes.dtype == _E8M0:
        exp_bytes = exp_bytes.view(torch.uint8)
    e = exp_bytes.to(torch.int32) & 0xFF
    bits = torch.where(e == 0, torch.full_like(e, 0x00400000), e << 23)
    bits = torch.where(e == 255, torch.full_like(e, 0x7FC00000), bits)
    return bits.view(torch.float32)


def unpack_ue8m0_int32(packed: torch.Tensor, num_blocks: int) -> torch.Tensor:
    """Unpack int32 words of four UE8M0 bytes into ``[..., num_blocks]`` uint8 (byte k at bits 8k)."""
    if packed.dtype != torch.int32:
        raise ValueError(f"unpack_ue8m0_int32: expected int32, got {packed.dtype}")
    shifts = torch.arange(4, device=packed.device, dtype=torch.int32) * 8
    b = (packed.unsqueeze(-1) >> shifts) & 0xFF
    return b.flatten(-2)[..., :num_blocks].to(torch.uint8)


def _scale_kind(s: torch.Tensor, what: str) -> tuple[int, torch.Tensor]:
    if s.dtype == torch.float32:
        return _SCALE_FP32, s
    if s.dtype == torch.int32:
        return _SCALE_PACKED_I32, s
    if _E8M0 is not None and s.dtype == _E8M0:
        return _SCALE_U8, s.view(torch.uint8)  # B02: never hand float8_e8m0fnu to Triton
    if s.dtype == torch.uint8:
        return _SCALE_U8, s
    raise ValueError(
        f"fp8_einsum: {what} dtype {s.dtype} is not a supported scale encoding "
        "(float32, int32 packed UE8M0, float8_e8m0fnu, uint8 exponent bytes)"
    )


def _check_scale_shape(s: torch.Tensor, kind: int, lead: tuple[int, ...], r: int, what: str) -> None:
    kb = r // SCALE_BLOCK
    want_last = cdiv(kb, 4) if kind == _SCALE_PACKED_I32 else kb
    want = (*lead, want_last)
    if tuple(s.shape) != want:
        enc = {0: "float32", 1: "int32 packed UE8M0", 2: "UE8M0 bytes"}[kind]
        raise ValueError(
            f"fp8_einsum: {what} has shape {tuple(s.shape)}; a {enc} scale for these operands must be {want}"
        )


def _prepare(
    equation: str,
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out: torch.Tensor,
    recipe: tuple[int, int, int] | None,
) -> tuple[int, torch.Tensor, int, torch.Tensor, bool]:
    if equation.replace(" ", "") != SUPPORTED_EQUATION:
        raise ValueError(f"fp8_einsum: only equation {SUPPORTED_EQUATION!r} is supported; got {equation!r}")
    if a.dim() != 3 or w.dim() != 3 or out.dim() != 3:
        raise ValueError(
            f"fp8_einsum: a [T,G,R], w [G,D,R], out [T,G,D] must be 3-D; got a {tuple(a.shape)}, "
            f"w {tuple(w.shape)}, out {tuple(out.shape)}"
        )
    t, g, r = a.shape
    gw, d, rw = w.shape
    if gw != g or rw != r or tuple(out.shape) != (t, g, d):
        raise ValueError(
            f"fp8_einsum: shapes disagree: a {tuple(a.shape)} (T,G,R), w {tuple(w.shape)} (G,D,R), "
            f"out {tuple(out.shape)} (want {(t, g, d)})"
        )
    if a.dtype != torch.float8_e4m3fn or w.dtype != torch.float8_e4m3fn:
        raise ValueError(f"fp8_einsum: a and w must be float8_e4m3fn; got {a.dtype} and {w.dtype}")
    if out.dtype != torch.bfloat16:
        raise ValueError(f"fp8_einsum: out must be bfloat16; got {out.dtype}")
    if r % SCALE_BLOCK != 0:
        raise ValueError(f"fp8_einsum: R={r} must be a multiple of {SCALE_BLOCK}")
    if a.stride(2) != 1 or w.stride(2) != 1 or out.stride(2) != 1:
        raise ValueError(
            f"fp8_einsum: a, w and out need unit stride along their last dim; got strides "
            f"{a.stride()}, {w.stride()}, {out.stride()}"
        )
    for name, ten in (("a", a), ("w", w), ("out", out)):
        last = sum((n - 1) * st for n, st in zip(ten.shape, ten.stride(), strict=True)) if ten.numel() else 0
        if last >= 2**31:
            raise ValueError(
                f"fp8_einsum: {name} spans {last + 1} elements; the kernel's int32 offsets need < 2**31"
            )
    if recipe is not None:
        recipe = tuple(int(v) for v in recipe)  # type: ignore[assignment]
        if recipe not in ((1, 128, 128), (1, 1, 128)):
            raise ValueError(
                f"fp8_einsum: recipe {recipe} is not supported; want (1, 128, 128) or (1, 1, 128)"
            )
    sa_kind, sa = _scale_kind(sa, "sa")
    sw_kind, sw = _scale_kind(sw, "sw")
    _check_scale_shape(sa, sa_kind, (t, g), r, "sa")
    # The weight-scale granularity is read from sw's shape, never from the recipe alone: with
    # recipe (1,128,128) on sm_10x/sm_12x, vLLM's DeepGEMM weight post-processing
    # (fp8_utils.py deepgemm_post_process_fp8_weight_block, vllm-code-paths.md) still broadcasts
    # each 128x128 block scale to one packed int32 scale per row, so a (1,128,128) call can
    # carry fp32 activation scales with per-row int32 weight scales. Both describe the same
    # numbers; the kernel reads either. Recipe (1,1,128) asks for per-row weight scales.
    per_row = (recipe is not None and recipe[1] == 1) or (
        sw.dim() == 3 and sw.shape[1] == d and d != cdiv(d, 128)
    )
    _check_scale_shape(sw, sw_kind, (g, d if per_row else cdiv(d, 128)), r, "sw")
    if (sa.is_cuda or sw.is_cuda or out.is_cuda or w.is_cuda) and not (
        a.device == w.device == out.device == sa.device == sw.device
    ):
        raise ValueError(
            f"fp8_einsum: operands on different devices: a {a.device}, sa {sa.device}, w {w.device}, "
            f"sw {sw.device}, out {out.device}"
        )
    return sa_kind, sa, sw_kind, sw, per_row


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _kernels_interpreted() -> bool:
    """True when Triton's interpreter built the kernel (TRITON_INTERPRET=1 at import)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(_fp8_einsum_kernel, InterpretedFunction)


def fp8_einsum_with_config(
    equation: str,
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    recipe: tuple[int, int, int] | None = None,
    config: KernelConfig | str | None = None,
) -> None:
    """:func:`fp8_einsum` with an explicit config (``None``: the plan's choice). See the module docstring.

    Raises:
        ValueError: as :func:`fp8_einsum`; also an unknown config name, a split-sum (PATH 2)
            config, a tile-loop config whose BLOCK_D does not divide 128 with block weight scales,
            or a block-scaled config whose BLOCK_K does not divide R.
    """
    (x, sa), (w, sw) = a, b
    sa_kind, sa, sw_kind, sw, per_row = _prepare(equation, x, sa, w, sw, out, recipe)
    require_triton()
    if not (x.is_cuda or _interpreting()):
        raise ValueError(
            f"fp8_einsum: needs CUDA tensors (got {x.device}); set TRITON_INTERPRET=1 for the CPU"
        )
    t, g, r = x.shape
    d = w.shape[1]
    if t == 0:
        return
    if config is None:
        cfg, sw, per_row = _plan(x, sw, sa_kind, sw_kind, per_row)
    elif isinstance(config, str):
        if config not in _CONFIGS_BY_NAME:
            raise ValueError(
                f"fp8_einsum: no config named {config!r}; known: {', '.join(sorted(_CONFIGS_BY_NAME))}"
            )
        cfg = _CONFIGS_BY_NAME[config]
    else:
        cfg = config
    meta = cfg.constexprs()
    if cfg.kernel == MX_KERNEL:
        _launch_mx(cfg, meta, x, sa, w, sw, out, sa_kind, sw_kind, per_row)
        return
    if meta.get("PATH", 0) == 2:
        raise ValueError(
            f"fp8_einsum: config {cfg.name} is a split-sum stage; pass the decode config it follows"
        )
    if not per_row and SCALE_BLOCK % meta["BLOCK_D"] != 0:
        raise ValueError(
            f"fp8_einsum: config {cfg.name} has BLOCK_D={meta['BLOCK_D']}; with 128x128 block weight "
            f"scales BLOCK_D must divide {SCALE_BLOCK} (one scale per tile and K block)"
        )
    n_tiles = cdiv(t, meta["BLOCK_T"]) * cdiv(d, meta["BLOCK_D"])
    if meta.get("PATH", 0) == 1:
        _launch_decode(cfg, meta, n_tiles, x, sa, w, sw, out, sa_kind, sw_kind, per_row)
        return
    split = meta["SPLIT_R"]
    sem = SEMAPHORES.get(x.device, n_tiles * g) if split > 1 else None
    if sem is None:  # no counters (first call inside a graph capture, or too many tiles): no split
        split = 1
        meta["SPLIT_R"] = 1
    ws = torch.empty((split, t, g, d), device=x.device, dtype=torch.float32) if split > 1 else out
    _fp8_einsum_kernel[(n_tiles, g, split)](
        out,
        ws,
        sem if sem is not None else out,
        *_kernel_args(x, sa, w, sw, out),
        SA_KIND=sa_kind,
        SW_KIND=sw_kind,
        SW_PER_ROW=per_row,
        **meta,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _kernel_args(
    x: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, out: torch.Tensor
) -> tuple[object, ...]:
    """Both kernels' operand arguments after their three output pointers (out, the split-K
    workspace, the semaphores): operands, sizes T, D, R, strides, and the output's element count,
    the same for every path."""
    t, g, r = x.shape
    d = w.shape[1]
    return (
        x, sa, w, sw, t, d, r,
        out.stride(0), out.stride(1), x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        sa.stride(0), sa.stride(1), sa.stride(2), sw.stride(0), sw.stride(1), sw.stride(2),
        t * g * d,
    )  # fmt: skip


def rows_repeat_in_blocks(sw: torch.Tensor) -> torch.Tensor | None:
    """Whether per-row weight scales repeat one value on every row of each 128-row block.

    Args:
        sw: per-row weight scales ``[G, D, Ks]`` of any encoding and strides (raw entries are
            compared: packed int32 words, exponent bytes or fp32 values; a NaN never matches).
    Returns:
        A 0-d bool tensor on ``sw``'s device (no host sync), or ``None`` when D is not a multiple
        of 128 (no block view exists).
    """
    g, d, ks = sw.shape
    if d % SCALE_BLOCK != 0:
        return None
    x = sw.view(g, d // SCALE_BLOCK, SCALE_BLOCK, ks)  # splitting one dim: a view for any strides
    return (x == x[:, :, :1, :]).all()


class _RowBlockCheck:
    """One weight-scale tensor's :func:`rows_repeat_in_blocks`, copied to the host without a
    sync: ``storage`` and ``version`` say which values it describes."""

    __slots__ = ("storage", "version", "event", "host", "repeat")

    def __init__(
        self,
        storage: weakref.ref[torch.UntypedStorage],
        version: int,
        event: torch.cuda.Event,
        host: torch.Tensor,
    ) -> None:
        self.storage = storage
        self.version = version
        self.event = event
        self.host = host
        self.repeat: bool | None = None


#: Per weight-scale tensor (keyed by its pointer, shape, strides and dtype): the check above. An
#: entry is valid while the tensor's storage is the one it was made for (a weak reference, so a new
#: tensor at a freed address is checked anew) and its version counter is unchanged (in-place writes
#: through the tensor or its views bump it; writes through ``.data`` do not and are not seen).
_ROW_BLOCK_CHECKS: dict[tuple[object, ...], _RowBlockCheck] = {}


def block_scales_view(sw: torch.Tensor) -> torch.Tensor | None:
    """``sw[:, ::128, :]`` when per-row weight scales ``sw [G, D, Ks]`` are known to repeat
    one value on every row of each 128-row block (DeepGEMM's per-row copies of 128x128 block
    scales, the layout GB10 serves); else ``None``.

    On the CPU (Triton's interpreter) the check runs in the call and answers at once. On a GPU
    the first call for a tensor starts :func:`rows_repeat_in_blocks` on the current stream and
    an asynchronous copy of its answer to pinned host memory, and returns ``None``; a later call
    returns the view once that copy has landed (``torch.cuda.Event.query``). No call syncs the
    host; none starts a check or queries an event while the stream is capturing a CUDA graph
    (an unanswered tensor then keeps ``None``). Reading the scales as block scales gives the same
    bits as reading them per row (each element's scale is the same product ``sa * sw``), so the
    answer changes the speed of a call, never its output.
    """
    if not sw.is_cuda:
        repeat = rows_repeat_in_blocks(sw)
        return sw[:, ::SCALE_BLOCK, :] if repeat is not None and bool(repeat) else None
    key = (sw.data_ptr(), tuple(sw.shape), sw.stride(), sw.dtype, sw.device)
    storage = sw.untyped_storage()
    entry = _ROW_BLOCK_CHECKS.get(key)
    if entry is not None and (entry.storage() is not storage or entry.version != sw._version):
        entry = None
    capturing = torch.cuda.is_current_stream_capturing()
    if entry is None:
        if capturing:
            return None
        repeat = rows_repeat_in_blocks(sw)
        if repeat is None:
            return None
        host = torch.empty((), dtype=torch.bool, pin_memory=True)
        host.copy_(repeat, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(sw.device))  # the stream the check ran on

        def forget(_: weakref.ref[torch.UntypedStorage], key: tuple[object, ...] = key) -> None:
            _ROW_BLOCK_CHECKS.pop(key, None)

        _ROW_BLOCK_CHECKS[key] = _RowBlockCheck(weakref.ref(storage, forget), sw._version, event, host)
        return None
    if entry.repeat is None:
        if capturing or not entry.event.query():
            return None
        entry.repeat = bool(entry.host)
    return sw[:, ::SCALE_BLOCK, :] if entry.repeat else None


def _plan(
    x: torch.Tensor, sw: torch.Tensor, sa_kind: int, sw_kind: int, per_row: bool
) -> tuple[KernelConfig, torch.Tensor, bool]:
    """The public dispatch's choice for operands as :func:`_prepare` returns them: ``(config, sw,
    per_row)``, where per-row weight scales that repeat their 128-row block's value
    (:func:`block_scales_view`) come back as the block view with ``per_row`` False (same bits)."""
    if per_row:
        blocks = block_scales_view(sw)
        if blocks is not None:  # rows repeat 128-row blocks: the block-scale plan, same bits
            sw, per_row = blocks, False
    cfg = select_fp8_einsum_config(x.shape[0], sa_kind == _SCALE_FP32 and sw_kind == _SCALE_FP32)
    return cfg, sw, per_row


def _launch_mx(cfg, meta, x, sa, w, sw, out, sa_kind, sw_kind, per_row) -> None:
    """The block-scaled path (``_fp8_einsum_mx_kernel``) and, for its decode tile, the PATH 2
    split sum.

    Raises:
        ValueError: R is not a multiple of the config's BLOCK_K.
    """
    t, g, r = x.shape
    d = w.shape[1]
    bk = meta["BLOCK_K"]
    if r % bk != 0:
        raise ValueError(f"fp8_einsum: config {cfg.name} has BLOCK_K={bk}; R={r} must be a multiple of it")
    if meta["ONE_TILE"]:
        meta["SPLIT_R"] = r // bk
    if _kernels_interpreted():  # Triton's interpreter has no griddepcontrol
        meta["USE_PDL"] = False
    split = meta["SPLIT_R"]
    ws, sem = _split_workspace(split, t, g, d, out)
    pdl = {"launch_pdl": True} if meta["USE_PDL"] else {}
    args = _kernel_args(x, sa, w, sw, out)
    kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
    n_tiles = cdiv(t, meta["BLOCK_T"]) * cdiv(d, meta["BLOCK_D"])
    _fp8_einsum_mx_kernel[(n_tiles, g, split)](
        out, ws, sem, *args, **kinds, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl
    )
    if split > 1:
        scfg = make_config(cfg.name, cfg.kernel, cfg.num_warps, cfg.num_stages, **meta)
        _launch_split_sum(scfg, t, g, d, out, ws, sem, args, kinds, pdl)


def _launch_decode(cfg, meta, n_tiles, x, sa, w, sw, out, sa_kind, sw_kind, per_row) -> None:
    """PATH 1 (and its PATH 2 split sum when R is split): see ``_decode_tile``."""
    t, g, r = x.shape
    d = w.shape[1]
    if _kernels_interpreted():  # Triton's interpreter has no griddepcontrol
        meta["USE_PDL"] = False
        cfg = make_config(cfg.name, cfg.kernel, cfg.num_warps, cfg.num_stages, **meta)
    split = cdiv(r // SCALE_BLOCK, meta["KB_PER"])
    meta["SPLIT_R"] = split
    ws, sem = _split_workspace(split, t, g, d, out)
    pdl = {"launch_pdl": True} if meta["USE_PDL"] else {}
    args = _kernel_args(x, sa, w, sw, out)
    kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
    _fp8_einsum_kernel[(n_tiles, g, split)](
        out, ws, sem, *args, **kinds, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl
    )
    if split > 1:
        _launch_split_sum(
            cfg if cfg["SPLIT_R"] == split else _with_split(cfg, split),
            t,
            g,
            d,
            out,
            ws,
            sem,
            args,
            kinds,
            pdl,
        )


def _split_workspace(
    split: int, t: int, g: int, d: int, out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's (workspace, semaphore) pointers: with K in ``split`` > 1 parts, fp32 partials
    ``[split, T, G, D]`` and the same memory as an int32 pointer (unused by PATH 1 and the
    block-scaled kernel; the AOT build declares int32); unsplit, ``out`` for both."""
    if split == 1:
        return out, out
    ws = torch.empty((split, t, g, d), device=out.device, dtype=torch.float32)
    return ws, ws.view(torch.int32)


def _launch_split_sum(cfg, t, g, d, out, ws, sem, args, kinds, pdl) -> None:
    """PATH 2 after a PATH 1 or block-scaled decode launch that stored ``cfg["SPLIT_R"]`` fp32
    partials."""
    scfg = split_sum_config(cfg)
    _fp8_einsum_kernel[(cdiv(d, SUM_BLOCK), g, t)](
        out,
        ws,
        sem,
        *args,
        **kinds,
        **scfg.constexprs(),
        num_warps=scfg.num_warps,
        num_stages=scfg.num_stages,
        **pdl,
    )


def _with_split(cfg: KernelConfig, split: int) -> KernelConfig:
    meta = cfg.constexprs()
    meta["SPLIT_R"] = split
    return make_config(cfg.name, cfg.kernel, cfg.num_warps, cfg.num_stages, **meta)


@torch.library.custom_op("sparkpair::fp8_einsum", mutates_args=("out",))
def _fp8_einsum_op(
    equation: str,
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out: torch.Tensor,
    recipe: list[int],
) -> None:
    fp8_einsum_with_config(equation, (a, sa), (w, sw), out, tuple(recipe) if recipe else None)  # type: ignore[arg-type]


@_fp8_einsum_op.register_fake
def _fp8_einsum_fake(
    equation: str,
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out: torch.Tensor,
    recipe: list[int],
) -> None:
    return None


def fp8_einsum(
    equation: str,
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    recipe: tuple[int, int, int] | None = None,
) -> None:
    """``out[t,g,d] = sum_r a[t,g,r] sa w[g,d,r] sw`` in place, vLLM/DeepGEMM calling convention.

    Args:
        equation: must be ``"bhr,hdr->bhd"``.
        a: ``(a, sa)``: e4m3fn ``[T, G, R]`` and its per-(token, 128-wide K block) scales.
        b: ``(w, sw)``: e4m3fn ``[G, D, R]`` and its block scales (see the module docstring).
        out: bf16 ``[T, G, D]``, written in place.
        recipe: ``(1, 128, 128)`` or ``(1, 1, 128)``; ``None`` infers it from ``sw``'s shape.
    Raises:
        ValueError: another equation, wrong dtypes/shapes/strides, unsupported scale encoding
            or recipe, mixed devices, CPU tensors without ``TRITON_INTERPRET=1``.
        RuntimeError: Triton is not installed.
    Runs through ``torch.ops.sparkpair.fp8_einsum``; no host sync; graph-capturable.
    """
    (x, sa), (w, sw) = a, b
    torch.ops.sparkpair.fp8_einsum(equation, x, sa, w, sw, out, list(recipe) if recipe is not None else [])
