# ruff: noqa: E501
"""``sparkpair model sync`` and ``model check`` between two nodes' engines (the worker's over
ssh): a generated checkpoint laid out as a Hugging Face snapshot (symlinks into blobs/) on
the head's model cache is copied over the simulated fabric to the worker's cache, arrives as
plain files, and passes the check on both nodes; a shard cut short and a file removed on the
worker fail, naming the node and the files."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from dockerlib import FABRIC_PREFIX, REPO, sh
from test_cluster_up import _env, ssh_engine  # noqa: F401  (ssh_engine: the module fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(900)]

NET = FABRIC_PREFIX["test_cluster_sync"]
SUBNET, HEAD_IP, WORKER_IP = NET + "0/24", NET + "11", NET + "12"
REV = "0" * 40


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkpair_cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=600, cwd=REPO)  # fmt: skip


def test_a_snapshot_synced_over_the_fabric_passes_on_both_nodes_and_a_damaged_copy_is_named(
    ssh_engine: tuple[str, dict[str, str]],  # noqa: F811
    sparkpair_image: str,
    model_cache: Path,
    tmp_path: Path,  # noqa: F811
) -> None:
    ssh_url, env = ssh_engine
    a, b = tmp_path / "cache-a", tmp_path / "cache-b"
    repo = a / "hub" / "models--t--tiny"
    snap = repo / "snapshots" / REV
    (repo / "blobs").mkdir(parents=True)
    snap.mkdir(parents=True)
    b.mkdir()
    files = sorted(p.name for p in (model_cache / "tiny").iterdir() if p.is_file())
    for i, name in enumerate(files):
        shutil.copy2(model_cache / "tiny" / name, repo / "blobs" / f"blob{i}")
        (snap / name).symlink_to(Path("../../blobs") / f"blob{i}")
    shard = next(n for n in files if n.endswith(".safetensors"))
    head = _env(
        tmp_path / "head.env",
        name="sim-head",
        rank=0,
        ip=HEAD_IP,
        image=sparkpair_image,
        cache=a,
        subnet=SUBNET,
    )
    worker = _env(
        tmp_path / "worker.env",
        name="sim-worker",
        rank=1,
        ip=WORKER_IP,
        image=sparkpair_image,
        cache=b,
        subnet=SUBNET,
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes:\n"
        f"  sim-worker: {{env_file: {worker}, docker: '{ssh_url}'}}\n"
        f"  sim-head: {{env_file: {head}, docker: 'unix:///var/run/docker.sock'}}\n"
    )
    net = f"wt-ops-fabric-{uuid.uuid4().hex[:6]}"
    sh("docker", "network", "create", "--subnet", SUBNET, net)
    folder = f"hub/models--t--tiny/snapshots/{REV}"
    try:
        r = _cli(
            env,
            "model",
            "sync",
            "-c",
            str(cluster),
            "--folder",
            folder,
            "--from",
            "sim-head",
            "--network",
            net,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "every node has" in r.stdout
        copy = b / folder
        for name in files:
            assert (copy / name).is_file() and not (copy / name).is_symlink(), name
            assert (copy / name).read_bytes() == (snap / name).read_bytes(), name

        size = (copy / shard).stat().st_size
        with (copy / shard).open("r+b") as f:
            f.truncate(size // 2)
        (copy / "config.json").unlink()
        r = _cli(env, "model", "check", "-c", str(cluster), "--folder", folder, "--network", net)
        assert r.returncode == 1, r.stdout + r.stderr
        assert (
            f"node sim-worker: /models/{folder}/{shard}: {size // 2} bytes; wanted {size} bytes" in r.stdout
        ), r.stdout
        assert f"node sim-worker: /models/{folder}/config.json: missing" in r.stdout, r.stdout
        assert "node sim-head" not in r.stdout  # the source's copy is intact
        # A manifest rewritten on the worker to match its damaged copy passes there, and only the
        # comparison with the head's manifest names it.
        from sparkpair_cli.cluster import manifest

        (copy / manifest.MANIFEST_NAME).write_text(manifest.to_json(manifest.build(copy)))
        r = _cli(env, "model", "check", "-c", str(cluster), "--folder", folder, "--network", net)
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"node sim-worker: /models/{folder}: manifest sha256" in r.stdout, r.stdout
        assert "wanted node sim-head's" in r.stdout, r.stdout
    finally:
        left = sh("docker", "ps", "-aq", "--filter", "name=sparkpair-model-sim-").stdout.split()
        if left:
            sh("docker", "rm", "-f", *left, check=False)
        sh("docker", "network", "rm", net, check=False)
