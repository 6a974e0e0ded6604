"""Shared recording for the kernel benchmarks (bench_router_gemm, bench_fp8_einsum).

Timing is :func:`sparkpair_overlay.numerics.graph_time_us` (CUDA-graph replay per call,
p20/p50/p80 over the replays), the same the probe uses; ``fn`` may rotate over several input
sets (``cold`` L2: the sets together exceed the L2 cache). This module holds the long-format
CSV columns and writer, the provenance fields, and the memory roofline.
"""

from __future__ import annotations

import csv
import os
import platform
import subprocess
from pathlib import Path

import torch

FIELDS = [
    "kernel",
    "provider",
    "shape",
    "l2",
    "p20_us",
    "p50_us",
    "p80_us",
    "gbps",
    "tflops",
    "roofline_us",
    "roofline_frac",
    "max_rel_err",
    "rel_fro_err",
    "gpu",
    "torch",
    "triton",
    "cuda",
    "git_sha",
    "command",
]


def git_sha() -> str:
    """The checkout's HEAD (``SPARKPAIR_GIT_SHA`` wins: the device copy has no .git)."""
    if os.environ.get("SPARKPAIR_GIT_SHA"):
        return os.environ["SPARKPAIR_GIT_SHA"]
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                cwd=Path(__file__).parent,
            ).stdout.strip()
            or "unknown"
        )
    except OSError:
        return "unknown"


def env_fields() -> dict[str, str]:
    import triton

    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": str(torch.version.cuda),
        "git_sha": git_sha(),
    }


def append_rows(path: Path, rows: list[dict]) -> None:
    """Append rows (long format) to a CSV, writing the header when the file is new; an existing
    file keeps its own header's columns (so files made before a column was added stay aligned)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    fields = FIELDS
    if not new:
        with path.open(newline="") as f:
            fields = next(csv.reader(f), FIELDS)
    with path.open("a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in r.items()})


def measure_hbm_gbps() -> float:
    """Device-to-device copy bandwidth (read + write), GB/s: the memory roofline used here."""
    n = 1 << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        b.copy_(a)
    e1.record()
    e1.synchronize()
    return 2 * n * 10 / (e0.elapsed_time(e1) * 1e-3) / 1e9
