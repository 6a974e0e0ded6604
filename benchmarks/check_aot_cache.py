"""Run every dispatch-plan entry once at the served shapes; report whether Triton compiled anything.

With ``TRITON_CACHE_DIR`` pointing at a ``sparkpair kernels build --cache-dir`` output for this
GPU's arch, no kernel should compile (the JIT post-compile hook would not matter; we count
cache misses through the compile listener).
"""

from __future__ import annotations

import torch
import triton
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.kernels import router_gemm as rg
from sparkpair_overlay.kernels import router_gemm_configs as rgc
from sparkpair_overlay.numerics import make_fp8_operands

events = []


def listener(src, metadata, metadata_group, times, cache_hit):  # Triton 3.6 compilation listener
    events.append((getattr(src, "name", "?"), cache_hit))


triton.knobs.compilation.listener = listener


def plan_sizes(plan: tuple[tuple[int, str], ...], last: int) -> list[int]:
    """One size per plan entry (its upper bound; ``last`` for the open-ended final entry)."""
    return [min(bound, last) for bound, _ in plan]


def run(label: str, call) -> None:
    n0 = len(events)
    call()
    torch.cuda.synchronize()
    new = events[n0:]
    misses = sum(1 for _, h in new if not h)
    print(f"{label}: {len(new)} kernels loaded (0: already loaded), {misses} of them compiled", flush=True)


# Every entry of every router dispatch table (one M per entry), with and without the fp32 weight's planes,
# and past the bf16 table (cuBLAS: no Triton kernel).
for w_dtype in (torch.bfloat16, torch.float32):
    w = torch.randn(256, 4096, device="cuda").to(w_dtype)
    if w_dtype == torch.bfloat16:
        modes = ((rgc.ROUTER_BF16_DISPATCH, None),)
    else:
        modes = ((rgc.ROUTER_FP32_DISPATCH, rg.bf16x3_split(w)), (rgc.ROUTER_FP32_NO_PLANES_DISPATCH, None))
    for plan, planes in modes:
        for m in plan_sizes(plan, 2048) + ([512] if w_dtype == torch.bfloat16 else []):
            cfg = rg.select_router_config(m, w_dtype, 4096, presplit=planes is not None)
            x = torch.randn(m, 4096, device="cuda").bfloat16()
            name = cfg.name if cfg is not None else "cublas"
            run(f"router {w_dtype} M={m} {name}", lambda x=x, w=w, p=planes: rg.router_gemm(x, w, p))
# Every entry of both fp8_einsum plans (GB10's: packed-UE8M0 int32 scales and fp32 block
# scales), and the UE8M0 plan on per-row scales that repeat their 128-row block (int32-bcast:
# GB10's served layout), which the dispatcher reads as block scales once block_scales_view has
# answered (the first call starts the check; the second, after a sync, takes the view).
for recipe, enc, plan in (
    ((1, 1, 128), "int32", fe.FP8_EINSUM_PLAN_UE8M0),
    ((1, 128, 128), "fp32", fe.FP8_EINSUM_PLAN_FP32),
    ((1, 1, 128), "int32-bcast", fe.FP8_EINSUM_PLAN_UE8M0),
):
    for t in plan_sizes(plan, 2048):
        a, sa, w8, sw, _, _ = make_fp8_operands(t, 4, 1024, 4096, recipe, enc)
        out = torch.empty((t, 4, 1024), dtype=torch.bfloat16, device="cuda")
        name = fe.select_fp8_einsum_config(t, enc == "fp32").name

        def call(a=a, sa=sa, w8=w8, sw=sw, out=out, r=recipe) -> None:
            fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w8, sw), out, recipe=r)

        if enc == "int32-bcast":
            call()  # starts block_scales_view's check: the per-row plan, already looked up above
            torch.cuda.synchronize()
            assert fe.block_scales_view(sw) is not None, f"T={t}: the check did not answer"
        run(f"fp8_einsum {enc} T={t} {name}", call)
hits = sum(1 for _, h in events if h)
print(f"compile events: {len(events)}; cache hits: {hits}; misses: {len(events) - hits}")
for name, h in events:
    print(f"  {name}: {'hit' if h else 'MISS (compiled)'}")
