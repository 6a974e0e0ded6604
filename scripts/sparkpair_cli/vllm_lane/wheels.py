"""A vLLM release's wheel: downloaded once (``pip download --no-deps``) and read without installing
or importing it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from sparkpair_overlay.targets import Reader

from .findings import LaneError

WHEEL_CACHE = Path.home() / ".cache" / "sparkpair" / "vllm-wheels"


def fetch_wheel(version: str, cache: Path | None = None) -> Path:
    """The vLLM ``version`` wheel for this machine, downloaded once into ``cache`` (default
    :data:`WHEEL_CACHE`; ``pip download --no-deps``, whose HTTP cache also keeps it).

    Raises:
        LaneError: pip could not download it (the message carries pip's last lines).
    """
    cache = cache or WHEEL_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    have = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if have:
        return have[-1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(cache),
            f"vllm=={version}",
        ],
        capture_output=True,
        text=True,
    )
    have = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if proc.returncode != 0 or not have:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise LaneError(
            f"pip could not download vllm=={version} (rc {proc.returncode}); wanted a release the "
            f"package registry has:\n{tail}"
        )
    return have[-1]


def wheel_reader(wheel: Path) -> Reader:
    """``read(path)`` of a file inside ``wheel`` (``vllm/utils/deep_gemm.py``), or ``None``."""
    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())

    def read(path: str) -> str | None:
        return zf.read(path).decode("utf-8", errors="replace") if path in names else None

    return read


def wheel_requires(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines (its METADATA)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]
