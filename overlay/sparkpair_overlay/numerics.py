"""fp8 operands, fp64 references, UE8M0 packing, error metrics and CUDA-graph timing.

One module for the numerics that the probe (:mod:`sparkpair_overlay.probe`), the GPU tests
(``tests/gpu/``) and the kernel benchmarks (``benchmarks/``) share, so the three measure the
same thing the same way. It imports torch at module level: ``import sparkpair_overlay`` does
not import it (only the probe, the tests and the benchmarks do), so the package stays
torch-free for the slim client.

Scale encodings (vLLM's DeepSeek-V4 o_proj, docs/kernels.md "fp8_einsum"): a UE8M0 scale is
an exponent byte ``e`` meaning ``2**(e - 127)``; four of them pack into one ``int32`` word,
block ``k`` in byte ``k % 4`` of word ``k // 4``; activation scales are stored MN-major with
the row count padded to a multiple of 4 (TMA-aligned: 16 B of 4-byte elements). The decoder,
:func:`decode_ue8m0`, is the o_proj kernel module's own, re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch

from .kernels.fp8_einsum import decode_ue8m0

__all__ = [
    "FP8_MAX",
    "Fp8Operands",
    "assert_close_verbose",
    "decode_ue8m0",
    "fp8_einsum_reference",
    "graph_time_us",
    "make_fp8_operands",
    "max_rel",
    "mn_major_tma",
    "pack_ue8m0",
    "rel_fro",
]

#: Largest finite ``float8_e4m3fn`` value (OCP FP8 spec; ``torch.finfo(torch.float8_e4m3fn).max``).
FP8_MAX = 448.0

#: ``(a, sa, w, sw, sa_f32, sw_f32)`` as :func:`make_fp8_operands` returns them.
Fp8Operands = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]

Encoding = Literal["fp32", "int32", "int32-bcast", "e8m0"]


# --------------------------------------------------------------------------- error metrics


def rel_fro(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``‖actual − expected‖_F / ‖expected‖_F`` in fp64; ``inf`` when ``actual`` has NaN/inf.

    Shapes must broadcast; any dtype (upcast to fp64).
    """
    a = actual.double()
    if not bool(torch.isfinite(a).all()):
        return float("inf")
    e = expected.double()
    return float((a - e).norm() / e.norm().clamp_min(1e-300))


def max_rel(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """``max |actual − expected| / max |expected|`` in fp64 (the router's "max relative error")."""
    a, e = actual.double(), expected.double()
    return float((a - e).abs().max() / e.abs().max().clamp_min(1e-300))


def assert_close_verbose(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    max_print: int = 5,
    what: str = "",
) -> None:
    """Elementwise ``|a − e| <= atol + rtol·|e|`` with NaN/inf agreeing exactly.

    Raises:
        AssertionError: naming the mismatch count, NaN/inf disagreements, the largest
            difference and the first ``max_print`` mismatching indices with both values.
    """
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    if a.shape != e.shape:
        raise AssertionError(f"{what}: shape {tuple(a.shape)} != expected {tuple(e.shape)}")
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    inf_a, inf_e = torch.isinf(a), torch.isinf(e)
    bad_special = (nan_a != nan_e) | (inf_a != inf_e) | (inf_a & inf_e & (torch.sign(a) != torch.sign(e)))
    finite = ~(nan_a | nan_e | inf_a | inf_e)
    diff = (a - e).abs()
    bad = bad_special | (finite & (diff > atol + rtol * e.abs()))
    n_bad = int(bad.sum())
    if n_bad == 0:
        return
    lines = [f"{what}: {n_bad} / {a.numel()} elements mismatch (rtol={rtol}, atol={atol})"]
    lines.append(
        f"  NaN disagreements: {int((nan_a != nan_e).sum())}, inf disagreements: "
        f"{int((inf_a != inf_e).sum())}"
    )
    if finite.any():
        lines.append(
            f"  max |diff| = {diff[finite].max().item():.4g}; max |expected| = "
            f"{e[finite].abs().max().item():.4g}"
        )
    for i in bad.nonzero()[:max_print].tolist():
        t = tuple(i)
        lines.append(f"  at {t}: actual {a[t].item():.8g}, expected {e[t].item():.8g}")
    raise AssertionError("\n".join(lines))


# --------------------------------------------------------------------------- UE8M0 scales


def pack_ue8m0(exps: torch.Tensor) -> torch.Tensor:
    """``[..., Kb]`` exponent bytes -> ``[..., ceil(Kb/4)]`` int32, block k in byte k%4 of word k//4.

    A last word that is not full is padded with zero bytes.
    """
    kb = exps.shape[-1]
    e = torch.nn.functional.pad(exps.to(torch.int64), (0, (-kb) % 4)).view(*exps.shape[:-1], -1, 4)
    word = e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def mn_major_tma(x: torch.Tensor) -> torch.Tensor:
    """The same values in vLLM's MN-major, TMA-aligned scale layout.

    ``[M, C]`` -> strides ``(1, M4)``; ``[M, B, C]`` -> strides ``(1, C·M4, M4)``, with
    ``M4 = 4·ceil(M/4)``. Padding rows are zero, as vLLM's activation quantisation leaves them
    (docs/kernels.md "fp8_einsum").
    """
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(1) if squeeze else x
    m, b, c = x3.shape
    m4 = (m + 3) // 4 * 4
    buf = torch.zeros(b * c * m4, dtype=x.dtype, device=x.device)
    out = buf.as_strided((b, m, c), (c * m4, 1, m4)).transpose(0, 1)
    out.copy_(x3)
    return out.squeeze(1) if squeeze else out


# --------------------------------------------------------------------------- fp8_einsum operands


def make_fp8_operands(
    t: int,
    g: int,
    d: int,
    r: int,
    recipe: tuple[int, int, int],
    encoding: Encoding,
    device: str = "cuda",
    seed: int = 0,
    group_major: bool = True,
) -> Fp8Operands:
    """Random fp8 operands and scales for ``bhr,hdr->bhd`` plus the decoded fp32 scales.

    Args:
        t, g, d, r: tokens, groups, output rows per group, reduction length (a multiple of 128).
        recipe: ``(1, 1, 128)`` per-row weight scales or ``(1, 128, 128)`` per-block.
        encoding: ``"fp32"`` (sa MN-major TMA-aligned fp32 when ``group_major``) | ``"int32"``
            (packed UE8M0; sa MN-major TMA-aligned, sw MN-major) | ``"int32-bcast"`` (the same,
            with per-row recipes drawing one weight scale per 128x128 block and repeating it on
            every row of the block, as DeepGEMM's weight transform stores the checkpoint's block
            scales on sm_10x/sm_12x) | ``"e8m0"`` (``torch.float8_e8m0fnu``, one byte a block).
        device: where the operands go (drawn on the CPU from ``seed``, so identical everywhere).
        group_major: ``a`` is ``[G, T, R]`` transposed to ``[T, G, R]`` (as vLLM's
            ``fused_inv_rope_fp8_quant`` leaves it), else contiguous ``[T, G, R]``.

    Exponents are powers of two near the real scales: activations ``2**-8 .. 2**-5``, weights
    ``2**-12 .. 2**-9``.

    Returns:
        ``(a e4m3 [T,G,R], sa, w e4m3 [G,D,R], sw, sa_f32 [T,G,R/128], sw_f32 [G, D or D/128, R/128])``.

    Raises:
        ValueError: an unknown ``encoding``.
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    kb = r // 128
    a_src = torch.randn(g, t, r, generator=gen) * 200
    a = a_src.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(device)
    a = a.transpose(0, 1) if group_major else a.transpose(0, 1).contiguous()
    w_src = torch.randn(g, d, r, generator=gen) * 100
    w = w_src.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).to(device)
    per_row = recipe[1] == 1
    ea = torch.randint(127 - 8, 127 - 4, (t, g, kb), generator=gen)
    block_rows = per_row and encoding == "int32-bcast"
    rows = d if per_row and not block_rows else (d + 127) // 128
    ew = torch.randint(127 - 12, 127 - 8, (g, rows, kb), generator=gen)
    if block_rows:
        ew = ew.repeat_interleave(128, 1)[:, :d]
    sa_f = decode_ue8m0(ea).to(device)
    sw_f = decode_ue8m0(ew).to(device)
    if encoding == "fp32":
        sa = mn_major_tma(sa_f) if group_major else sa_f
        sw = sw_f.contiguous()
    elif encoding in ("int32", "int32-bcast"):
        sa = mn_major_tma(pack_ue8m0(ea).to(device))
        sw = pack_ue8m0(ew).to(device).transpose(1, 2).contiguous().transpose(1, 2)  # MN-major
    elif encoding == "e8m0":
        sa = ea.to(torch.uint8).view(torch.float8_e8m0fnu).to(device)
        sw = ew.to(torch.uint8).view(torch.float8_e8m0fnu).to(device)
    else:
        raise ValueError(f"encoding={encoding!r}; wanted one of fp32, int32, int32-bcast, e8m0")
    return a, sa, w, sw, sa_f, sw_f


def fp8_einsum_reference(
    a: torch.Tensor, sa_f: torch.Tensor, w: torch.Tensor, sw_f: torch.Tensor
) -> torch.Tensor:
    """fp64 ``out[t,g,d] = Σ_r a·sa · w·sw`` from the decoded fp32 scales.

    Shapes: ``a [T,G,R]``, ``sa_f [T,G,R/128]``, ``w [G,D,R]``, ``sw_f [G,D,R/128]`` (per row)
    or ``[G,D/128,R/128]`` (per block). Returns fp64 ``[T,G,D]``.
    """
    r = a.shape[-1]
    d = w.shape[1]
    a64 = a.double() * sa_f.double().repeat_interleave(128, -1)[..., :r]
    swx = sw_f.double().repeat_interleave(128, -1)[..., :r]
    if sw_f.shape[1] != d:
        swx = swx.repeat_interleave(128, 1)[:, :d]
    return torch.einsum("tgr,gdr->tgd", a64, w.double() * swx)


# --------------------------------------------------------------------------- timing


def graph_time_us(
    fn: Callable[[int], object],
    calls: int = 50,
    reps: int = 30,
    warmup: int = 3,
    stream: torch.cuda.Stream | None = None,
) -> tuple[float, float, float]:
    """(p20, p50, p80) µs per call of ``fn(i)`` (``i`` = call index) under CUDA-graph replay.

    ``calls`` invocations are captured in one graph; the graph is replayed ``reps`` times, each
    replay timed with CUDA events; a replay's per-call time is its elapsed time / ``calls``.
    ``warmup``: eager calls ``fn(0) .. fn(warmup-1)`` (at least 2) on a side stream before
    capture (compile, allocator, per-input preparation: pass the number of input sets ``fn``
    rotates over so every set is seen eagerly, as vLLM's profile run does), a device sync, and
    the same calls once more (as the eager warm-up runs vLLM makes before each graph capture),
    so a per-input check started by the first round (fp8_einsum's ``block_scales_view``) has
    answered before the capture. ``stream``: run the warm-up, the capture and the replays on it
    (a green context's stream: a graph keeps the SM set of the stream it was captured on, not the
    one it is replayed on); ``None``: a fresh side stream, and the replays on the current stream.

    Raises:
        RuntimeError: from torch when ``fn`` cannot be captured (a host sync, say).
    """
    s = stream if stream is not None else torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    for _ in range(2):
        with torch.cuda.stream(s):
            for i in range(max(2, warmup)):
                fn(i)
        torch.cuda.synchronize()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for i in range(calls):
            fn(i)
    replay = stream if stream is not None else torch.cuda.current_stream()
    with torch.cuda.stream(replay):
        g.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            g.replay()
            e1.record()
            e1.synchronize()
            times.append(e0.elapsed_time(e1) * 1000.0 / calls)
    del g
    q = torch.quantile(torch.tensor(times), torch.tensor([0.2, 0.5, 0.8])).tolist()
    return q[0], q[1], q[2]
