"""The Docker engine sends exactly the build context the unit tier checks
(tests/unit/repo/test_build_context.py reads it through the Docker SDK's .dockerignore
matching): a ``FROM scratch`` image of ``COPY . /ctx`` from a checkout with the planted
settings files, listed with ``docker export``. About 10 s; needs no base image."""

from __future__ import annotations

import io
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest
from build_context import context_files, held_secret, planted_checkout
from dockerlib import REPO, sh

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]


def test_the_engine_sends_the_sdks_context_and_no_planted_settings(
    docker_engine: None, tmp_path: Path
) -> None:
    root = tmp_path / "checkout"
    markers = planted_checkout(REPO, root)
    (tmp_path / "Dockerfile.ctx").write_text("FROM scratch\nCOPY . /ctx/\n")
    tag = f"i36-context-{uuid.uuid4().hex[:8]}"
    cid = ""
    try:
        sh("docker", "build", "-q", "-t", tag, "-f", str(tmp_path / "Dockerfile.ctx"), str(root), timeout=300)
        cid = sh("docker", "create", tag, "none").stdout.strip()
        tar_bytes = subprocess.run(["docker", "export", cid], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as t:
            sent = {
                m.name.removeprefix("ctx/")
                for m in t.getmembers()
                if m.isfile() and m.name.startswith("ctx/")
            }
    finally:
        if cid:
            sh("docker", "rm", "-f", cid, check=False)
        sh("docker", "rmi", "-f", tag, check=False)
    # The SDK's set also holds the Dockerfile and .dockerignore, which the engine always
    # receives and reads but does not let COPY take when .dockerignore excludes them.
    assert sent == context_files(root) - {"Dockerfile", ".dockerignore"}
    assert {p for p in sent if held_secret(root / p, markers)} == set()
