"""Benchmark fp8_einsum('bhr,hdr->bhd') (DeepSeek-V4 o_proj wo_a) on the GPU.

Providers, measured in the same run as CUDA-graph replay per call (see _kbench.graph_time_us):
``bf16_dequant_einsum`` (the community fallback: dequantise a and w to bf16 with their block scales,
then ``torch.einsum``), every config in FP8_EINSUM_CONFIGS, and ``auto`` (the public dispatch),
for recipe (1,1,128) with packed UE8M0 int32 scales (GB10's recipe; per-row scales drawn per row,
or per 128x128 block and repeated per row as on GB10: see ENCODINGS) and (1,128,128) with fp32
scales. Rows carry the rel. Frobenius error vs fp64, TFLOP/s and the HBM roofline.

Usage: python benchmarks/bench_fp8_einsum.py [--out benchmarks/results/fp8_einsum.csv]
       [--ts 1,4,...] [--tp 2] [--sweep-max-t 8192] [--recipes int32,int32-bcast,fp32]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
from _kbench import append_rows, env_fields, graph_time_us, measure_hbm_gbps  # noqa: E402
from kernel_numerics import fp8_einsum_reference, make_fp8_operands, rel_fro  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402

D, R = 1024, 4096
#: --recipes: "int32" packed UE8M0 per-row weight scales, each row drawn on its own (recipe
#: (1,1,128)); "int32-bcast" the same layout holding 128x128 block scales repeated on every row,
#: what DeepGEMM's weight transform stores on sm_10x/sm_12x (GB10's served layout, audit
#: section 2); "fp32" recipe (1,128,128) with fp32 scales (the sm_90 layout).
ENCODINGS = ("int32", "int32-bcast", "fp32")
DEFAULT_TS = (1, 4, 16, 32, 64, 128, 512, 2048, 8192, 16384)


def _dequant_einsum(a, sa_f, w, sw_f, out):
    r = a.shape[-1]
    A = a.to(torch.bfloat16) * sa_f.repeat_interleave(128, -1)[..., :r].to(torch.bfloat16)
    swx = sw_f.repeat_interleave(128, -1)[..., :r]
    if sw_f.shape[1] != w.shape[1]:
        swx = swx.repeat_interleave(128, 1)[:, : w.shape[1]]
    W = w.to(torch.bfloat16) * swx.to(torch.bfloat16)
    out.copy_(torch.einsum("tgr,gdr->tgd", A, W))


def _make_fn(prov, a, sa, w, sw, sa_f, sw_f, out, recipe):
    if prov == "auto":
        return lambda i: fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
    if prov == "bf16_dequant_einsum":
        return lambda i: _dequant_einsum(a, sa_f, w, sw_f, out)
    return lambda i: fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, prov)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fp8_einsum.csv"))
    ap.add_argument("--ts", default=",".join(map(str, DEFAULT_TS)))
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--sweep-max-t", type=int, default=16384, help="sweep every config up to this T")
    ap.add_argument("--recipes", default="int32,int32-bcast,fp32")
    ap.add_argument("--configs", default="", help="comma-separated config names to sweep (default: all)")
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    g = 8 // args.tp
    env = env_fields()
    hbm = measure_hbm_gbps()
    print(
        f"# {env['gpu']} torch {env['torch']} triton {env['triton']}; copy bandwidth {hbm:.0f} GB/s",
        flush=True,
    )
    rows = []
    for enc in args.recipes.split(","):
        if enc not in ENCODINGS:
            ap.error(f"--recipes: unknown encoding {enc!r}; want some of {', '.join(ENCODINGS)}")
        recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
        for t in [int(v) for v in args.ts.split(",")]:
            a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, g, D, R, recipe, enc, seed=t)
            ref = fp8_einsum_reference(a, sa_f, w, sw_f) if t <= 4096 else None
            out = torch.empty((t, g, D), dtype=torch.bfloat16, device="cuda")
            flops = 2 * t * g * D * R
            bytes_moved = (
                a.numel()
                + w.numel()
                + out.numel() * 2
                + sa.numel() * sa.element_size()
                + sw.numel() * sw.element_size()
            )
            provs = ["auto", "bf16_dequant_einsum"]
            if t <= args.sweep_max_t:
                wanted = set(filter(None, args.configs.split(",")))
                provs += [c.name for c in fe.FP8_EINSUM_CONFIGS if not wanted or c.name in wanted]
            for prov in provs:
                if prov == "bf16_dequant_einsum" and enc != "int32" and t > 2048:  # slow; once is enough
                    continue
                fn = _make_fn(prov, a, sa, w, sw, sa_f, sw_f, out, recipe)
                try:
                    out.fill_(float("nan"))
                    fn(0)
                    err = rel_fro(out, ref) if ref is not None else float("nan")
                    calls = 20 if t <= 512 else 5
                    p20, p50, p80 = graph_time_us(fn, calls=calls, reps=15 if t <= 2048 else 8)
                except Exception as exc:  # noqa: BLE001
                    print(f"  {enc} T={t} {prov}: FAILED {type(exc).__name__}: {exc}", flush=True)
                    continue
                rows.append(
                    dict(
                        kernel="fp8_einsum",
                        provider=prov,
                        shape=f"T={t},G={g},D={D},R={R},recipe={recipe},scales={enc}",
                        l2="warm",
                        p20_us=p20,
                        p50_us=p50,
                        p80_us=p80,
                        gbps=bytes_moved / (p50 * 1e-6) / 1e9,
                        tflops=flops / (p50 * 1e-6) / 1e12,
                        roofline_us=bytes_moved / (hbm * 1e9) * 1e6,
                        rel_fro_err=err,
                        command=args.command,
                        **env,
                    )
                )
                print(
                    f"  {enc} T={t:5d} {prov:22s} p50 {p50:9.2f} us ({flops / (p50 * 1e-6) / 1e12:6.1f} TFLOP/s)"  # noqa: E501
                    f"  err {err:.2e}",
                    flush=True,
                )
    append_rows(Path(args.out), rows)
    print("\n# best per (scales, T):")
    keys = sorted({(r["shape"]) for r in rows})
    for k in keys:
        rs = [r for r in rows if r["shape"] == k and r["provider"] not in ("auto", "bf16_dequant_einsum")]
        au = [r for r in rows if r["shape"] == k and r["provider"] == "auto"]
        bl = [r for r in rows if r["shape"] == k and r["provider"] == "bf16_dequant_einsum"]
        b = min(rs, key=lambda r: r["p50_us"]) if rs else None
        print(
            f"{k}: best {b['provider'] if b else '-'} {b['p50_us'] if b else float('nan'):.2f} us | auto "
            f"{au[0]['p50_us'] if au else float('nan'):.2f} | dequant {bl[0]['p50_us'] if bl else float('nan'):.2f}"  # noqa: E501
        )


if __name__ == "__main__":
    main()
