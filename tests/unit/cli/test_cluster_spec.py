"""The cluster file and the agreement of the nodes' env files: ``sparkpair up`` refuses a
cluster that cannot form, before it reaches any engine, naming node, setting, seen and wanted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sparkpair_cli.cluster.engines import EngineError, connect
from sparkpair_cli.cluster.spec import ClusterError, load_cluster
from sparkpair_cli.deploy.nodeenv import parse_env_file

REPO = Path(__file__).resolve().parents[3]


def write_env(path: Path, **over: str) -> Path:
    """configs/node.env.example with ``over`` applied (every key must exist in the example)."""
    values = parse_env_file(REPO / "configs" / "node.env.example")
    assert set(over) <= set(values), set(over) - set(values)
    values |= over
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def pair(tmp_path: Path, head: dict[str, str] | None = None, worker: dict[str, str] | None = None) -> Path:
    """A valid two-node cluster file (spark-a head, spark-b worker) with env overrides."""
    write_env(tmp_path / "a.env", SPARKPAIR_NODE_NAME="spark-a", **(head or {}))
    b = {"SPARKPAIR_NODE_NAME": "spark-b", "SPARKPAIR_NODE_RANK": "1", "VLLM_HOST_IP": "192.168.177.12"}
    write_env(tmp_path / "b.env", **(b | (worker or {})))
    p = tmp_path / "cluster.yaml"
    p.write_text(
        "nodes:\n"
        "  spark-a: {env_file: a.env, docker: 'unix:///var/run/docker.sock'}\n"
        "  spark-b: {env_file: b.env, docker: 'ssh://me@spark-b'}\n"
    )
    return p


def test_a_consistent_pair_loads_workers_first_and_names_the_gateway(tmp_path: Path) -> None:
    c = load_cluster(pair(tmp_path))
    assert [n.name for n in c.nodes] == ["spark-b", "spark-a"]
    assert c.head.name == "spark-a" and c.nodes[0].role == "worker"
    assert c.gateway_url() == ""  # asked inside the head's health container, through its engine
    assert c.compose_files() == [(tmp_path / "compose.yaml").resolve()]


def test_env_files_that_disagree_are_refused_naming_each_node_and_both_values(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as e:
        load_cluster(
            pair(tmp_path, worker={"SPARKPAIR_PROFILE": "tiny-pair", "SPARKPAIR_MASTER_PORT": "29600"})
        )
    msg = str(e.value)
    assert (
        "node spark-b (" in msg
        and "SPARKPAIR_PROFILE='tiny-pair'; wanted the same value on every node" in msg
    )
    assert "node spark-a (" in msg and "SPARKPAIR_PROFILE='deepseek-v4-flash'" in msg
    assert "SPARKPAIR_MASTER_PORT='29600'" in msg


def test_two_heads_a_shared_address_and_a_missing_node_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as e:
        load_cluster(pair(tmp_path, worker={"SPARKPAIR_NODE_RANK": "0", "VLLM_HOST_IP": "192.168.177.11"}))
    msg = str(e.value)
    assert "node spark-b: SPARKPAIR_NODE_RANK=0; wanted a rank no other node has" in msg
    assert "node spark-a: VLLM_HOST_IP=192.168.177.11; wanted this node's own fabric address" in msg
    p = pair(tmp_path)
    p.write_text("\n".join(line for line in p.read_text().splitlines() if "spark-b" not in line) + "\n")
    with pytest.raises(
        ClusterError, match=r"1 node\(s\) in the cluster file \(\['spark-a'\]\); wanted SPARKPAIR_NNODES=2"
    ):
        load_cluster(p)


def test_a_bad_env_value_is_named_with_its_node(tmp_path: Path) -> None:
    with pytest.raises(ClusterError) as e:
        load_cluster(pair(tmp_path, worker={"SPARKPAIR_NNODES": "two"}))
    assert "node spark-b (" in str(e.value) and "SPARKPAIR_NNODES='two'; wanted" in str(e.value)


def test_a_node_name_that_is_not_the_env_files_is_refused(tmp_path: Path) -> None:
    p = pair(tmp_path)
    p.write_text(p.read_text().replace("  spark-b:", "  spark-c:"))
    with pytest.raises(
        ClusterError, match=r"node spark-c \(.*b\.env\): SPARKPAIR_NODE_NAME='spark-b'; wanted 'spark-c'"
    ):
        load_cluster(p)


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "docker: 'http://spark-b:2375'",
            r"node spark-b \(.*\): docker='http://spark-b:2375'; wanted the node's Docker engine",
        ),
        (
            "dockr: 'ssh://me@spark-b'",
            r"node spark-b \(.*\): docker='<unset>'; wanted the node's Docker engine",
        ),
        (
            "docker: 'ssh://me@spark-b', env_file: nowhere.env",
            r"node env file .*nowhere\.env: cannot read it",
        ),
    ],
)
def test_bad_cluster_file_settings_are_named(tmp_path: Path, line: str, want: str) -> None:
    p = pair(tmp_path)
    entry = line if "env_file" in line else f"env_file: b.env, {line}"
    p.write_text(p.read_text().replace("env_file: b.env, docker: 'ssh://me@spark-b'", entry))
    with pytest.raises(ClusterError, match=want):
        load_cluster(p)


def test_an_engine_that_does_not_answer_is_named(tmp_path: Path) -> None:
    c = load_cluster(pair(tmp_path))
    dead = c.nodes[1].__class__(**{**c.nodes[1].__dict__, "docker": f"unix://{tmp_path}/no.sock"})
    with pytest.raises(EngineError, match=rf"node spark-a: docker=unix://{tmp_path}/no.sock; unreachable"):
        connect(dead, timeout_s=5)


def test_the_cli_exits_2_on_an_inconsistent_cluster_and_says_nothing_started(tmp_path: Path) -> None:
    p = pair(tmp_path, worker={"SPARKPAIR_PROFILE": "tiny-pair"})
    r = subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.main", "up", "-c", str(p)], capture_output=True, text=True
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "nothing was started" in r.stderr and "node spark-b" in r.stderr and "Traceback" not in r.stderr


class _Images:
    """A node's image store: the one fault a single engine here cannot produce (one name, two
    ids on two machines); the same function passes and refuses against the real engine in
    tests/docker/test_cluster_up.py."""

    def __init__(self, ids: dict[str, str]) -> None:
        self.ids = ids

    def get(self, ref: str):  # type: ignore[no-untyped-def]
        from docker.errors import ImageNotFound

        if ref not in self.ids:
            raise ImageNotFound(ref)
        return type("Image", (), {"id": self.ids[ref]})()


def test_the_same_image_name_with_different_ids_is_refused_naming_both_nodes(tmp_path: Path) -> None:
    from sparkpair_cli.cluster.engines import image_problems

    c = load_cluster(pair(tmp_path))
    stores = {"spark-a": "sha256:" + "a" * 64, "spark-b": "sha256:" + "b" * 64}
    clients = {
        n: type("Client", (), {"images": _Images({"sparkpair:0.1.0": i})})() for n, i in stores.items()
    }
    problems = image_problems(c.nodes, clients)  # type: ignore[arg-type]
    assert len(problems) == 2, problems
    assert (
        "node spark-b: SPARKPAIR_IMAGE is image sha256:bbbbbbbbbbbb; wanted the same image id on every node"
        in problems[0]
    )
    assert "'spark-a': 'sha256:aaaaaaaaaaaa'" in problems[0]
    same = {
        n: type("Client", (), {"images": _Images({"sparkpair:0.1.0": stores["spark-a"]})})() for n in stores
    }
    assert image_problems(c.nodes, same) == []  # type: ignore[arg-type]


def test_the_example_cluster_file_is_valid() -> None:
    from sparkpair_cli.cluster.spec import parse_cluster_file

    spec = parse_cluster_file(REPO / "configs" / "cluster.yaml.example")
    assert sorted(spec.nodes) == ["spark-a", "spark-b"] and spec.nodes["spark-b"].docker == "ssh://me@spark-b"


def test_a_cluster_file_that_is_a_fifo_or_uses_yaml_aliases_is_refused(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ClusterError, match="not a regular file"):
        load_cluster(fifo)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text('a: &a ["x", "x"]\nnodes: [*a, *a]\n')
    with pytest.raises(ClusterError, match="alias"):
        load_cluster(bomb)


def test_down_never_says_down_for_a_node_whose_engine_does_not_answer(tmp_path: Path) -> None:
    from rich.console import Console
    from sparkpair_cli.cluster import ops

    p = pair(tmp_path)
    p.write_text(
        "nodes:\n"
        f"  spark-a: {{env_file: a.env, docker: 'unix://{tmp_path}/a.sock'}}\n"
        f"  spark-b: {{env_file: b.env, docker: 'unix://{tmp_path}/b.sock'}}\n"
    )
    console = Console(file=open(tmp_path / "out.txt", "w"), markup=False)  # noqa: SIM115
    failed = ops.down(load_cluster(p), console)
    console.file.close()
    assert len(failed) == 2 and all("unreachable" in f for f in failed), failed
    assert "down" not in (tmp_path / "out.txt").read_text()
