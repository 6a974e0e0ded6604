"""Benchmark fp8_einsum('bhr,hdr->bhd') (DeepSeek-V4 o_proj wo_a) on the GPU.

Providers, measured in the same run as CUDA-graph replay per call (see _kbench.graph_time_us):
``auto`` (the public dispatch), ``e0d50ad`` (the config e0d50ad's dispatch plans chose for this T
and scale encoding: the kernel's previous state, still compiled from this file), ``cublas_fp8``
(the peer: cuBLAS's fp8 GEMM ``torch._scaled_mm`` with per-tensor scales over the same weight
bytes, N = G*D, K = R, bf16 out), ``bf16_dequant_einsum`` (the community fallback: dequantise a and
w to bf16 with their block scales, then ``torch.einsum``; warm only), and every config in
FP8_EINSUM_CONFIGS up to --sweep-max-t. Encodings: recipe (1,1,128) with packed UE8M0 int32
scales (per-row scales drawn per row, or per 128x128 block and repeated per row as on GB10: see
ENCODINGS) and (1,128,128) with fp32 scales.

``--cold``: for T <= --cold-max-t every provider is timed twice, ``l2=warm`` (one operand set) and
``l2=cold`` (calls rotate over copies of a, sa, w, sw that together exceed 2x the L2, so each call
reads its weight from HBM, as decode does: every other layer's weights pass through the cache
between two calls of one layer's o_proj). Rows carry the rel. Frobenius error vs fp64 (NaN-poisoned
output first), TFLOP/s, the HBM roofline (bytes / the copy bandwidth measured at the start of the
run, ``_kbench.measure_hbm_gbps``) and its fraction (roofline / p50). Config rows also check that
two calls give the same bits (``FAILED nondeterministic`` otherwise).

Usage: python benchmarks/bench_fp8_einsum.py [--out benchmarks/results/fp8_einsum.csv]
       [--ts 1,4,...] [--tp 2] [--sweep-max-t 8192] [--recipes int32,int32-bcast,fp32]
       [--configs a,b] [--cold] [--cold-max-t 128] [--no-warm-decode]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _kbench import append_rows, env_fields, measure_hbm_gbps
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro

D, R = 1024, 4096
#: --recipes: "int32" packed UE8M0 per-row weight scales, each row drawn on its own (recipe
#: (1,1,128)); "int32-bcast" the same layout holding 128x128 block scales repeated on every row,
#: what DeepGEMM's weight transform stores on sm_10x/sm_12x (GB10's served layout, audit
#: section 2); "fp32" recipe (1,128,128) with fp32 scales (the sm_90 layout).
ENCODINGS = ("int32", "int32-bcast", "fp32")
DEFAULT_TS = (1, 4, 16, 32, 36, 64, 128, 512, 2048, 8192, 16384)
#: e0d50ad's dispatch plans (fp8_einsum.py at that commit), ``(max_T, config)``: the baseline.
E0D50AD_PLAN_UE8M0 = (
    (16, "t16_d64_r4_s4"),
    (32, "t32_d64_r4_s4"),
    (128, "t64_d64_r2_s4"),
    (256, "t64_d64_s4"),
)
E0D50AD_PLAN_UE8M0_LAST = "t64_d128_s4_bc"
E0D50AD_PLAN_FP32 = ((4, "t16_d64_r4_s4"), (16, "t16_d32_r4_s4"), (64, "t64_d64_r2_s4"), (256, "t64_d64_s4"))
E0D50AD_PLAN_FP32_LAST = "t128_d64_s3_w8"


def _e0d50ad_config(t: int, enc: str) -> str:
    plan, last = (
        (E0D50AD_PLAN_FP32, E0D50AD_PLAN_FP32_LAST)
        if enc == "fp32"
        else (E0D50AD_PLAN_UE8M0, E0D50AD_PLAN_UE8M0_LAST)
    )
    return next((name for max_t, name in plan if t <= max_t), last)


def _dequant_einsum(a, sa_f, w, sw_f, out):
    r = a.shape[-1]
    A = a.to(torch.bfloat16) * sa_f.repeat_interleave(128, -1)[..., :r].to(torch.bfloat16)
    swx = sw_f.repeat_interleave(128, -1)[..., :r]
    if sw_f.shape[1] != w.shape[1]:
        swx = swx.repeat_interleave(128, 1)[:, : w.shape[1]]
    W = w.to(torch.bfloat16) * swx.to(torch.bfloat16)
    out.copy_(torch.einsum("tgr,gdr->tgd", A, W))


def _make_fn(prov, sets, out, recipe, enc, t, iso=False):
    """``sets``: list of (a, sa, w, sw, sa_f, sw_f, a2d); call i uses set i % len(sets).

    ``iso``: each call is preceded by an elementwise kernel that rewrites its activations in place
    (``a`` for ours, ``a2d`` for the peer), as the activation quant does before o_proj in decode.
    """
    fn = _make_fn_bare(prov, sets, out, recipe, enc, t)
    if not iso:
        return fn
    n = len(sets)

    def fn_iso(i):
        sets[i % n][6 if prov == "cublas_fp8" else 0].view(torch.uint8).bitwise_or_(0)
        if prov != "act_write_only":
            fn(i)

    return fn_iso


def _make_fn_bare(prov, sets, out, recipe, enc, t):
    n = len(sets)
    if prov == "auto":

        def fn(i):
            a, sa, w, sw = sets[i % n][:4]
            fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)

        return fn
    if prov == "bf16_dequant_einsum":
        return lambda i: _dequant_einsum(sets[0][0], sets[0][4], sets[0][2], sets[0][5], out)
    if prov == "cublas_fp8":
        one = torch.ones((), device="cuda", dtype=torch.float32)

        def fn(i):
            s = sets[i % n]
            w = s[2]
            return torch._scaled_mm(
                s[6], w.view(-1, w.shape[-1]).t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )

        return fn
    name = _e0d50ad_config(t, enc) if prov == "e0d50ad" else prov

    def fn(i):
        a, sa, w, sw = sets[i % n][:4]
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, name)

    return fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fp8_einsum.csv"))
    ap.add_argument("--ts", default=",".join(map(str, DEFAULT_TS)))
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--sweep-max-t", type=int, default=16384, help="sweep every config up to this T")
    ap.add_argument("--recipes", default="int32,int32-bcast,fp32")
    ap.add_argument("--configs", default="", help="comma-separated config names to sweep (default: all)")
    ap.add_argument("--cold", action="store_true", help="also time T <= --cold-max-t with L2-cold operands")
    ap.add_argument("--cold-max-t", type=int, default=128)
    ap.add_argument(
        "--iso",
        action="store_true",
        help="with --cold, also l2=cold-iso: each call preceded by a kernel rewriting its activations",
    )
    ap.add_argument("--no-warm-decode", action="store_true", help="T <= --cold-max-t: cold rows only")
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    g = 8 // args.tp
    env = env_fields()
    hbm = measure_hbm_gbps()
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    print(
        f"# {env['gpu']} torch {env['torch']} triton {env['triton']}; copy bandwidth {hbm:.0f} GB/s "
        f"(1 GiB device-to-device copy, read + write); L2 {l2_bytes >> 20} MiB",
        flush=True,
    )
    rows = []
    wanted = set(filter(None, args.configs.split(",")))
    for enc in args.recipes.split(","):
        if enc not in ENCODINGS:
            ap.error(f"--recipes: unknown encoding {enc!r}; want some of {', '.join(ENCODINGS)}")
        recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
        for t in [int(v) for v in args.ts.split(",")]:
            base = make_fp8_operands(t, g, D, R, recipe, enc, seed=t)
            a, sa, w, sw, sa_f, sw_f = base
            ref = fp8_einsum_reference(a, sa_f, w, sw_f) if t <= 4096 else None
            a2d = a[:, 0, :].contiguous()  # the peer's activations: [T, K = R] fp8, row-major
            out = torch.empty((t, g, D), dtype=torch.bfloat16, device="cuda")
            flops = 2 * t * g * D * R
            bytes_moved = (
                a.numel()
                + w.numel()
                + out.numel() * 2
                + sa.numel() * sa.element_size()
                + sw.numel() * sw.element_size()
            )
            roof_us = bytes_moved / (hbm * 1e9) * 1e6
            provs = ["auto", "e0d50ad", "cublas_fp8", "bf16_dequant_einsum"]
            if t <= args.sweep_max_t:
                provs += [c.name for c in fe.FP8_EINSUM_CONFIGS if not wanted or c.name in wanted]
            modes = ["warm"]
            if args.cold and t <= args.cold_max_t:
                modes = (["cold"] if args.no_warm_decode else ["warm", "cold"]) + (
                    ["cold-iso"] if args.iso else []
                )
            for mode in modes:
                if mode.startswith("cold"):
                    n_sets = max(2, (2 * l2_bytes) // (w.numel() + sw.numel() * sw.element_size()) + 1)
                    # Fresh operands per set, made as the served layouts are (strides included).
                    sets = [(*base, a2d)]
                    for k in range(1, n_sets):
                        ops = make_fp8_operands(t, g, D, R, recipe, enc, seed=t + 1000 * k)
                        sets.append((*ops, ops[0][:, 0, :].contiguous()))
                else:
                    sets = [(*base, a2d)]
                for prov in provs + (["act_write_only"] if mode == "cold-iso" else []):
                    if prov == "bf16_dequant_einsum" and (mode != "warm" or (enc != "int32" and t > 2048)):
                        continue
                    fn = _make_fn(prov, sets, out, recipe, enc, t, iso=mode == "cold-iso")
                    try:
                        out.fill_(float("nan"))
                        fn(0)
                        if prov in ("cublas_fp8", "act_write_only"):
                            err = float("nan")
                        else:
                            err = rel_fro(out, ref) if ref is not None else float("nan")
                            first = out.clone()
                            out.fill_(float("nan"))
                            fn(0)
                            if not torch.equal(first, out):
                                raise RuntimeError("nondeterministic: two calls gave different bits")
                        calls = 20 if t <= 512 else 5
                        p20, p50, p80 = graph_time_us(
                            fn, calls=calls, reps=15 if t <= 2048 else 8, warmup=len(sets)
                        )
                    except Exception as exc:  # noqa: BLE001
                        print(f"  {enc} T={t} {mode} {prov}: FAILED {type(exc).__name__}: {exc}", flush=True)
                        continue
                    label = prov if prov != "e0d50ad" else f"e0d50ad:{_e0d50ad_config(t, enc)}"
                    rows.append(
                        dict(
                            kernel="fp8_einsum",
                            provider=label,
                            shape=f"T={t},G={g},D={D},R={R},recipe={recipe},scales={enc}",
                            l2=mode,
                            p20_us=p20,
                            p50_us=p50,
                            p80_us=p80,
                            gbps=bytes_moved / (p50 * 1e-6) / 1e9,
                            tflops=flops / (p50 * 1e-6) / 1e12,
                            roofline_us=roof_us,
                            roofline_frac=roof_us / p50,
                            rel_fro_err=err,
                            command=args.command,
                            **env,
                        )
                    )
                    print(
                        f"  {enc:11s} T={t:5d} {mode} {label:34s} p50 {p50:8.2f} us {roof_us / p50:5.1%} roof"
                        f"  {flops / (p50 * 1e-6) / 1e12:6.1f} TFLOP/s  err {err:.2e}",
                        flush=True,
                    )
    append_rows(Path(args.out), rows)
    print("\n# per (scales, T, L2): auto | e0d50ad | cublas_fp8 | best config (p50 us, roofline fraction)")
    keys = sorted({(r["shape"], r["l2"]) for r in rows})
    for shape, mode in keys:
        rs = [r for r in rows if r["shape"] == shape and r["l2"] == mode]

        def pick(pred, rs=rs):
            c = [r for r in rs if pred(r["provider"])]
            return min(c, key=lambda r: r["p50_us"]) if c else None

        au = pick(lambda p: p == "auto")
        e0 = pick(lambda p: p.startswith("e0d50ad"))
        cb = pick(lambda p: p == "cublas_fp8")
        be = pick(
            lambda p: (
                p not in ("auto", "cublas_fp8", "bf16_dequant_einsum", "act_write_only")
                and not p.startswith("e0d")
            )
        )

        def f(r):
            return f"{r['p50_us']:7.2f} ({r['roofline_frac']:4.0%})" if r else "      -"

        print(
            f"{shape} {mode}: auto {f(au)} | e0d50ad {f(e0)} | cublas {f(cb)} | "
            f"best {be['provider'] if be else '-'} {f(be)}"
        )


if __name__ == "__main__":
    main()
