"""The node env file: every key validated, every error names node, key, seen and wanted."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import NodeEnvError, load_node_env, load_node_env_file, parse_env_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "node.env.example"


def example() -> dict[str, str]:
    return parse_env_file(EXAMPLE)


def test_the_example_is_valid_and_documents_every_key() -> None:
    env = load_node_env_file(EXAMPLE)
    assert env.role == "head" and env.hcas == ["rocep1s0f1", "roceP2p1s0f1"]
    text = EXAMPLE.read_text()
    from sparkpair_cli.deploy.nodeenv import WANTED, NodeEnv

    for key in NodeEnv.model_fields:
        assert f"\n{key}=" in text, f"{key} is not in {EXAMPLE.name}"
        assert key in WANTED, f"{key} has no wanted-value phrase"


@pytest.mark.parametrize(
    ("key", "value", "wanted"),
    [
        ("SPARKPAIR_NODE_RANK", "2", "an integer below SPARKPAIR_NNODES=2"),
        ("SPARKPAIR_NODE_RANK", "one", "this node's 0-based rank"),
        ("SPARKPAIR_NNODES", "0", "the number of nodes"),
        ("VLLM_HOST_IP", "10.0.0.5", "an address in SPARKPAIR_FABRIC_CIDR=192.168.177.0/24"),
        ("VLLM_HOST_IP", "spark-a.local", "this node's IPv4 address on the fabric subnet"),
        (
            "SPARKPAIR_HEAD_ADDR",
            "192.168.177.12",
            "this node's VLLM_HOST_IP=192.168.177.11 (rank 0 is the head)",
        ),
        ("SPARKPAIR_FABRIC_CIDR", "192.168.177.0", "the fabric (RoCE) subnet in CIDR form"),
        ("SPARKPAIR_FABRIC_IFNAME", "a-very-long-interface-name", "at most 15 characters"),
        ("NCCL_IB_HCA", "rocep1s0f1;roceP2p1s0f1", "both halves of the QSFP port"),
        ("NCCL_IB_GID_INDEX", "v2", "'auto' (resolved per node from sysfs at start) or an integer 0-255"),
        ("SPARKPAIR_EXECUTOR", "torchrun", "empty or 'mp'"),
        ("SPARKPAIR_EXECUTOR", "ray", "Ray was removed"),
        ("SPARKPAIR_API_PORT", "80", "a TCP port 1024-65535"),
        ("SPARKPAIR_GATEWAY_PORT", "8000", "a port other than SPARKPAIR_API_PORT"),
        ("SPARKPAIR_API_HOST", "10.1.1.1", "0.0.0.0, ::, 127.0.0.1 or VLLM_HOST_IP=192.168.177.11"),
        ("SPARKPAIR_MODEL_CACHE", "models", "an absolute host path"),
    ],
)
def test_a_bad_value_names_node_key_seen_and_wanted(key: str, value: str, wanted: str) -> None:
    values = example() | {key: value}
    with pytest.raises(NodeEnvError) as e:
        load_node_env(values, source="node.env")
    msg = str(e.value)
    line = next(x for x in msg.splitlines() if f": {key}=" in x)
    assert line.startswith("node spark-a (node.env): ")
    assert value in line and "wanted" in line and wanted in line, line


def test_a_worker_on_the_head_address_is_refused() -> None:
    values = example() | {"SPARKPAIR_NODE_RANK": "1", "SPARKPAIR_NODE_NAME": "spark-b"}
    with pytest.raises(
        NodeEnvError, match=r"node spark-b .*VLLM_HOST_IP='192.168.177.11'; wanted an address other"
    ):
        load_node_env(values, source="node.env")


def test_a_missing_key_is_named_as_unset() -> None:
    values = {k: v for k, v in example().items() if k != "VLLM_HOST_IP"}
    with pytest.raises(NodeEnvError, match=r"VLLM_HOST_IP='<unset>'; wanted this node's IPv4 address"):
        load_node_env(values)


def test_derived_socket_names_must_not_disagree() -> None:
    values = example() | {"NCCL_SOCKET_IFNAME": "enP7s7"}
    with pytest.raises(
        NodeEnvError, match=r"NCCL_SOCKET_IFNAME='enP7s7'; wanted it unset or equal to 'enp1s0f1np1'"
    ):
        load_node_env(values)


def test_every_problem_is_reported_at_once() -> None:
    values = example() | {"SPARKPAIR_API_PORT": "80", "NCCL_IB_GID_INDEX": "x", "VLLM_HOST_IP": "not-an-ip"}
    lines = str(pytest.raises(NodeEnvError, load_node_env, values).value).splitlines()
    assert len(lines) == 3


def test_four_nodes_use_the_same_schema() -> None:
    values = example() | {
        "SPARKPAIR_NNODES": "4",
        "SPARKPAIR_NODE_RANK": "3",
        "VLLM_HOST_IP": "192.168.177.14",
    }
    env = load_node_env(values)
    assert env.role == "worker" and env.SPARKPAIR_NNODES == 4


@pytest.mark.parametrize(
    ("bind", "probe"), [("0.0.0.0", "127.0.0.1"), ("::", "::1"), ("192.168.177.11", "192.168.177.11")]
)
def test_the_probe_address_follows_the_bind_address(bind: str, probe: str) -> None:
    assert load_node_env(example() | {"SPARKPAIR_API_HOST": bind}).probe_host() == probe


def test_env_file_syntax(tmp_path: Path) -> None:
    p = tmp_path / "n.env"
    p.write_text("# c\n\nexport A=1\nB='two words'\nC=x # tail\nD=\n")
    assert parse_env_file(p) == {"A": "1", "B": "two words", "C": "x", "D": ""}
    p.write_text("not a line\n")
    with pytest.raises(NodeEnvError, match=r"n.env:1: 'not a line' is not KEY=VALUE"):
        parse_env_file(p)
