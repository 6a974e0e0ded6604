"""Run each kernel once at the served shapes and report whether Triton compiled anything.

With ``TRITON_CACHE_DIR`` pointing at a ``sparkpair kernels build --cache-dir`` output for this
GPU's arch, no kernel should compile (the JIT post-compile hook would not matter; we count
cache misses through the compile listener).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
from kernel_numerics import make_fp8_operands  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.kernels import router_gemm as rg  # noqa: E402

events = []


def listener(src, metadata, metadata_group, times, cache_hit):  # Triton 3.6 compilation listener
    events.append((getattr(src, "name", "?"), cache_hit))


triton.knobs.compilation.listener = listener
x = torch.randn(8, 4096, device="cuda").bfloat16()
for w_dtype in (torch.bfloat16, torch.float32):
    w = torch.randn(256, 4096, device="cuda").to(w_dtype)
    planes = rg.bf16x3_split(w) if w_dtype == torch.float32 else None
    for m in (1, 8, 32, 512):
        rg.router_gemm(torch.randn(m, 4096, device="cuda").bfloat16(), w, planes)
for recipe, enc in (((1, 1, 128), "int32"), ((1, 128, 128), "fp32")):
    for t in (1, 32, 2048):
        a, sa, w8, sw, _, _ = make_fp8_operands(t, 4, 1024, 4096, recipe, enc)
        out = torch.empty((t, 4, 1024), dtype=torch.bfloat16, device="cuda")
        fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w8, sw), out, recipe=recipe)
torch.cuda.synchronize()
hits = sum(1 for _, h in events if h)
print(f"compile events: {len(events)}; cache hits: {hits}; misses: {len(events) - hits}")
for name, h in events:
    print(f"  {name}: {'hit' if h else 'MISS (compiled)'}")
