"""Numeric asserts that explain themselves (Liger-Kernel style) and fp64 references for our kernels.

``assert_close_verbose`` reports the mismatch count, the first mismatching indices with their
values, and NaN/inf disagreements, instead of a bare "not close".
"""

from __future__ import annotations

import torch


def assert_close_verbose(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    rtol: float,
    atol: float,
    max_print: int = 5,
    what: str = "",
) -> None:
    """Elementwise ``|a - e| <= atol + rtol * |e|``, NaN/inf must agree exactly; explain failures."""
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
    idx = bad.nonzero()[:max_print]
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
    for i in idx.tolist():
        t = tuple(i)
        lines.append(f"  at {t}: actual {a[t].item():.8g}, expected {e[t].item():.8g}")
    raise AssertionError("\n".join(lines))


def rel_fro(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """‖a − e‖_F / ‖e‖_F in fp64."""
    a, e = actual.double(), expected.double()
    return float((a - e).norm() / e.norm().clamp_min(1e-300))


def max_rel(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a − e| / max |e| in fp64 (the router's 'max relative error')."""
    a, e = actual.double(), expected.double()
    return float((a - e).abs().max() / e.abs().max().clamp_min(1e-300))


# ---------------------------------------------------------------- fp8_einsum operands and reference


def pack_ue8m0(exps: torch.Tensor) -> torch.Tensor:
    """[..., Kb] exponent bytes (int) -> [..., ceil(Kb/4)] int32, block k in byte k%4 of word k//4."""
    kb = exps.shape[-1]
    pad = (-kb) % 4
    e = torch.nn.functional.pad(exps.to(torch.int64), (0, pad)).view(*exps.shape[:-1], -1, 4)
    word = e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)
    word = torch.where(word >= 2**31, word - 2**32, word)
    return word.to(torch.int32)


def tma_mn_major(x: torch.Tensor) -> torch.Tensor:
    """[A, B, C] -> same values in vLLM's MN-major layout: strides (1, C*A4, A4), A4 = 4*ceil(A/4).

    Padding rows are zero, as vLLM's activation quant leaves them
    (docs/reference/vllm-code-paths.md#o_proj-scales).
    """
    a, b, c = x.shape
    a4 = (a + 3) // 4 * 4
    buf = torch.zeros(b * c * a4, dtype=x.dtype, device=x.device)
    out = buf.as_strided((b, a, c), (c * a4, 1, a4)).transpose(0, 1)
    out.copy_(x)
    return out


def make_fp8_operands(
    t: int,
    g: int,
    d: int,
    r: int,
    recipe: tuple[int, int, int],
    encoding: str,
    device: str = "cuda",
    seed: int = 0,
    group_major: bool = True,
):
    """Random fp8 operands and scales for ``bhr,hdr->bhd`` plus the decoded fp32 scales.

    encoding: "fp32" | "int32" (packed UE8M0; sa in the TMA-aligned MN-major layout, sw MN-major)
    | "int32-bcast" (the same, with per-row recipes drawing one weight scale per 128x128 block and
    repeating it on every row of the block, as DeepGEMM's weight transform stores the checkpoint's
    block scales on sm_10x/sm_12x, vllm-code-paths.md) | "e8m0" (torch.float8_e8m0fnu, one byte per
    block). Exponents are drawn so the scales are powers of two of the real scale (activations
    ~2**-8 .. 2**-4, weights ~2**-12 .. 2**-8).
    Returns (a, sa, w, sw, sa_f32 [T,G,Kb], sw_f32 [G, D or D/128, Kb]).
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    kb = r // 128
    a_src = torch.randn(g, t, r, generator=gen) * 200
    a = a_src.clamp(-448, 448).to(torch.float8_e4m3fn).to(device)
    a = a.transpose(0, 1) if group_major else a.transpose(0, 1).contiguous()
    w = (torch.randn(g, d, r, generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn).to(device)
    per_row = recipe[1] == 1
    ea = torch.randint(127 - 8, 127 - 4, (t, g, kb), generator=gen)
    block_rows = per_row and encoding == "int32-bcast"
    ew = torch.randint(
        127 - 12, 127 - 8, (g, d if per_row and not block_rows else (d + 127) // 128, kb), generator=gen
    )
    if block_rows:
        ew = ew.repeat_interleave(128, 1)[:, :d]
    from sparkpair_overlay.kernels.fp8_einsum import decode_ue8m0

    sa_f = decode_ue8m0(ea).to(device)
    sw_f = decode_ue8m0(ew).to(device)
    if encoding == "fp32":
        sa = tma_mn_major(sa_f) if group_major else sa_f
        sw = sw_f.contiguous()
    elif encoding in ("int32", "int32-bcast"):
        sa = tma_mn_major(pack_ue8m0(ea).to(device))
        sw = pack_ue8m0(ew).to(device)
        sw = sw.transpose(1, 2).contiguous().transpose(1, 2)  # MN-major [G, D, Kb/4]
    elif encoding == "e8m0":
        sa = ea.to(torch.uint8).view(torch.float8_e8m0fnu).to(device)
        sw = ew.to(torch.uint8).view(torch.float8_e8m0fnu).to(device)
    else:
        raise ValueError(encoding)
    return a, sa, w, sw, sa_f, sw_f


def fp8_einsum_reference(
    a: torch.Tensor, sa_f: torch.Tensor, w: torch.Tensor, sw_f: torch.Tensor
) -> torch.Tensor:
    """fp64 ``out[t,g,d] = sum_r a sa w sw`` from the decoded fp32 scales."""
    t, g, r = a.shape
    d = w.shape[1]
    A = a.double() * sa_f.double().repeat_interleave(128, -1)[..., :r]
    swx = sw_f.double().repeat_interleave(128, -1)[..., :r]
    if sw_f.shape[1] != d:
        swx = swx.repeat_interleave(128, 1)[:, :d]
    W = w.double() * swx
    return torch.einsum("tgr,gdr->tgd", A, W)
