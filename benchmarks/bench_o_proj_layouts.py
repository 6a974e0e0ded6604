"""Our o_proj on every ``wo_a`` layout vLLM 0.33 can hand it (issue 30): is the 2-D layout served as fast?

Where a switch leaves DeepSeek-V4's ``wo_a`` in its 2-D checkpoint layout (``--linear-backend triton |
cutlass``: e4m3 ``[G*D, R]`` with e8m0 128x128 block scales ``[G*D/128, R/128]``; ``b12x``: the same with
fp32 scales), the overlay's dispatcher hands its kernel the same bytes viewed ``[G, D, R]`` /
``[G, D/128, R/128]`` (:func:`sparkpair_overlay.o_proj_route.triton_operands`). This benchmark times that
against the 3-D layout GB10 serves by default (DeepGEMM's per-row int32 copies of the same block scales)
and the fp32 block layout of ``VLLM_USE_DEEP_GEMM_E8M0=0``, with both activation recipes, at DeepSeek-V4-
Flash TP=2 (G=4, D=1024, R=4096), all built from one checkpoint-form ``wo_a`` (the same bytes and
exponents) by :mod:`sparkpair_overlay.probe.operands`, each call through the dispatcher's own route and
hand-over (the route is asserted ``triton`` for a plan on capability 12.1), against fp64.

GB10's plan: the kernel's capability cache is set to 12.1 for the device first, so no compute capability
9.x path is taken on the H200. Timing: CUDA-graph replay per call
(:func:`sparkpair_overlay.numerics.graph_time_us`),
``l2=warm`` (one operand set) and, for T <= 128, ``l2=cold`` (calls rotate over 8 weight copies, 134 MB, more
than the H200's 50 MB L2). The default layout is timed twice in the run (``w3-ue8m0-row`` and
``w3-ue8m0-row#2``): their difference is the run-to-run spread the plan's decision margin must exceed.

Usage: python benchmarks/bench_o_proj_layouts.py [--out benchmarks/results/o_proj_layouts.csv]
       [--ts 1,36,2048]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _kbench import append_rows, env_fields
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.numerics import graph_time_us, rel_fro
from sparkpair_overlay.o_proj_route import einsum_route, triton_operands, weight_layout
from sparkpair_overlay.plan import OProjDecision
from sparkpair_overlay.probe import operands as ops

G, D, R = 4, 1024, 4096
LAYOUTS = ("w3-ue8m0-row", "w3-ue8m0-row#2", "w3-fp32-block", "w2-e8m0-block", "w2-fp32-block")
RECIPES = ((1, 1, 128), (1, 128, 128))
COLD_SETS = 8


def gb10_plan() -> None:
    """Make the kernel dispatch as on GB10 (capability 12.1: none of the 9.x-only paths)."""
    cache = getattr(fe, "_CAPABILITY", None)
    if cache is not None:
        cache[torch.cuda.current_device()] = (12, 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/o_proj_layouts.csv"))
    ap.add_argument("--ts", default="1,36,2048")
    args = ap.parse_args()
    ts = [int(x) for x in args.ts.split(",")]
    gb10_plan()
    env = env_fields()
    command = "python " + " ".join(sys.argv)
    w2d, exps = ops.checkpoint_wo_a(G, D, R, seed=1)
    copies = [ops.checkpoint_wo_a(G, D, R, seed=100 + i) for i in range(COLD_SETS)]
    probe_out = torch.empty(1, G, D, dtype=torch.bfloat16, device="cuda")  # only its D is read
    weights: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {}
    for name in LAYOUTS:  # one checkpoint, each layout made from it; cold copies made the same way
        layout = name.split("#")[0]
        sets = []
        for cw, ce in [(w2d, exps), *copies]:
            w, sw, _ = ops.post_process_wo_a(layout, cw, ce, G, device="cuda", use_vllm=False)
            assert weight_layout(w, sw, G, D) == layout
            sets.append((w, sw))
        weights[name] = sets
    rows = []
    for recipe in RECIPES:
        decision = OProjDecision("triton", recipe, recipe != (1, 1, 128), "bench")
        for t in ts:
            a, sa, _ = ops.activation(recipe, t, G, R, device="cuda", seed=t, use_vllm=False)
            ref = ops.reference(a, sa, w2d.cuda(), exps, G)
            for name in LAYOUTS:
                w, sw = weights[name][0]
                out = torch.full((t, G, D), float("nan"), dtype=torch.bfloat16, device="cuda")
                route = einsum_route(decision, (12, 1), "bhr,hdr->bhd", (a, sa), (w, sw), out, recipe)
                assert route[0] == "triton", route
                a2, b2, krecipe = triton_operands((a, sa), (w, sw), out)
                fe.fp8_einsum("bhr,hdr->bhd", a2, b2, out, recipe=krecipe)
                torch.cuda.synchronize()
                err = rel_fro(out, ref)
                cold = [triton_operands((a, sa), ws, probe_out)[1] for ws in weights[name][1:]]
                cold = cold if t <= 128 else []
                for l2, use in (("warm", [b2]), ("cold", cold)):
                    if not use:
                        continue

                    def call(i: int, use=use, a2=a2, out=out, krecipe=krecipe) -> None:
                        fe.fp8_einsum("bhr,hdr->bhd", a2, use[i % len(use)], out, recipe=krecipe)

                    p20, p50, p80 = graph_time_us(call, warmup=len(use))
                    rows.append({"kernel": "fp8_einsum", "provider": f"dispatcher:{name}",
                                 "shape": f"T={t} G={G} D={D} R={R} recipe={','.join(map(str, recipe))}",
                                 "l2": l2, "p20_us": round(p20, 3), "p50_us": round(p50, 3),
                                 "p80_us": round(p80, 3), "rel_fro_err": f"{err:.3e}", **env,
                                 "command": command})
                    print(f"{name:16s} recipe {recipe} T={t:5d} {l2:4s} p50 {p50:8.2f} us  err {err:.2e}",
                          flush=True)
    append_rows(args.out, rows)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
