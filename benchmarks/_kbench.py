"""Shared recording for the kernel benchmarks (bench_router_gemm, bench_fp8_einsum).

Timing is :func:`sparkpair_overlay.numerics.graph_time_us` (CUDA-graph replay per call,
p20/p50/p80 over the replays), the same the probe uses; ``fn`` may rotate over several input
sets (``cold`` L2: the sets together exceed the L2 cache). This module holds the long-format
CSV columns and writer, the provenance fields, the memory roofline, and the GB10-shaped SM
budget (:func:`sm_stream`: a CUDA green context of GB10's 48 SMs).
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
    "sms",
    "mma_mode",
    "weight_gbps",
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
    """Append rows (long format) to a CSV, writing the header when the file is new. When an
    existing file's header lacks columns of :data:`FIELDS`, they are added at its end (only the
    header line is rewritten: older rows read as empty in them), so no value of a new row is
    dropped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    fields = FIELDS
    if not new:
        head, _, rest = path.read_bytes().partition(b"\n")  # bytes: the rows keep their line ends
        have = next(csv.reader([head.decode().rstrip("\r")]), [])
        missing = [c for c in FIELDS if c not in have]
        fields = have + missing
        if missing:
            end = b"\r\n" if head.endswith(b"\r") else b"\n"
            path.write_bytes(",".join(fields).encode() + end + rest)
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


#: GB10's SM count (NVIDIA DGX Spark / GB10 specification: 48 SMs; docs/reference/triton-gb10.md).
GB10_SMS = 48
#: GB10's memory bandwidth, GB/s (LPDDR5x, 273 GB/s: NVIDIA DGX Spark specification).
GB10_GBPS = 273.0


def sm_stream(sms: int) -> torch.cuda.Stream | None:
    """A stream whose kernels run on ``sms`` SMs of device 0 (a CUDA green context,
    ``torch.cuda.green_contexts.GreenContext``), or ``None`` for ``sms`` 0 (every SM). Work and
    CUDA graphs must be *captured* on this stream to stay on those SMs
    (:func:`sparkpair_overlay.numerics.graph_time_us` with ``stream=``).

    Raises:
        RuntimeError: this torch has no green contexts, or the device refuses ``sms``.
    """
    if not sms:
        return None
    try:
        from torch.cuda.green_contexts import GreenContext
    except ImportError as exc:
        raise RuntimeError(f"--sms {sms}: torch {torch.__version__} has no CUDA green contexts") from exc
    ctx = GreenContext.create(num_sms=sms, device_id=torch.cuda.current_device())
    _GREEN.append(ctx)  # the context must outlive its stream
    return ctx.Stream()  # type: ignore[no-any-return]


_GREEN: list[object] = []


def mma_mode() -> str:
    """How Triton builds MMAs in this process: ``DISABLE_MMA_V3=1`` (``mma.sync``, as on GB10; on
    sm_90 Triton 3.6 then upcasts fp8 to f16) or ``default`` (wgmma on sm_90)."""
    return "DISABLE_MMA_V3=1" if os.environ.get("DISABLE_MMA_V3", "") not in ("", "0") else "default"
