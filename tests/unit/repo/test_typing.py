"""mypy in strict mode on the package folders (the settings are pyproject.toml's ``[tool.mypy]``).

Each folder is checked as it is imported (``overlay/sparkpair_overlay`` is the package
``sparkpair_overlay``). A cold run analyses torch's sources and takes minutes; mypy's cache
(``.mypy_cache``, git-ignored) makes a repeat run take seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

#: Package folders that must pass ``mypy --strict``.
STRICT_PACKAGES = [
    "overlay/sparkpair_overlay",
    "healthchecks/sparkpair_serving",
    "healthchecks/sparkpair_health",
]

pytestmark = pytest.mark.slow


def _need_mypy() -> None:
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.fail("mypy is not installed; it is pinned in the 'test' extra (scripts/setup.sh installs it)")


@pytest.mark.parametrize("folder", STRICT_PACKAGES)
def test_package_passes_mypy_strict(folder: str) -> None:
    _need_mypy()
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", folder],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert r.returncode == 0, f"mypy --strict {folder}:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"


def test_the_same_command_fails_on_an_untyped_function(tmp_path: Path) -> None:
    _need_mypy()
    pkg = tmp_path / "untyped_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("def f(x):\n    return x\n")
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(REPO / "pyproject.toml"), str(pkg)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1 and "[no-untyped-def]" in r.stdout, r.stdout + r.stderr
