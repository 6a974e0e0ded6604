"""The typing gate (STYLE.md): ``mypy --strict`` passes on each package folder listed here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PACKAGES = ["healthchecks/sparkpair_health"]
"""Package folders held to ``mypy --strict`` (run from the folder's parent, so imports resolve)."""


@pytest.mark.parametrize("folder", PACKAGES)
def test_mypy_strict_passes(folder: str, tmp_path: Path) -> None:
    pkg = REPO / folder
    res = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), pkg.name],
        cwd=pkg.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if "No module named mypy" in res.stderr:
        pytest.fail("mypy is not installed; it is pinned in the 'test' extra (scripts/setup.sh installs it)")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
