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
        LaneError: pip could not download it (the message carries pip's last lines), or the wheel
            is not one (:func:`check_wheel`).
    """
    cache = cache or WHEEL_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    have = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if have:
        return check_wheel(have[-1])
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
    return check_wheel(have[-1])


def check_wheel(wheel: Path) -> Path:
    """``wheel`` when it is a readable wheel: a zip archive with a UTF-8 ``*.dist-info/METADATA``.

    Raises:
        LaneError: naming the file, what is wrong and the way out (delete it; the next run downloads
            it again): a truncated or foreign file in the cache would otherwise stop every run.
    """
    try:
        with zipfile.ZipFile(wheel) as zf:
            meta = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
            if not meta:
                raise ValueError("no *.dist-info/METADATA in it")
            zf.read(meta[0]).decode("utf-8")
    except (OSError, ValueError, zipfile.BadZipFile) as exc:  # UnicodeDecodeError is a ValueError
        raise LaneError(
            f"{wheel} is not a readable wheel ({type(exc).__name__}: {exc}); wanted the vLLM release's "
            "wheel: delete the file and run again to download it"
        ) from None
    return wheel


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
