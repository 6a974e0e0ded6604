# ruff: noqa: E501
"""``sparkpair node init --engine``: each node's facts read in a container of the image on that
node's engine (the host's /sys and /proc under /host, the host's network, the engine's /info),
then every node's env file and the cluster file written so that ``sparkpair up`` accepts them.
The two "nodes" are this machine's engine reading two recorded host trees (the head and the
worker of a pair; tests/fixtures/hosts); on this machine's own /sys there is no RoCE, which the
command names for both nodes. About 20 s once the image is built."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import docker
import pytest
from dockerlib import REPO

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

HOSTS = REPO / "tests" / "fixtures" / "hosts"
SOCK = "unix:///var/run/docker.sock"


def test_init_over_engines_writes_a_pair_and_a_cluster_file_that_up_accepts(sparkpair_image: str, tmp_path: Path) -> None:
    from sparkpair_cli.cluster.spec import load_cluster
    from sparkpair_cli.cmd_node_init import discover_on_engine, init_over_engines

    client = docker.from_env()
    facts = {
        name: discover_on_engine(client, sparkpair_image, mounts={str(HOSTS / tree): "/host"}, live=False)
        for name, tree in (("spark-a", "spark-head-good"), ("spark-b", "spark-one-port-down"))
    }
    assert facts["spark-a"].engine and facts["spark-a"].engine["ID"] == client.info()["ID"]  # the node's engine
    assert [p.ipv4 for p in facts["spark-a"].roce_ports() if p.up] == [["192.168.177.11/24"], ["192.168.178.11/24"]]
    cluster = tmp_path / "configs" / "cluster.yaml"
    cluster.parent.mkdir()
    (tmp_path / "models").mkdir()
    written = init_over_engines({"spark-a": SOCK, "spark-b": SOCK}, image=sparkpair_image,
                                model_cache=str(tmp_path / "models"), cluster_out=cluster, force=False, facts=facts)  # fmt: skip
    assert sorted(p.name for p in written) == ["cluster.yaml", "node-spark-a.env", "node-spark-b.env"]
    c = load_cluster(cluster)
    assert c.head.name == "spark-a" and str(c.head.env.VLLM_HOST_IP) == "192.168.177.11"
    worker = next(n for n in c.nodes if n.name == "spark-b")
    assert worker.env.NCCL_IB_HCA == "=rocep1s0f1"  # its second half is down: named, left out
    assert worker.env.SPARKPAIR_PEERS == "spark-a=192.168.177.11"


def test_init_over_this_machines_engine_names_the_missing_fabric(sparkpair_image: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "sparkpair_cli.main", "node", "init", "--engine", f"a={SOCK}",
                        "--engine", f"b={SOCK}", "--image", sparkpair_image, "--model-cache", str(tmp_path),
                        "--cluster-out", str(tmp_path / "cluster.yaml")],
                       capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip
    said = " ".join(r.stderr.split())
    assert r.returncode == 2, r.stdout + r.stderr
    assert "no fabric subnet on an up RoCE port of every node ({'a': [], 'b': []})" in said, said
    assert not (tmp_path / "cluster.yaml").exists()
