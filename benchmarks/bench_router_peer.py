"""Router GEMM side by side with the issue-3 peer: vLLM's CuteDSL low-latency bf16 kernel.

The peer is ``ll_bf16_gemm`` from vLLM 0.32.0 ``model_executor/kernels/linear/cute_dsl/ll_bf16.py``
(GateLinear's Tier 1, which vLLM enables on Hopper and family-100 Blackwell, not on GB10), with
PDL as vLLM runs it on sm_90. Its three source files are loaded verbatim at benchmark time through
``tests/gpu/vllm_harness.py`` (set ``PEER``; ``current_platform`` and ``current_stream`` are shims
there) and are never copied into the project. It needs CuteDSL: ``nvidia-cutlass-dsl`` 4.8.0 with
its ``-libs-base``, ``-libs-core`` and ``-libs-cu13`` wheels, ``quack-kernels`` 0.6.5,
``apache-tvm-ffi`` 0.1.11 and ``torch-c-dlpack-ext`` importable (see benchmarks/README.md for how
they reach the GPU machine).

Providers, same run, CUDA-graph replay per call (_kbench.graph_time_us), warm L2, bf16 weight
[256, 4096] (DeepSeek-V4-Flash gate): ``peer_cutedsl_ll_bf16``, ``auto`` (our public dispatch),
``cublas`` (``torch.mm(x, W.T, out_dtype=fp32)``, what GB10 gets). Each row carries the max
relative error vs fp64; the summary prints ours / peer.

Usage: python benchmarks/bench_router_peer.py [--out benchmarks/results/router_gemm.csv]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "gpu"))
import vllm_harness  # noqa: E402
from _kbench import append_rows, env_fields  # noqa: E402
from sparkpair_overlay.kernels import router_gemm as rg  # noqa: E402
from sparkpair_overlay.numerics import graph_time_us  # noqa: E402

N, K = 256, 4096
MS = (1, 2, 4, 8, 16, 32, 64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(HERE / "results" / "router_gemm.csv"))
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    root, where = vllm_harness.vllm_source_root(vllm_harness.PEER.files)
    if root is None:
        raise SystemExit(f"bench_router_peer: {where}")
    cap = torch.cuda.get_device_capability()
    state = vllm_harness.load(root, vllm_harness.PEER, "cuda", cap)
    peer = state["modules"]["vllm.model_executor.kernels.linear.cute_dsl.ll_bf16"]
    if not peer.is_available():
        raise SystemExit("bench_router_peer: CuteDSL (cutlass) is not importable here")
    env = env_fields()
    print(f"# {env['gpu']} torch {env['torch']} triton {env['triton']}; peer from {where}", flush=True)
    rows, summary = [], []
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(N, K, device="cuda", generator=gen) * K**-0.5).to(torch.bfloat16)
    for m in MS:
        x = torch.randn(m, K, device="cuda", generator=gen).to(torch.bfloat16)
        ref = x.double() @ w.double().t()
        fns = {
            "peer_cutedsl_ll_bf16": lambda i, x=x: peer.ll_bf16_gemm(x, w, torch.float32),
            "auto": lambda i, x=x: rg.router_gemm(x, w),
            "cublas": lambda i, x=x: torch.mm(x, w.t(), out_dtype=torch.float32),
        }
        p50s = {}
        for prov, fn in fns.items():
            try:
                out = fn(0)
                torch.cuda.synchronize()
                err = float((out.double() - ref).abs().max() / ref.abs().max())
                p20, p50, p80 = graph_time_us(fn, calls=50, reps=20)
            except Exception as exc:  # noqa: BLE001 - record and go on
                print(f"  M={m} {prov}: FAILED {type(exc).__name__}: {exc}", flush=True)
                continue
            p50s[prov] = p50
            rows.append(
                dict(
                    kernel="router_gemm",
                    provider=prov,
                    shape=f"M={m},N={N},K={K},W=bf16",
                    l2="warm",
                    p20_us=p20,
                    p50_us=p50,
                    p80_us=p80,
                    max_rel_err=err,
                    command=args.command,
                    **env,
                )
            )
            line = f"  M={m:3d} {prov:22s} p50 {p50:7.2f} us (p20 {p20:.2f}, p80 {p80:.2f})  err {err:.2e}"
            print(line, flush=True)
        if "peer_cutedsl_ll_bf16" in p50s and "auto" in p50s:
            summary.append((m, p50s["auto"], p50s["peer_cutedsl_ll_bf16"], p50s.get("cublas", float("nan"))))
    vllm_harness.restore(state)
    append_rows(Path(args.out), rows)
    print("\n# ours / peer (bar: <= 1.2 at every M <= 32):")
    for m, ours, peer_us, cub in summary:
        ratio = ours / peer_us
        print(f"M={m:3d}: ours {ours:6.2f} us  peer {peer_us:6.2f} us  ratio {ratio:5.2f}  cuBLAS {cub:6.2f}")


if __name__ == "__main__":
    main()
