"""The release's stack venv (``scripts/setup-stack.sh --vllm VERSION``) and the ``stack`` tier run in it."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def requirements_file(version: str) -> Path:
    """``scripts/stack-requirements-<version>.txt``."""
    return REPO / "scripts" / f"stack-requirements-{version}.txt"


def write_requirements(version: str, chosen: dict[str, str], needs_nvcc: bool) -> Path:
    """Write the release's stack requirements (the wheel, its FlashInfer, a real nvcc when its DeepGEMM
    asks for one) beside the shared file; returns the path."""
    path = requirements_file(version)
    lines = [
        f"# The `stack` tier's venv for vLLM {version} (.venv-stack-{version}), written by",
        f"# scripts/vllm-lane.sh on {time.strftime('%Y-%m-%d')}: scripts/stack-requirements.txt (shared by",
        "# every release) plus these.",
        "# Name every substitute in its record (sparkpair_overlay.versions.RELEASES) and say why here.",
        "-r stack-requirements.txt",
        f"vllm=={version}",
        f"flashinfer-python=={chosen.get('flashinfer-python', '')}",
    ]
    if needs_nvcc:
        lines.append("nvidia-cuda-nvcc==13.0.88")
    path.write_text("\n".join(lines) + "\n")
    return path


def suggested_record(
    version: str, subs: Sequence[str], nvcc: tuple[int, int] | None, owner: str | None
) -> str:
    """The ``versions.RELEASES`` entry to add for a release the lane met for the first time."""
    return (
        f'Release("{version}", "stack", PATCH, (substitutes: {"; ".join(subs) or "none"}), '
        f"deepgemm_min_nvcc={nvcc}, o_proj_owner={owner!r})"
    )


def run_stack(version: str, log: Callable[[str], None]) -> tuple[bool, str]:
    """Make the release's stack venv and run the stack tier in it: ``(passed, summary line)``."""
    t0 = time.monotonic()
    setup = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-stack.sh"), "--vllm", version], capture_output=True, text=True
    )
    for line in (setup.stdout + setup.stderr).splitlines():
        if line.startswith("sparkpair:"):
            log(f"  {line}")
    if setup.returncode != 0:
        return False, f"scripts/setup-stack.sh --vllm {version} failed (rc {setup.returncode})"
    listed = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-stack.sh"), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    venv = next(ln.split()[1] for ln in listed if ln.split() and ln.split()[0] == version)
    proc = subprocess.run(
        [f"{venv}/bin/python", "-m", "pytest", "tests/stack", "-m", "stack", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if re.search(r" in [0-9.]+s", ln)]
    for ln in proc.stdout.splitlines():
        if ln.startswith(("FAILED", "ERROR")):
            log(f"  {ln}")
    minutes = (time.monotonic() - t0) / 60
    summary = (
        lines[-1].strip("= ") if lines else f"no pytest summary (rc {proc.returncode})"
    ) + f"; {minutes:.1f} min"
    return proc.returncode == 0, summary
