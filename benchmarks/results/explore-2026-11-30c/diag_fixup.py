# ruff: noqa: B023, E501  (each closure is captured into a graph inside its own iteration)
"""Where the router's split-K time goes: the dot kernel launched directly with each fixup mode.

Run from the repo root on the GPU: ``python3 benchmarks/results/explore-2026-11-30c/diag_fixup.py``.
Rows: p50 µs per call (CUDA-graph replay) for FIXUP 1 (tile counters), 2 (flagged partials) and
0 (partials stored, no reduction at all: the floor of the split-K kernel), each with and without
PDL; plus the launcher's path, and the rows kernel at M = 1 for reference.
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
    ("fp32", 16, "fp32w3_dot_m16_n16_s16_k256_pdl"),
    ("fp32", 32, "fp32w3_dot_m32_n16_s16_k256_pdl"),
):
    cfg = rg._CONFIGS_BY_NAME[name]
    meta = cfg.constexprs()
    x = torch.randn(m, K, device=dev).to(torch.bfloat16)
    w_arg = w16 if dt == "bf16" else planes
    stride_w3 = 0 if dt == "bf16" else planes.stride(0)
    split = meta["SPLIT_K"]
    n_tiles = cm.cdiv(N, meta["BLOCK_N"]) * cm.cdiv(m, meta["BLOCK_M"])
    grid = (cm.cdiv(N, meta["BLOCK_N"]) * split * cm.cdiv(m, meta["BLOCK_M"]),)
    out = torch.empty((m, N), device=dev)
    part = torch.empty((split, m, N), device=dev)
    sem = torch.zeros(4096, device=dev, dtype=torch.int32)
    ws = torch.zeros(1 << 19, device=dev, dtype=torch.int64)
    meta["ONE_TILE"] = True
    ref = rg.router_gemm_with_config(
        x, w16 if dt == "bf16" else w32, name, planes=None if dt == "bf16" else planes
    )
    line = f"{dt} M={m:3d} {name:34s} tiles={n_tiles:3d} ctas={grid[0]:4d}"
    for mode in (1, 2, 3, 0):
        for pdl in (True, False):
            mm = dict(meta, USE_PDL=pdl)
            sem_arg, part_arg = (sem, part) if mode < 2 else (ws, ws)

            def call(i, mm=mm, sem_arg=sem_arg, part_arg=part_arg, mode=mode, pdl=pdl):
                rg._router_dot_kernel[grid](
                    out,
                    sem_arg,
                    part_arg,
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
                    **mm,
                    N16=True,
                    FIXUP=mode,
                    num_warps=cfg.num_warps,
                    num_stages=cfg.num_stages,
                    **({"launch_pdl": True} if pdl else {}),
                )

            call(0)
            torch.cuda.synchronize()
            ok = torch.equal(out, ref) if mode else "-"
            t = graph_time_us(call)[1]
            line += f" | fix{mode}{'p' if pdl else ''} {t:5.2f} {ok}"
    print(line, flush=True)

x1 = torch.randn(1, K, device=dev).to(torch.bfloat16)
for name in ("bf16_rows_m1_n2_pdl",):
    t = graph_time_us(lambda i: rg.router_gemm_with_config(x1, w16, name))[1]
    print(f"bf16 M=1 {name} {t:.2f}")
