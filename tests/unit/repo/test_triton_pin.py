"""One Triton, the image's: pyproject.toml's ``kernels`` extra is the one place the project names
it, and every environment the tests run kernels in carries that version.

vLLM 0.33 requires torch 2.14.0, whose wheel metadata requires ``triton~=3.8.0``
(docs/reference/triton-gb10.md), so the image compiles our kernels with Triton 3.8. The pin is
read by scripts/triton_requirement.py (``.venv-stack``, the docker stand-in) and checked by the
Dockerfile and ``sparkpair kernels build`` (``triton_problem``). Here: no install surface names
another Triton, and the installed venvs hold the pinned one. The H200 the GPU tests run on is the
named exception (torch 2.11, Triton 3.6, nothing installable there): its numbers measure
structure (benchmarks/README.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PIN_RE = re.compile(r"""\btriton\s*==\s*([0-9][0-9A-Za-z.+-]*)""")


def _pin() -> str:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "triton_requirement.py")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _install_surfaces() -> list[Path]:
    """Files that install or pin packages: requirement lists, pyproject, Dockerfiles, the setup
    and stand-in scripts, and the CLI and overlay sources (which name the pin in messages)."""
    files = [REPO / "pyproject.toml", REPO / "Dockerfile"]
    files += sorted(REPO.glob("scripts/*.sh")) + sorted(REPO.glob("scripts/*.txt"))
    files += sorted((REPO / "tests" / "docker" / "standin").iterdir())
    files += sorted((REPO / "scripts" / "sparkpair_cli").rglob("*.py"))
    files += sorted((REPO / "overlay").rglob("*.py"))
    return [f for f in files if f.is_file()]


def test_the_kernels_extra_pins_one_exact_triton() -> None:
    pin = _pin()
    assert re.fullmatch(r"triton==3\.8\.\d+", pin), pin  # torch 2.14's triton~=3.8.0


def test_no_install_surface_names_another_triton() -> None:
    pin = _pin().split("==")[1]
    seen = {
        f"{f.relative_to(REPO)}: triton=={v}"
        for f in _install_surfaces()
        for v in PIN_RE.findall(f.read_text(errors="replace"))
        if v != pin
    }
    assert not seen, f"pinned elsewhere than pyproject.toml's kernels extra ({pin}): {sorted(seen)}"


def test_this_venv_runs_the_pinned_triton() -> None:
    triton = pytest.importorskip("triton")
    assert f"triton=={triton.__version__}" == _pin()
    from sparkpair_overlay.kernels._common import triton_problem, triton_requirement

    assert triton_requirement() == _pin() and triton_problem() == ""


def test_the_stack_venv_runs_the_pinned_triton() -> None:
    py = REPO / ".venv-stack" / "bin" / "python"
    if not py.exists():
        pytest.skip("no .venv-stack here (scripts/setup-stack.sh makes it; the stack tier checks it too)")
    out = subprocess.run([str(py), "-c", "import triton; print(triton.__version__)"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"triton=={out.stdout.strip()}" == _pin(), out.stdout
