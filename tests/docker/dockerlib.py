# ruff: noqa: E501
"""Helpers shared by the docker tier's fixtures and tests."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _standin_tag() -> str:
    """``sparkpair-standin-cpu-<hash of tests/docker/standin/ and the Triton pin>``: an edited
    stand-in, or a new pin in pyproject.toml's ``kernels`` extra (which build-standin.sh
    installs), gets a new tag, so build-standin.sh (which reuses an existing tag) never serves a
    stale one."""
    h = hashlib.sha256()
    for f in sorted((REPO / "tests" / "docker" / "standin").iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    pin = sh(sys.executable, str(REPO / "scripts" / "triton_requirement.py")).stdout.strip()
    h.update(pin.encode())
    return f"sparkpair-standin-cpu-{h.hexdigest()[:10]}"


def sh(*argv: str, timeout: float = 1800, check: bool = True, **kw) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    """Run ``argv``; on failure raise with the command's output tail."""
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{(r.stdout + r.stderr)[-4000:]}")
    return r


STANDIN_TAG = _standin_tag()

FABRIC_PREFIX = {
    "test_sim_pair": "172.16.77.",
    "test_cluster_up": "172.16.78.",
    "test_cluster_sync": "172.16.79.",
    "test_peer_death": "172.16.80.",
    "test_up_failures": "172.16.81.",
}
"""Each docker-tier test's fixed fabric: a /24 (``<prefix>0/24``), one per test, so a network
left by one test never blocks another. All lie in 172.16.0.0/16 (private, RFC 1918) and in none
of Docker's default address pools (172.17.0.0/16 to 172.31.0.0/16, then /20s of 192.168.0.0/16:
dockerd's ``default-address-pools``, https://docs.docker.com/reference/cli/dockerd/). A network
Docker numbers itself (a compose project's default one) takes the pool after the last one it gave
(Docker 20.10 gave 172.18/16, ..., 172.31/16, then 192.168.0/20, ... in turn), so a fixed subnet
inside those pools fails with "Pool overlaps" once enough such networks were made: in a CI run the
sim pair's old 172.31.77.0/24 did. tests/docker/test_fabric_subnets.py proves these are free with
every default pool taken."""


def context_hash() -> str:
    """12 hex digits of the image's build context (what the Dockerfile copies): the sparkpair image
    is rebuilt when any of it changes, and reused otherwise."""
    h = hashlib.sha256()
    for top in ("Dockerfile", "pyproject.toml", "README.md", "overlay", "healthchecks", "scripts", "configs"):
        p = REPO / top
        files = (
            [p]
            if p.is_file()
            else sorted(x for x in p.rglob("*") if x.is_file() and "__pycache__" not in x.parts)
        )
        for f in files:
            h.update(str(f.relative_to(REPO)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:12]
