# ruff: noqa: E501
"""Helpers shared by the docker tier's fixtures and tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDIN_TAG = "sparkpair-standin-cpu"


def sh(*argv: str, timeout: float = 1800, check: bool = True, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """Run ``argv``; on failure raise with the command's output tail."""
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-4000:]}")
    return r
