# ruff: noqa: E501
"""The image and deployment scripts pass their linters (hadolint, shellcheck), and the
Dockerfile keeps the properties the deployment relies on."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = [REPO / "scripts" / "ensure-docker.sh", REPO / "tests" / "docker" / "standin" / "build-standin.sh"]


def _tool(name: str) -> str:
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} not installed: wanted the test extra (pip install -e '.[test]')")
    return found


def test_the_dockerfile_is_hadolint_clean() -> None:
    r = subprocess.run([_tool("hadolint"), "--config", str(REPO / ".hadolint.yaml"), str(REPO / "Dockerfile")],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def test_hadolint_would_catch_a_regression(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        (REPO / "Dockerfile").read_text().replace("WORKDIR /opt/sparkpair/src", "RUN cd /opt/sparkpair/src")
    )
    r = subprocess.run(
        [_tool("hadolint"), "--config", str(REPO / ".hadolint.yaml"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and "DL3003" in r.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_are_shellcheck_clean_strict_and_documented(script: Path) -> None:
    r = subprocess.run([_tool("shellcheck"), str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    text = script.read_text()
    assert "set -euo pipefail" in text and "usage()" in text


def test_the_image_is_pinned_labelled_and_checks_sm121a() -> None:
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG VLLM_IMAGE_TAG=v0\.33\.0$", text, re.M)
    assert "FROM vllm/vllm-openai:${VLLM_IMAGE_TAG}" in text
    for label in (
        "io.sparkpair.vllm.image-tag",
        "io.sparkpair.overlay.version",
        "io.sparkpair.kernel-cache.targets",
    ):
        assert label in text
    assert "--gpu-name=sm_121a" in text and 'TORCH_CUDA_ARCH_LIST="12.1a"' in text
    assert "sparkpair kernels build --arch" in text and "--cache-dir /opt/sparkpair/triton-cache" in text
