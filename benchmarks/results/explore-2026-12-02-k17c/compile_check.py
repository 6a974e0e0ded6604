"""Compile proto_prefill.py's candidates (no GPU) for sm_90a and sm_121a: registers, shared bytes.

usage (repo root, this machine):
    PYTHONPATH=overlay:scripts:healthchecks python benchmarks/results/explore-2026-12-02-k17c/compile_check.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from sparkpair_overlay.kernels import aot

sys.path.insert(0, str(Path(__file__).parent))
import proto_prefill as pp  # noqa: E402

for arch in ("sm_90a", "sm_121a"):
    for name, p in {**pp.PROTOS, **pp.PROTOS2}.items():
        for enc in ("fp32", "int32-bcast"):
            kind = 0 if enc == "fp32" else 1
            sd = torch.float32 if kind == 0 else torch.int32
            M = aot._Mock
            args = (
                M(torch.bfloat16),
                M(torch.float8_e4m3fn),
                M(sd),
                M(torch.float8_e4m3fn),
                M(sd),
                8192,
                4,
                1024,
                4096,
                4096,
                1024,
                4096,
                4096,
                7,
                7,
                7,
                1024 * 32 if kind == 0 else 1024 * 8,
                32 if kind == 0 else 1,
                1 if kind == 0 else 1024,
            )
            kw = dict(
                SA_KIND=kind,
                SW_KIND=kind,
                BLOCK_T=p["bt"],
                BLOCK_D=p["bd"],
                BLOCK_R=128,
                GROUP_T=p.get("gt", 8),
                STAGES=p["st"],
                TMA=p.get("tma", True),
                PERSIST=p.get("persist", False),
                NUM_PROGS=264,
                WS=p.get("ws", False),
                FLATTEN=p.get("flat", False),
                SW_ROWS_PER_SCALE=128 if kind == 0 else 1,
            )

            pp._proto_kernel.device_caches.pop(f"aot-{arch}", None)
            try:
                with aot._target_driver(arch, None):
                    k = pp._proto_kernel.warmup(*args, grid=(1,), **kw, num_warps=p["w"], num_stages=p["st"])
                    if hasattr(k, "result"):
                        k = k.result()
                regs, spills = aot._resource_usage(k.asm["cubin"])
                print(
                    f"{arch},{name},{enc},ok,regs={regs},spill={spills},shared={k.metadata.shared}",
                    flush=True,
                )
            except Exception as exc:  # noqa: BLE001
                msg = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
                print(f"{arch},{name},{enc},FAILED {type(exc).__name__}: {msg[:200]}", flush=True)
