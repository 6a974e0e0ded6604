# ruff: noqa: B023, E501  (each closure is captured into a graph inside its own iteration)
"""Sweep of router split-K tiles with the two-launch PDL reduction (H200).

Run from the repo root on the GPU: ``python3 benchmarks/results/explore-2026-11-30c/sweep_two.py``.
Per (dtype, M, tile): p50 µs per call (CUDA-graph replay) of the one-launch tile-counter fixup
(fix1p), the partials kernel alone (fix0p, the floor), and partials + a PDL reduce kernel with
BLOCK elements per CTA and 1 warp (two_bBLOCK); "ok" = bitwise equal to the launcher's output.
"""

import sys

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "overlay")
from _kbench import graph_time_us  # noqa: E402
from sparkpair_overlay.kernels import _common as cm  # noqa: E402
from sparkpair_overlay.kernels import router_gemm as rg  # noqa: E402

torch.manual_seed(0)
K, N = 4096, 256
dev = "cuda"
w16 = (torch.randn(N, K, device=dev) * 0.02).to(torch.bfloat16)
w32 = torch.randn(N, K, device=dev) * 0.02
planes = rg.bf16x3_split(w32)
BF16 = [
    (16, 32, 512, 8, 4),
    (16, 64, 512, 8, 4),
    (16, 32, 256, 16, 4),
    (16, 64, 256, 16, 4),
    (16, 128, 512, 8, 4),
    (16, 16, 512, 8, 4),
    (16, 32, 1024, 4, 4),
    (16, 64, 1024, 4, 4),
    (32, 64, 512, 8, 4),
    (32, 32, 512, 8, 4),
    (16, 64, 512, 8, 2),
    (16, 128, 256, 16, 4),
]
FP32 = [
    (32, 16, 256, 16, 4),
    (32, 16, 128, 32, 4),
    (32, 32, 256, 16, 4),
    (32, 32, 128, 32, 4),
    (16, 16, 256, 16, 4),
    (16, 16, 128, 32, 4),
    (32, 64, 256, 16, 4),
    (32, 16, 512, 8, 4),
    (32, 32, 512, 8, 4),
    (16, 32, 256, 16, 4),
    (32, 16, 128, 32, 2),
    (16, 16, 128, 32, 2),
]
CASES = [("bf16", m, t) for m in (8, 16, 32, 64, 128) for t in BF16 if not (m <= 16 and t[0] == 32)] + [
    ("fp32", m, t) for m in (8, 16, 32, 64) for t in FP32
]
for dt, m, (bm, bn, bk, split, warps) in CASES:
    w_mode = rg.W_BF16 if dt == "bf16" else rg.W_BF16X3
    cfg = rg._dot("x", bm, bn, bk, split, warps, 1, w_mode, True, True)
    meta = cfg.constexprs()
    x = torch.randn(m, K, device=dev).to(torch.bfloat16)
    w_arg = w16 if dt == "bf16" else planes
    stride_w3 = 0 if dt == "bf16" else planes.stride(0)
    grid = (cm.cdiv(N, bn) * split * cm.cdiv(m, bm),)
    out = torch.empty((m, N), device=dev)
    part = torch.empty((split, m, N), device=dev)
    sem = torch.zeros(4096, device=dev, dtype=torch.int32)
    ref = rg.router_gemm_with_config(
        x, w16 if dt == "bf16" else w32, cfg, planes=None if dt == "bf16" else planes
    )

    def dot(mode):
        rg._router_dot_kernel[grid](
            out,
            sem,
            part,
            x,
            w_arg,
            m,
            N,
            K,
            x.stride(0),
            w_arg.stride(-2),
            stride_w3,
            m * N,
            N,
            1.0,
            **meta,
            N16=True,
            FIXUP=mode,
            num_warps=warps,
            num_stages=1,
            launch_pdl=True,
        )

    def two(block):
        dot(0)
        rg._router_reduce_kernel[(cm.cdiv(m * N, block),)](
            out,
            part,
            m * N,
            SPLIT_K=split,
            BLOCK=block,
            N16=True,
            USE_PDL=True,
            num_warps=1,
            num_stages=1,
            launch_pdl=True,
        )

    line = f"{dt} M={m:3d} m{bm}_n{bn}_k{bk}_s{split}_w{warps} ctas={grid[0]:4d}"
    variants = [("fix1p", lambda i: dot(1)), ("fix0p", lambda i: dot(0))] + [
        (f"two_b{b}", lambda i, b=b: two(b)) for b in (128, 64, 32)
    ]
    for label, fn in variants:
        out.zero_()
        fn(0)
        torch.cuda.synchronize()
        ok = ("ok" if torch.equal(out, ref) else "MISMATCH") if label != "fix0p" else ""
        t = graph_time_us(fn)[1]
        line += f" | {label} {t:5.2f} {ok}"
    print(line, flush=True)
