"""A/B of the split-K fixups in one process: tile counters (FIXUP 1) vs flagged partials (FIXUP 2).

Run from the repo root on the GPU: ``python3 benchmarks/results/explore-2026-11-30c/ab_fixup.py``.
Prints, per (dtype, M, config): p50 µs per call under CUDA-graph replay for each fixup, and
whether the two give bitwise the same output; then replays a graph of 200 calls on changing
inputs and compares every output with the counter path (stale flags would show as mismatches).
"""

import sys

import torch

sys.path.insert(0, "benchmarks")
sys.path.insert(0, "overlay")
from _kbench import graph_time_us  # noqa: E402
from sparkpair_overlay.kernels import router_gemm as rg  # noqa: E402

torch.manual_seed(0)
K, N = 4096, 256
dev = "cuda"
w16 = (torch.randn(N, K, device=dev) * 0.02).to(torch.bfloat16)
w32 = torch.randn(N, K, device=dev) * 0.02
planes = rg.bf16x3_split(w32)
cases = [
    ("bf16", m, c.name)
    for m in (8, 16, 32, 64, 128)
    for c in rg.configs_for(torch.bfloat16, K)
    if c.kernel == "_router_dot_kernel"
] + [
    ("fp32", m, c.name)
    for m in (8, 16, 32, 64, 128)
    for c in rg.configs_for(torch.float32, K)
    if c.kernel == "_router_dot_kernel" and c["W_MODE"] == rg.W_BF16X3 and c["BLOCK_M"] <= 32
]
for dt, m, name in cases:
    x = torch.randn(m, K, device=dev).to(torch.bfloat16)
    w = w16 if dt == "bf16" else w32
    pl = planes if dt == "fp32" else None
    res = {}
    outs = {}
    for fx in (True, "flags"):

        def call(i, fx=fx, x=x, w=w, name=name, pl=pl):
            return rg.router_gemm_with_config(x, w, name, fixup=fx, planes=pl)

        outs[fx] = call(0)
        res[fx] = graph_time_us(call)[1]
    same = torch.equal(outs[True], outs["flags"])
    print(
        f"{dt} M={m:4d} {name:36s} counter {res[True]:6.2f}  flags {res['flags']:6.2f}  "
        f"ratio {res['flags'] / res[True]:.3f}  bitwise_equal={same}",
        flush=True,
    )

# stale-flag stress: one graph, 200 calls on 8 rotating inputs, each output kept
STRESS = (("bf16", 16, "bf16_dot_m16_n32_s8_k512_pdl"), ("fp32", 32, "fp32w3_dot_m32_n16_s16_k256_pdl"))
for dt, m, name in STRESS:
    w = w16 if dt == "bf16" else w32
    pl = planes if dt == "fp32" else None
    xs = [torch.randn(m, K, device=dev).to(torch.bfloat16) for _ in range(8)]
    ref = [rg.router_gemm_with_config(xx, w, name, fixup=True, planes=pl) for xx in xs]
    rg.router_gemm_with_config(xs[0], w, name, fixup="flags", planes=pl)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = [rg.router_gemm_with_config(xs[i % 8], w, name, fixup="flags", planes=pl) for i in range(200)]
    bad = 0
    for _ in range(20):
        g.replay()
        torch.cuda.synchronize()
        bad += sum(not torch.equal(o, ref[i % 8]) for i, o in enumerate(outs))
    print(f"stress {dt} M={m} {name}: {bad} mismatches in 4000 calls", flush=True)
