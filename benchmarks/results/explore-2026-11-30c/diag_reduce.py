# ruff: noqa: B023, E501  (each closure is captured into a graph inside its own iteration)
"""Two launches with PDL vs the one-launch tile-counter fixup (router split-K).

Run from the repo root on the GPU: ``python3 benchmarks/results/explore-2026-11-30c/diag_reduce.py``.
Per (dtype, M, config): p50 µs per call under CUDA-graph replay of fix1p (one launch, tile
counters, PDL), two launches where the partials kernel and the reduce kernel both use PDL (with
reduce BLOCK 1024 / 256 / 128), and fix0p (partials only: the floor).
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

for dt, m, name in (
    ("bf16", 8, "bf16_dot_m16_n32_s8_k512_pdl"),
    ("bf16", 16, "bf16_dot_m16_n32_s8_k512_pdl"),
    ("bf16", 16, "bf16_dot_m16_n64_s8_k512_pdl"),
    ("fp32", 16, "fp32w3_dot_m16_n16_s16_k256_pdl"),
    ("fp32", 32, "fp32w3_dot_m32_n16_s16_k256_pdl"),
):
    cfg = rg._CONFIGS_BY_NAME[name]
    meta = cfg.constexprs()
    x = torch.randn(m, K, device=dev).to(torch.bfloat16)
    w_arg = w16 if dt == "bf16" else planes
    stride_w3 = 0 if dt == "bf16" else planes.stride(0)
    split = meta["SPLIT_K"]
    grid = (cm.cdiv(N, meta["BLOCK_N"]) * split * cm.cdiv(m, meta["BLOCK_M"]),)
    out = torch.empty((m, N), device=dev)
    part = torch.empty((split, m, N), device=dev)
    sem = torch.zeros(4096, device=dev, dtype=torch.int32)
    meta["ONE_TILE"] = True
    ref = rg.router_gemm_with_config(
        x, w16 if dt == "bf16" else w32, name, planes=None if dt == "bf16" else planes
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
            num_warps=cfg.num_warps,
            num_stages=cfg.num_stages,
            launch_pdl=True,
        )

    def two(block, warps):
        dot(0)
        rg._router_reduce_kernel[(cm.cdiv(m * N, block),)](
            out,
            part,
            m * N,
            SPLIT_K=split,
            BLOCK=block,
            N16=True,
            USE_PDL=True,
            num_warps=warps,
            num_stages=1,
            launch_pdl=True,
        )

    line = f"{dt} M={m:3d} {name:34s}"
    variants = [("fix1p", lambda i: dot(1)), ("fix0p", lambda i: dot(0))] + [
        (f"two_b{b}_w{wp}", lambda i, b=b, wp=wp: two(b, wp)) for b, wp in ((1024, 4), (256, 2), (128, 1))
    ]
    for label, fn in variants:
        out.zero_()
        fn(0)
        torch.cuda.synchronize()
        ok = torch.equal(out, ref) if label != "fix0p" else "-"
        t = graph_time_us(fn)[1]
        line += f" | {label} {t:5.2f} {ok}"
    print(line, flush=True)
