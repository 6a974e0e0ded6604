"""On-device runners of the serve-path candidates (needs CUDA, torch and vLLM 0.33).

Each ``<path>_<candidate>(shape) -> Trial`` builds operands at ``shape`` in the layouts vLLM
0.33 hands the kernel on the serve path, and a reference computed from the exact dequantized
inputs. References are fp32 GEMMs of values that are exact in fp32 (e4m3/e2m1 times powers of
two), so their own error (~1e-6 relative) is far below every path's tolerance; fp64 would cost
minutes on GB10's fp64 units at the prefill shapes. Scales are powers of two (UE8M0), as the
DSv4 checkpoint's are, so every candidate sees the same exact operands.

Nothing here runs on a CPU: the CPU tiers test the registry, the choice and the fault paths
with injected candidates (tests/stack/test_serve_path_probe.py).
"""

from __future__ import annotations

from typing import Any

import torch

from ..numerics import decode_ue8m0, mn_major_tma, pack_ue8m0, rel_fro
from .choice import Shape, Trial

_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _fp8(rows: int, k: int, gen: torch.Generator, scale: float) -> torch.Tensor:
    return (
        (torch.randn(rows, k, device="cuda", generator=gen) * scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    )


def _act(t: int, k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """fp8 activation ``[t, k]``, exponent bytes ``[t, k/128]``, fp32 dequantized ``[t, k]``."""
    x = _fp8(t, k, gen, 200.0)
    ea = torch.randint(119, 123, (t, k // 128), device="cuda", generator=gen, dtype=torch.int32)
    return x, ea, x.float() * decode_ue8m0(ea).repeat_interleave(128, -1)


def _holder() -> dict[str, Any]:
    return {}


# --------------------------------------------------------------------------- FP8 block linears


def _linear_operands(shape: Shape) -> dict[str, Any]:
    t, n, k = max(shape.tokens, 1), shape.dim("n"), shape.dim("k")
    gen = _gen(11)
    x, ea, x_deq = _act(t, k, gen)
    w = _fp8(n, k, gen, 100.0)
    ew = torch.randint(115, 119, (n // 128, k // 128), device="cuda", generator=gen, dtype=torch.int32)
    sw = decode_ue8m0(ew)
    w_deq = w.float() * sw.repeat_interleave(128, 0).repeat_interleave(128, 1)
    return {
        "t": t,
        "n": n,
        "k": k,
        "x": x,
        "ea": ea,
        "sa": decode_ue8m0(ea),
        "w": w,
        "ew": ew,
        "sw": sw,
        "ref": x_deq @ w_deq.t(),
    }


def _linear_trial(op: dict[str, Any], fn: Any) -> Trial:
    h = _holder()

    def call() -> None:
        h["out"] = fn()

    return Trial(call, lambda: rel_fro(h["out"], op["ref"]))


def linear_deep_gemm(shape: Shape) -> Trial:
    """vLLM's ``fp8_gemm_nt`` with the weight scales from ``deepgemm_post_process_fp8_weight_block``
    and packed UE8M0 activation scales (MN-major, TMA-aligned), as DeepGemmFp8BlockScaledMMKernel."""
    from vllm.model_executor.layers.quantization.utils.fp8_utils import deepgemm_post_process_fp8_weight_block
    from vllm.utils.deep_gemm import fp8_gemm_nt

    op = _linear_operands(shape)
    wq, ws = deepgemm_post_process_fp8_weight_block(
        wq=op["w"].clone(), ws=op["ew"].to(torch.uint8), quant_block_shape=(128, 128), use_e8m0=True
    )
    sa = mn_major_tma(pack_ue8m0(op["ea"]))
    out = torch.empty(op["t"], op["n"], dtype=torch.bfloat16, device="cuda")

    def fn() -> torch.Tensor:
        fp8_gemm_nt((op["x"], sa), (wq, ws), out, is_deep_gemm_e8m0_used=True)
        return out

    return _linear_trial(op, fn)


def linear_triton(shape: Shape) -> Trial:
    """vLLM's ``w8a8_triton_block_scaled_mm`` (fp32 scales: activation ``[T, K/128]``, weight
    ``[N/128, K/128]``), as TritonFp8BlockScaledMMKernel."""
    from vllm.model_executor.layers.quantization.utils.fp8_utils import w8a8_triton_block_scaled_mm

    op = _linear_operands(shape)
    return _linear_trial(
        op,
        lambda: w8a8_triton_block_scaled_mm(
            op["x"], op["w"], op["sa"], op["sw"], [128, 128], output_dtype=torch.bfloat16
        ),
    )


def linear_cutlass(shape: Shape) -> Trial:
    """vLLM's CUTLASS block-scaled GEMM (``kernels/linear/scaled_mm/cutlass.py`` ``cutlass_scaled_mm``),
    activation scales column-major."""
    from vllm.model_executor.kernels.linear.scaled_mm.cutlass import cutlass_scaled_mm

    op = _linear_operands(shape)
    sa = op["sa"].t().contiguous().t()
    return _linear_trial(
        op, lambda: cutlass_scaled_mm(op["x"], op["w"], sa, op["sw"], [128, 128], torch.bfloat16)
    )


def linear_b12x(shape: Shape) -> Trial:
    """vLLM's B12X FP8 block-scaled GEMM (``kernels/linear/scaled_mm/b12x.py``), as
    B12xFp8BlockScaledMMKernel."""
    from vllm.model_executor.kernels.linear.scaled_mm import b12x

    op = _linear_operands(shape)
    sa = op["sa"].t().contiguous().t()
    return _linear_trial(
        op, lambda: b12x._run_b12x_fp8_block_scaled_mm(op["x"], op["w"], sa, op["sw"], torch.bfloat16)
    )


# --------------------------------------------------------------------------- MXFP4 MoE


def moe_deep_gemm(shape: Shape) -> Trial:
    """vLLM's ``m_grouped_fp8_fp4_gemm_nt_contiguous`` (one GEMM of DeepGemmFP4Experts): FP8
    activations with packed UE8M0 1x128 scales, MXFP4 weights (e2m1 packed as int8) whose 1x32
    UE8M0 scales went through ``deepgemm_post_process_weight_scale_block`` as vLLM's MXFP4 oracle
    does (``_pack_deepgemm_mxfp4_scales``); rows routed round-robin over the experts."""
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        deepgemm_post_process_weight_scale_block,
    )
    from vllm.utils.deep_gemm import (
        get_mk_alignment_for_contiguous_layout,
        m_grouped_fp8_fp4_gemm_nt_contiguous,
        mk_alignment_scope,
    )

    t, n, k, e_count, topk = (
        shape.tokens,
        shape.dim("n"),
        shape.dim("k"),
        shape.dim("experts"),
        shape.dim("topk"),
    )
    gen = _gen(12)
    align = int(get_mk_alignment_for_contiguous_layout()[0])
    routed = t * topk
    counts = [routed // e_count + (1 if i < routed % e_count else 0) for i in range(e_count)]
    layout: list[int] = []
    for e, c in enumerate(counts):
        padded = (c + align - 1) // align * align
        layout += [e] * c + [-1] * (padded - c)
    m_sum = len(layout)
    grouped = torch.tensor(layout, dtype=torch.int32, device="cuda")
    x, ea, x_deq = _act(m_sum, k, gen)
    packed = torch.randint(0, 256, (e_count, n, k // 2), device="cuda", generator=gen, dtype=torch.int32)
    lut = torch.tensor(_E2M1 + tuple(-v for v in _E2M1), device="cuda")
    w_vals = torch.stack((lut[packed & 0xF], lut[(packed >> 4) & 0xF]), -1).flatten(-2)  # low nibble first
    ew = torch.randint(120, 124, (e_count, n, k // 32), device="cuda", generator=gen, dtype=torch.int32)
    w_deq = w_vals * decode_ue8m0(ew).repeat_interleave(32, -1)
    ws = deepgemm_post_process_weight_scale_block(
        ws=ew.to(torch.uint8), mn=n, k=k, quant_block_shape=(1, 32), num_groups=e_count
    )
    w_i8 = packed.to(torch.uint8).view(torch.int8)
    sa = mn_major_tma(pack_ue8m0(ea))
    out = torch.zeros(m_sum, n, dtype=torch.bfloat16, device="cuda")
    valid = grouped >= 0
    ref = torch.zeros(m_sum, n, device="cuda")
    for e in range(e_count):
        rows = grouped == e
        ref[rows] = x_deq[rows] @ w_deq[e].t()

    def call() -> None:
        with mk_alignment_scope(align):
            m_grouped_fp8_fp4_gemm_nt_contiguous(
                (x, sa), (w_i8, ws), out, grouped, use_psum_layout=False, recipe_a=(1, 128), recipe_b=(1, 32)
            )

    return Trial(call, lambda: rel_fro(out[valid], ref[valid]))


def moe_unprobed(shape: Shape) -> Trial:
    """The other MXFP4 MoE backends vLLM offers are not run by this probe (they need a whole
    FusedMoE layer built); the candidate is recorded as not shown correct."""
    raise NotImplementedError(
        "sparkpair probe has no on-device runner for this MoE backend (it needs a whole vLLM FusedMoE "
        "layer); it is never chosen by evidence, only by SPARKPAIR_SERVE_PATHS"
    )


# --------------------------------------------------------------------------- mHC prenorm GEMM


def _mhc_operands(shape: Shape) -> dict[str, Any]:
    t, k, n = shape.tokens, shape.dim("k"), shape.dim("n")
    gen = _gen(13)
    x = torch.randn(t, k, device="cuda", generator=gen).to(torch.bfloat16)
    fn = torch.randn(n, k, device="cuda", generator=gen) * k**-0.5
    xd = x.double()
    return {
        "t": t,
        "k": k,
        "n": n,
        "x": x,
        "fn": fn,
        "ref_out": xd @ fn.double().t(),
        "ref_sq": xd.square().sum(-1),
    }


def _mhc_trial(op: dict[str, Any], n_splits: int, fn: Any) -> Trial:
    out = torch.empty(n_splits, op["t"], op["n"], dtype=torch.float32, device="cuda")
    sq = torch.empty(n_splits, op["t"], dtype=torch.float32, device="cuda")

    def call() -> None:
        fn(op["x"], op["fn"], out, sq, n_splits)

    return Trial(call, lambda: max(rel_fro(out.sum(0), op["ref_out"]), rel_fro(sq.sum(0), op["ref_sq"])))


def mhc_deep_gemm(shape: Shape) -> Trial:
    """vLLM's ``tf32_hc_prenorm_gemm`` with the split count vLLM computes (``compute_num_split``)."""
    from vllm.model_executor.kernels.mhc.tilelang_kernels import compute_num_split
    from vllm.utils.deep_gemm import tf32_hc_prenorm_gemm

    op = _mhc_operands(shape)
    n_splits = compute_num_split(64, op["k"], (op["t"] + 63) // 64)
    return _mhc_trial(op, n_splits, tf32_hc_prenorm_gemm)


def mhc_tilelang(shape: Shape) -> Trial:
    """vLLM's TileLang prenorm GEMM (one split), the path ``VLLM_USE_DEEP_GEMM=0`` takes."""
    from vllm.model_executor.kernels.mhc.tilelang_kernels import _HC_PRENORM_GEMM_TILELANG_KERNEL as kernel

    op = _mhc_operands(shape)
    hidden, hc = shape.dim("hidden"), shape.dim("hc_mult")
    return _mhc_trial(op, 1, lambda x, fn, out, sq, _n: kernel(x, fn, out, sq, hidden, hc))


# --------------------------------------------------------------------------- indexer MQA logits


def indexer_deep_gemm(shape: Shape) -> Trial:
    """The indexer's logits at ``shape``: the paged decode form when ``shape.dim("paged")``, else
    the prefill form (:func:`indexer_paged_deep_gemm`, :func:`indexer_dense_deep_gemm`)."""
    return indexer_paged_deep_gemm(shape) if shape.dim("paged") else indexer_dense_deep_gemm(shape)


def indexer_paged_deep_gemm(shape: Shape) -> Trial:
    """vLLM's ``get_paged_mqa_logits_metadata`` + ``fp8_fp4_paged_mqa_logits`` for ``T`` decode
    requests (one query row each) over ``kv`` cached tokens each, in vLLM's paged FP8 indexer
    cache: pages of 64 tokens (``get_paged_mqa_page_sizes`` on family 120), each page holding its
    64 x D e4m3 values and then their 64 fp32 scales (``[pages, 64, 1, D + 4]`` uint8), pages
    placed through a shuffled block table. Reference: ``sum_h w[b,h] * relu(s[n] * q[b,h]·k[n])``."""
    from vllm.utils.deep_gemm import fp8_fp4_paged_mqa_logits, get_num_sms, get_paged_mqa_logits_metadata

    b, h, d, ctx, page = shape.tokens, shape.dim("heads"), shape.dim("d"), shape.dim("kv"), 64
    gen = _gen(16)
    per_req = ctx // page
    pages = b * per_req
    vals = (
        (torch.randn(pages, page, d, device="cuda", generator=gen) * 2)
        .clamp(-448, 448)
        .to(torch.float8_e4m3fn)
    )
    exps = torch.randint(120, 124, (pages, page), device="cuda", generator=gen, dtype=torch.int32)
    scale = decode_ue8m0(exps)
    cache = torch.empty(pages, page * (d + 4), dtype=torch.uint8, device="cuda")
    cache[:, : page * d] = vals.view(torch.uint8).reshape(pages, page * d)
    cache[:, page * d :] = scale.view(torch.uint8).reshape(pages, page * 4)
    cache = cache.view(pages, page, 1, d + 4)
    order = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32)
    block_table = order.view(b, per_req).contiguous()
    q = (torch.randn(b, 1, h, d, device="cuda", generator=gen) * 2).clamp(-448, 448).to(torch.float8_e4m3fn)
    weights = torch.randn(b, h, device="cuda", generator=gen) * h**-0.5
    ctx_lens = torch.full((b, 1), ctx, dtype=torch.int32, device="cuda")
    keys = vals.float()[block_table.long()].reshape(b, ctx, d)  # logical order per request
    k_scale = scale[block_table.long()].reshape(b, ctx)
    scores = torch.einsum("bhd,bnd->bhn", q[:, 0].float(), keys) * k_scale.unsqueeze(1)
    ref = (scores.relu() * weights.unsqueeze(-1)).sum(1)  # [b, ctx]
    meta = get_paged_mqa_logits_metadata(ctx_lens, page, get_num_sms())
    h_ = _holder()

    def call() -> None:
        h_["out"] = fp8_fp4_paged_mqa_logits((q, None), cache, weights, ctx_lens, block_table, meta, ctx)

    return Trial(call, lambda: rel_fro(h_["out"].float()[:, :ctx], ref))


def indexer_dense_deep_gemm(shape: Shape) -> Trial:
    """vLLM's ``fp8_fp4_mqa_logits`` (FP8 Q with ``q_scale=None``, FP8 K with fp32 per-token
    scales, fp32 head weights; SM120 form), each query row seeing a causal prefix of the keys.
    Reference: ``sum_h w[t,h] * relu(k_scale[n] * q[t,h]·k[n])`` over the row's key range."""
    from vllm.utils.deep_gemm import fp8_fp4_mqa_logits

    t, h, d, n_kv = shape.tokens, shape.dim("heads"), shape.dim("d"), shape.dim("kv")
    gen = _gen(14)
    q = (torch.randn(t, h, d, device="cuda", generator=gen) * 2).clamp(-448, 448).to(torch.float8_e4m3fn)
    kv = (torch.randn(n_kv, d, device="cuda", generator=gen) * 2).clamp(-448, 448).to(torch.float8_e4m3fn)
    k_scale = decode_ue8m0(torch.randint(120, 124, (n_kv,), device="cuda", generator=gen, dtype=torch.int32))
    weights = torch.randn(t, h, device="cuda", generator=gen) * h**-0.5
    ks = torch.zeros(t, dtype=torch.int32, device="cuda")
    ke = torch.arange(n_kv - t + 1, n_kv + 1, dtype=torch.int32, device="cuda")
    scores = torch.einsum("thd,nd->thn", q.float(), kv.float()) * k_scale
    full = (scores.relu() * weights.unsqueeze(-1)).sum(1)  # [t, n_kv]
    cols = torch.arange(n_kv, device="cuda")
    mask = cols.unsqueeze(0) < ke.unsqueeze(1)
    h_ = _holder()

    def call() -> None:
        h_["out"] = fp8_fp4_mqa_logits((q, None), (kv, k_scale), weights, ks, ke, n_kv)

    def check() -> float:
        out = h_["out"].float()
        return rel_fro(out[mask], full[mask])

    return Trial(call, check)


# --------------------------------------------------------------------------- wo_a scale transform


def wo_a_scale_deep_gemm(shape: Shape) -> Trial:
    """vLLM's ``deepgemm_post_process_weight_scale_block`` on wo_a's ``[G, MN/128, K/128]`` UE8M0
    block scales (recipe (1,128,128)), the load-time transform of the DSv4 o_proj weight. The
    check is exact: every row's decoded scale must equal its 128x128 block's (error = fraction of
    entries that differ)."""
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        deepgemm_post_process_weight_scale_block,
    )

    g, mn, k = shape.dim("groups"), shape.dim("mn"), shape.dim("k")
    gen = _gen(15)
    e = torch.randint(115, 119, (g, mn // 128, k // 128), device="cuda", generator=gen, dtype=torch.int32)
    want = decode_ue8m0(e).repeat_interleave(128, 1)  # [g, mn, k/128] per row
    h_ = _holder()

    def call() -> None:
        h_["out"] = deepgemm_post_process_weight_scale_block(
            ws=e.to(torch.uint8), mn=mn, k=k, quant_block_shape=(128, 128), num_groups=g
        )

    def check() -> float:
        out = h_["out"]
        if out.dtype == torch.int32:
            shifts = torch.arange(4, device=out.device, dtype=torch.int32) * 8
            b = ((out.unsqueeze(-1) >> shifts) & 0xFF).flatten(-2)[..., : k // 128]
            got = decode_ue8m0(b)
        else:
            got = out.float()
            if got.shape != want.shape:
                got = got.repeat_interleave(128, 1)
        if got.shape != want.shape:
            return float("inf")
        return float((got != want).float().mean())

    return Trial(call, check)
