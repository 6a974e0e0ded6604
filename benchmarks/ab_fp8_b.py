"""A/B of fp8_einsum configs against the kernel of an earlier commit, in one process (H200).

Exploration tool of 2026-11-30 (b); results in benchmarks/results/explore-2026-11-30b/run*-ab_fp8_b*.log.
The earlier kernel is loaded from ``overlay/sparkpair_overlay/kernels/_old_fp8.py``, made with
``git show bb37805:overlay/sparkpair_overlay/kernels/fp8_einsum.py`` and its custom-op name
changed to ``sparkpair::fp8_einsum_old_ab`` (one op name per process).

Usage: python benchmarks/ab_fp8_b.py T [ROUNDS]
"""

import sys

import torch
from sparkpair_overlay.kernels import _old_fp8 as old
from sparkpair_overlay.kernels import fp8_einsum as new
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro

T = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
G, D, R = 4, 1024, 4096
OLD = ("t16_d64_r4_s4", "t32_d64_r4_s4", "t16_d32_r4_s4") if T <= 128 else ("t128_d64_s4", "t64_d128_s4")


def _wanted(c) -> bool:
    if T <= 128:
        return c["BLOCK_T"] <= 32
    return c["SPLIT_R"] == 1 and c["BLOCK_T"] >= 64 and c["BLOCK_T"] * c["BLOCK_D"] <= 8192


flops = 2 * T * G * D * R
for enc in ("fp32", "int32-bcast", "int32"):
    recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(T, G, D, R, recipe, enc, seed=1)
    ref = fp8_einsum_reference(a[:512], sa_f[:512], w, sw_f)
    out = torch.empty((T, G, D), dtype=torch.bfloat16, device="cuda")
    provs = [("old", c.name) for c in old.FP8_EINSUM_CONFIGS if c.name in OLD]
    provs += [("new", c.name) for c in new.FP8_EINSUM_CONFIGS if _wanted(c)]
    for rnd in range(ROUNDS):
        for which, name in provs:
            mod = old if which == "old" else new

            def fn(i, mod=mod, name=name, a=a, sa=sa, w=w, sw=sw, out=out, recipe=recipe):
                return mod.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, name)

            fn(0)
            err = rel_fro(out[:512], ref)
            p20, p50, p80 = graph_time_us(fn, calls=5 if T > 512 else 20, reps=8 if T > 512 else 15)
            tf = flops / p50 / 1e6
            print(f"{enc} round{rnd} {which} {name:26s} p50 {p50:8.1f} us {tf:6.1f} TFLOP/s err {err:.2e}")
