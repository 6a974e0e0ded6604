# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""``sparkpair up`` stops within seconds when a node's container cannot start or exits, and
prints Docker's own account of it (State.Error, the exit code, the last log lines) for that
node; ``status`` shows the same. On the real engine of this machine, both nodes on its socket:

- the real ``compose.yaml``, whose containers need ``/dev/infiniband`` and an NVIDIA GPU this
  machine does not have: the worker's container cannot start (the engine refuses the device);
- the simulation override (tests/docker/compose.sim.yaml) with nothing waived and no
  checkpoint: each node's preflight fails, the node exits 3, and compose's restart policy
  restarts it.

Both run in about 2 minutes once the image is built (the tier builds it for its other tests).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from dockerlib import FABRIC_PREFIX, REPO, sh
from test_sim_pair import engine_limit, write_env

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

SOCK = "unix:///var/run/docker.sock"
SIM_NET, NET = FABRIC_PREFIX["test_sim_pair"], FABRIC_PREFIX["test_up_failures"]
"""test_sim_pair.py's fabric prefix (in the env files it writes), and this test's."""


def _cluster(tmp_path: Path, image: str, *, sim: bool, waive: bool) -> tuple[Path, str]:
    cache = tmp_path / "models"  # empty: no checkpoint
    cache.mkdir()
    head = write_env(
        tmp_path / "head.env", name="i36-head", rank=0, ip=SIM_NET + "11", image=image, cache=cache
    )
    worker = write_env(
        tmp_path / "worker.env", name="i36-worker", rank=1, ip=SIM_NET + "12", image=image, cache=cache
    )
    for p in (head, worker):
        text = p.read_text().replace(SIM_NET, NET)
        if not waive:
            text = re.sub(r"(?m)^SPARKPAIR_PREFLIGHT_WAIVE=.*$", "SPARKPAIR_PREFLIGHT_WAIVE=", text)
        p.write_text(text)
    project = f"i36up{uuid.uuid4().hex[:6]}"
    files = "[compose.yaml, tests/docker/compose.sim.yaml]" if sim else "[compose.yaml]"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        f"project: {project}\nproject_directory: {REPO}\ncompose_files: {files}\nverdict_timeout_s: 1500\n"
        f"nodes:\n  i36-worker: {{env_file: {worker}, docker: '{SOCK}'}}\n"
        f"  i36-head: {{env_file: {head}, docker: '{SOCK}'}}\n"
    )
    return cluster, project


def _cli(*args: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess[str], float]:
    import os

    env = dict(os.environ) | {
        "SIM_SUBNET": NET + "0/24", "SIM_HEAD_IP": NET + "11", "SIM_WORKER_IP": NET + "12",
        "SIM_HEALTH_IP": NET + "13", "SIM_MEMLOCK": str(engine_limit("Max locked memory")),
        "SIM_NOFILE": str(engine_limit("Max open files")), "COLUMNS": "200",
    }  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "sparkpair_cli.main", *args], capture_output=True, text=True,
                       env=env, timeout=timeout, cwd=REPO)  # fmt: skip
    return r, time.monotonic() - t0


def _down(cluster: Path, project: str) -> None:
    _cli("down", "-c", str(cluster), "--volumes")
    left = sh("docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}").stdout.split()
    if left:
        sh("docker", "rm", "-f", *left, check=False)
    sh("docker", "network", "rm", f"{project}_fabric", check=False)
    assert left == [], f"containers left after `sparkpair down`: {left}"


def test_a_node_whose_container_cannot_start_ends_up_within_60_s_with_dockers_error(
    sparkpair_image: str, tmp_path: Path
) -> None:
    cluster, project = _cluster(tmp_path, sparkpair_image, sim=False, waive=True)
    try:
        r, took = _cli("up", "-c", str(cluster), timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert took < 60, f"up took {took:.0f} s"
        # compose's error and the container's State.Error, named with the node
        assert "node i36-worker: docker compose up -d exited 1" in r.stderr, r.stderr
        assert "Error response from daemon" in r.stderr, r.stderr
        m = re.search(
            r"node i36-worker: container \S+-worker-1 \(worker\) created but never started; Docker: State.Error='([^']+)'",
            r.stderr,
        )
        assert m, r.stderr
        assert "Creating" not in r.stderr  # compose's progress lines are left out
        # nothing more was started: the head has no container
        names = sh(
            "docker",
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=com.docker.compose.project={project}",
        ).stdout.split()
        assert names == [f"{project}-worker-1"], names
        s, _ = _cli("status", "-c", str(cluster), timeout=120)
        assert s.returncode == 1 and m.group(1) in s.stdout, s.stdout
    finally:
        _down(cluster, project)


def test_a_node_whose_container_exits_ends_up_with_its_exit_code_and_last_log_lines(
    sparkpair_image: str, tmp_path: Path
) -> None:
    cluster, project = _cluster(tmp_path, sparkpair_image, sim=True, waive=False)
    try:
        r, took = _cli("up", "-c", str(cluster))
        assert r.returncode == 1, r.stdout + r.stderr
        # preflight fails (no RDMA device, no checkpoint) in well under a minute of CPU; up ends
        # on the first exit, not at the verdict's 1500 s
        assert took < 300, f"up took {took:.0f} s"
        m = re.search(
            r"node (i36-worker|i36-head): container \S+-(worker|head)-1 \((worker|head)\) (exited with exit code 3|\S+, restarted \d+ time\(s\) by its restart policy \(last exit code 3\))",
            r.stderr,
        )
        assert m, r.stderr
        assert re.search(rf"\| FAILED: node {m.group(1)}: \d+ of \d+ checks failed", r.stderr), r.stderr
        assert f"sparkpair node {m.group(1)} ({m.group(2)}): preflight failed" in r.stderr
    finally:
        _down(cluster, project)
