"""The style gate (STYLE.md): ruff's lint rules from pyproject.toml hold over the whole tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed; it is pinned in the 'test' extra (scripts/setup.sh installs it)")
    res = subprocess.run([ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
