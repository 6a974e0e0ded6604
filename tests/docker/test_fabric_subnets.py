"""The docker tier's fixed fabric subnets (dockerlib.FABRIC_PREFIX) can be created however many
networks Docker has numbered itself: on the real engine, every default address pool is taken by
networks made without a subnet (as compose makes a project's default network), then each fixed
/24 is created. The subnet the sim pair used before (172.31.77.0/24, inside the default pools)
fails there with Docker's "Pool overlaps", as it did in a CI run.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from dockerlib import FABRIC_PREFIX, sh

pytestmark = pytest.mark.docker

MAX_AUTO = 64
"""More networks than Docker 20.10's default pools hold (15 /16s of 172.17-172.31, 16 /20s of
192.168.0.0/16): the loop below stops at the engine's "no pool" answer long before."""


@pytest.fixture
def every_default_pool_taken(docker_engine: None) -> Iterator[list[str]]:
    """Networks without a subnet, made until the engine has no default pool left; removed after."""
    tag = uuid.uuid4().hex[:6]
    made: list[str] = []
    try:
        for i in range(MAX_AUTO):
            name = f"sp-pool-{tag}-{i}"
            r = sh("docker", "network", "create", name, check=False, timeout=60)
            if r.returncode != 0:
                assert "could not find an available, non-overlapping IPv4 address pool" in r.stderr, r.stderr
                break
            made.append(name)
        else:
            pytest.fail(f"the engine still numbered a network after {MAX_AUTO}: more pools than known")
        assert made, "the engine numbered no network at all"
        yield made
    finally:
        for name in made:
            sh("docker", "network", "rm", name, check=False, timeout=60)


def _create(subnet: str) -> tuple[int, str]:
    name = f"sp-fabric-{uuid.uuid4().hex[:6]}"
    r = sh("docker", "network", "create", "--subnet", subnet, name, check=False, timeout=60)
    if r.returncode == 0:
        sh("docker", "network", "rm", name, timeout=60)
    return r.returncode, r.stderr


def test_every_fixed_fabric_is_free_with_every_default_pool_taken(
    every_default_pool_taken: list[str],
) -> None:
    subnets = [prefix + "0/24" for prefix in FABRIC_PREFIX.values()]
    assert len(set(subnets)) == len(subnets), f"two tests share a fabric: {FABRIC_PREFIX}"
    failed = {s: err.strip() for s in subnets for rc, err in [_create(s)] if rc != 0}
    assert not failed, failed
    # The old fabric, inside the default pools, is what the engine refuses here.
    rc, err = _create("172.31.77.0/24")
    assert rc != 0 and "Pool overlaps" in err, (rc, err)
