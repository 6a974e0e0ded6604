"""Benchmark the router GEMM (logits[M, N] fp32 = x[M, K] bf16 @ W[N, K].T) on the GPU.

Providers, measured in the same run as CUDA-graph replay per call (see _kbench.graph_time_us):
``cublas`` (bf16 W: ``torch.mm(x, W.T, out_dtype=fp32)``, vLLM 0.32 GateLinear tier 5, what GB10
gets), ``torch_fp32`` (fp32 W: ``F.linear(x.float(), W)`` with TF32 off, tier 6), every config in
ROUTER_GEMM_CONFIGS for its weight dtype, and ``auto`` (the public ``router_gemm`` dispatch).
Each row also carries the max relative error vs fp64 and the HBM roofline (bytes / copy bandwidth).

Usage: python benchmarks/bench_router_gemm.py [--out benchmarks/results/router_gemm.csv]
       [--ms 1,4,8,16,32,...] [--cold]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _kbench import append_rows, env_fields, measure_hbm_gbps
from sparkpair_overlay.kernels import router_gemm as rg
from sparkpair_overlay.numerics import graph_time_us

N, K = 256, 4096
DEFAULT_MS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def _useful(cfg, m: int) -> bool:
    meta = cfg.constexprs()
    if cfg.kernel == "_router_rows_kernel":
        return m <= 16
    if meta["BLOCK_M"] <= 32:
        return m <= 1024
    return True


def _cublas_bf16x3(x, p):
    """BF16x3 through cuBLAS: three bf16 GEMMs on the pre-split weight, smallest term first."""
    out = torch.mm(x, p[2].t(), out_dtype=torch.float32)
    out = torch.addmm(out, x, p[1].t(), out_dtype=torch.float32)
    return torch.addmm(out, x, p[0].t(), out_dtype=torch.float32)


def _make_fn(prov, xs, ws, ps):
    """``ps``: each weight's BF16x3 planes (fp32 weights; made once, as the overlay does)."""
    if prov == "cublas_bf16x3":
        return lambda i: _cublas_bf16x3(xs[i % len(xs)], ps[i % len(ps)])
    if prov == "auto":
        return lambda i: rg.router_gemm(xs[i % len(xs)], ws[i % len(ws)], ps[i % len(ps)])
    cfg = None if prov in ("cublas", "torch_fp32") else prov
    return lambda i: rg.router_gemm_with_config(xs[i % len(xs)], ws[i % len(ws)], cfg, planes=ps[i % len(ps)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "router_gemm.csv"))
    ap.add_argument("--ms", default=",".join(map(str, DEFAULT_MS)))
    ap.add_argument("--cold", action="store_true", help="also time M<=32 with L2-cold weights")
    ap.add_argument("--configs", default="", help="comma-separated config names to sweep (default: all)")
    ap.add_argument("--dtypes", default="bf16,fp32")
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # vLLM: VLLM_FLOAT32_MATMUL_PRECISION=highest
    ms = [int(v) for v in args.ms.split(",")]
    env = env_fields()
    hbm = measure_hbm_gbps()
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    print(
        f"# {env['gpu']} torch {env['torch']} triton {env['triton']}; copy bandwidth {hbm:.0f} GB/s; "
        f"L2 {l2_bytes >> 20} MiB",
        flush=True,
    )
    rows = []
    best: dict[tuple[str, int], tuple[float, str]] = {}
    wanted = set(filter(None, args.configs.split(",")))
    for w_dtype, wname, base in ((torch.bfloat16, "bf16", "cublas"), (torch.float32, "fp32", "torch_fp32")):
        if wname not in args.dtypes.split(","):
            continue
        for m in ms:
            gen = torch.Generator(device="cuda").manual_seed(m)
            x = torch.randn(m, K, device="cuda", generator=gen).to(torch.bfloat16)
            w = (torch.randn(N, K, device="cuda", generator=gen) * K**-0.5).to(w_dtype)
            ref = x.double() @ w.double().t()
            bytes_moved = x.numel() * 2 + w.numel() * w.element_size() + m * N * 4
            flops = 2 * m * N * K * (3 if w_dtype == torch.float32 else 1)
            providers = [base, "auto"] + (["cublas_bf16x3"] if wname == "fp32" else [])
            providers += [
                c.name for c in rg.configs_for(w_dtype) if _useful(c, m) and (not wanted or c.name in wanted)
            ]
            modes = ["warm"] + (["cold"] if args.cold and m <= 32 else [])
            for mode in modes:
                if mode == "cold":
                    n_sets = max(2, (2 * l2_bytes) // (w.numel() * w.element_size()) + 1)
                    ws = [w.clone() for _ in range(n_sets)]
                    xs = [x.clone() for _ in range(n_sets)]
                else:
                    ws, xs = [w], [x]
                ps = [rg.bf16x3_split(wi) if w_dtype == torch.float32 else None for wi in ws]
                for prov in providers:
                    fn = _make_fn(prov, xs, ws, ps)
                    try:
                        out = fn(0)
                        err = float((out.double() - ref).abs().max() / ref.abs().max())
                        calls = 50 if m <= 1024 else 10
                        p20, p50, p80 = graph_time_us(fn, calls=calls, reps=20 if m <= 1024 else 10)
                    except Exception as exc:  # noqa: BLE001 - record and go on
                        print(f"  {wname} M={m} {prov}: FAILED {type(exc).__name__}: {exc}", flush=True)
                        continue
                    row = dict(
                        kernel="router_gemm",
                        provider=prov,
                        shape=f"M={m},N={N},K={K},W={wname}",
                        l2=mode,
                        p20_us=p20,
                        p50_us=p50,
                        p80_us=p80,
                        gbps=bytes_moved / (p50 * 1e-6) / 1e9,
                        tflops=flops / (p50 * 1e-6) / 1e12,
                        roofline_us=bytes_moved / (hbm * 1e9) * 1e6,
                        max_rel_err=err,
                        command=args.command,
                        **env,
                    )
                    rows.append(row)
                    if mode == "warm" and prov not in ("auto",):
                        key = (wname, m)
                        if key not in best or p50 < best[key][0]:
                            best[key] = (p50, prov)
                    print(
                        f"  {wname} M={m:5d} {mode} {prov:26s} p50 {p50:8.2f} us  (p20 {p20:.2f}, p80 {p80:.2f})"  # noqa: E501
                        f"  err {err:.2e}",
                        flush=True,
                    )
    append_rows(Path(args.out), rows)
    print("\n# best provider per (W dtype, M), warm L2:")
    for (wname, m), (t, prov) in sorted(best.items()):
        auto = next(
            (
                r["p50_us"]
                for r in rows
                if r["provider"] == "auto"
                and r["l2"] == "warm"
                and r["shape"] == f"M={m},N={N},K={K},W={wname}"
            ),
            float("nan"),
        )
        base = next(
            (
                r["p50_us"]
                for r in rows
                if r["provider"] in ("cublas", "torch_fp32")
                and r["l2"] == "warm"
                and r["shape"] == f"M={m},N={N},K={K},W={wname}"
            ),
            float("nan"),
        )
        print(f"{wname} M={m:5d}: best {prov:26s} {t:8.2f} us | auto {auto:8.2f} | baseline {base:8.2f}")


if __name__ == "__main__":
    main()
