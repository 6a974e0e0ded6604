# ruff: noqa: E501  (the findings are asserted as whole sentences)
"""``sparkpair node init`` on every recorded host tree: an env file ``node validate`` passes, or
exit 2 naming what could not be discovered; each layout that needs a look (two subnets, one
subnet, a port down, no RoCE) is named; run on both nodes it writes a pair that ``sparkpair up``
accepts (same subnet, distinct addresses, one head)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from sparkpair_cli.deploy import discover as dv
from sparkpair_cli.deploy.nodeenv import load_node_env_file, parse_env_file
from sparkpair_cli.main import app
from typer.testing import CliRunner

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
TREES = sorted(p.name for p in HOSTS.iterdir() if (p / "node.env").exists())

HEAD, WORKER = "192.168.177.11", "192.168.177.12"
PEER = {  # each tree's peer on its fabric subnet
    "spark-head-good": f"spark-b={WORKER}",
    "spark-head-bad-kernel": f"spark-b={WORKER}",
    "spark-head-bad-memory": f"spark-b={WORKER}",
    "spark-same-subnet": f"spark-b={WORKER}",
    "spark-no-roce": f"spark-b={WORKER}",
    "bare-vm": f"spark-b={WORKER}",
    "spark-worker-good": f"spark-a={HEAD}",
    "spark-worker-bad-fabric": f"spark-a={HEAD}",
    "spark-one-port-down": f"spark-a={HEAD}",
}
NAMED = {  # the finding each layout must produce
    "spark-head-good": "two RoCE ports on different subnets (rocep1s0f1 on 192.168.177.0/24, roceP2p1s0f1 on 192.168.178.0/24)",
    "spark-worker-good": "two RoCE ports on different subnets",
    "spark-same-subnet": "RoCE ports on one subnet (rocep1s0f1 on 192.168.177.0/24, roceP2p1s0f1 on 192.168.177.0/24)",
    "spark-one-port-down": "one port down: roceP2p1s0f1 (enP2p1s0f1np1) is '1: DOWN' / '3: Disabled' while its twin rocep1s0f1 is up",
    "spark-worker-bad-fabric": "one port down: roceP2p1s0f1",
    "spark-no-roce": "no RDMA device in /sys/class/infiniband: no RoCE at all",
    "bare-vm": "no RDMA device in /sys/class/infiniband: no RoCE at all",
}
NOT_DISCOVERED = {  # settings no fact of the tree gives
    "bare-vm": {
        "SPARKPAIR_NODE_NAME",
        "SPARKPAIR_FABRIC_IFNAME",
        "VLLM_HOST_IP",
        "SPARKPAIR_FABRIC_CIDR",
        "NCCL_IB_HCA",
    },
    "spark-no-roce": {"SPARKPAIR_FABRIC_IFNAME", "VLLM_HOST_IP", "SPARKPAIR_FABRIC_CIDR", "NCCL_IB_HCA"},
    "spark-head-bad-kernel": {"SPARKPAIR_NODE_NAME"},  # recorded without a hostname
    "spark-head-bad-memory": {"SPARKPAIR_NODE_NAME"},
    "spark-worker-bad-fabric": {"SPARKPAIR_NODE_NAME"},
    "spark-worker-good": {"SPARKPAIR_HOST_USER"},  # a rootless engine: whose?
}
runner = CliRunner()


def init(tree: str, out: Path, *extra: str) -> tuple[int, str]:
    cache = out.parent / "models"
    cache.mkdir(exist_ok=True)
    args = ["node", "init", "--root", str(HOSTS / tree), "--peer", PEER[tree], "--model-cache", str(cache),
            "--out", str(out), *extra]  # fmt: skip
    r = runner.invoke(app, args, env={"COLUMNS": "300", "SPARKPAIR_NODE_ENV": ""})
    return r.exit_code, r.output


@pytest.mark.parametrize("tree", TREES)
def test_init_writes_a_file_node_validate_passes_or_names_what_it_could_not_discover(
    tree: str, tmp_path: Path
) -> None:
    out = tmp_path / "node.env"
    code, text = init(tree, out)
    if tree in NAMED:
        assert NAMED[tree] in " ".join(text.split()), text
    missing = NOT_DISCOVERED.get(tree, set())
    if missing:
        assert code == 2 and not out.exists(), text
        line = next(x for x in text.splitlines() if "not discovered and not given" in x)
        assert {k.strip() for k in line.split("not given: ")[1].split(";")[0].split(",")} == missing, line
        fill = {"SPARKPAIR_NODE_NAME": ["--name", "spark-x"], "SPARKPAIR_HOST_USER": ["--host-user", "spark"]}
        if missing - set(fill):
            return  # nothing to give it: no fabric on this node
        extra = [x for k in missing for x in fill[k]]
        code, text = init(tree, out, *extra)
    assert code == 0, text
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    r = runner.invoke(app, ["node", "validate", "--env-file", str(out)], env={"SPARKPAIR_NODE_ENV": ""})
    assert r.exit_code == 0, r.output


def test_every_discovered_value_is_written_with_its_source(tmp_path: Path) -> None:
    out = tmp_path / "node.env"
    code, _ = init("spark-head-good", out)
    assert code == 0
    text = out.read_text()
    values = parse_env_file(out)
    assert values["VLLM_HOST_IP"] == HEAD and values["SPARKPAIR_FABRIC_CIDR"] == "192.168.177.0/24"
    assert values["SPARKPAIR_FABRIC_IFNAME"] == "enp1s0f1np1"
    assert values["NCCL_IB_HCA"] == "=rocep1s0f1,roceP2p1s0f1"  # both up halves, exact names
    assert values["SPARKPAIR_NODE_RANK"] == "0" and values["SPARKPAIR_HEAD_ADDR"] == HEAD
    for line in (
        "# node init: the kernel's IPv4 address of enp1s0f1np1: 192.168.177.11/24\nVLLM_HOST_IP=192.168.177.11",
        "# node init: resolved at every start; now 3 (/sys/class/infiniband/rocep1s0f1/ports/1/gids/3, RoCE v2)\n"
        "NCCL_IB_GID_INDEX=auto",
        "# node init: /proc/sys/kernel/hostname\nSPARKPAIR_NODE_NAME=spark-a",
    ):
        assert line in text, line


def test_the_pair_written_on_each_node_is_one_cluster(tmp_path: Path) -> None:
    from sparkpair_cli.cluster.spec import load_cluster

    a, b = tmp_path / "node-spark-a.env", tmp_path / "node-spark-b.env"
    assert init("spark-head-good", a)[0] == 0
    assert init("spark-worker-good", b, "--host-user", "spark")[0] == 0
    (tmp_path / "cluster.yaml").write_text(
        "nodes:\n  spark-a: {env_file: node-spark-a.env, docker: 'unix:///var/run/docker.sock'}\n"
        "  spark-b: {env_file: node-spark-b.env, docker: 'ssh://me@spark-b'}\n"
    )
    c = load_cluster(tmp_path / "cluster.yaml")  # raises on any disagreement
    assert c.head.name == "spark-a" and [n.env.SPARKPAIR_NODE_RANK for n in c.nodes] == [1, 0]
    assert {str(n.env.SPARKPAIR_FABRIC_CIDR) for n in c.nodes} == {"192.168.177.0/24"}
    # the preflight, on each node's tree with the file node init wrote, passes its fabric checks
    from sparkpair_cli.preflight import checks as pf
    from sparkpair_serving.profile import load_profile

    for tree, f in (("spark-head-good", a), ("spark-worker-good", b)):
        rep = pf.run_local(load_node_env_file(f), load_profile("deepseek-v4-flash"), root=HOSTS / tree,
                           only=["rdma", "netdev", "gid"])  # fmt: skip
        assert [r.id for r in rep.results if r.status != "pass"] == [], [r.message for r in rep.results]


def test_the_pair_proposed_from_both_nodes_facts_agrees_with_the_one_written_on_each() -> None:
    facts = {
        n: dv.discover(HOSTS / t)
        for n, t in (("spark-a", "spark-head-good"), ("spark-b", "spark-worker-good"))
    }
    props = dv.propose_pair(facts, model_cache="/srv/sparkpair/models")
    a, b = props["spark-a"].as_dict(), props["spark-b"].as_dict()
    assert (a["VLLM_HOST_IP"], b["VLLM_HOST_IP"]) == (HEAD, WORKER)
    assert a["SPARKPAIR_NODE_RANK"] == "0" and b["SPARKPAIR_NODE_RANK"] == "1"
    assert a["SPARKPAIR_HEAD_ADDR"] == b["SPARKPAIR_HEAD_ADDR"] == HEAD
    assert a["SPARKPAIR_PEERS"] == f"spark-b={WORKER}" and b["SPARKPAIR_PEERS"] == f"spark-a={HEAD}"


def test_nodes_with_no_shared_subnet_are_refused_naming_each_nodes_subnets() -> None:
    facts = {
        "spark-a": dv.discover(HOSTS / "spark-head-good"),
        "spark-b": dv.discover(HOSTS / "spark-no-roce"),
    }
    with pytest.raises(
        ValueError, match=r"no fabric subnet on an up RoCE port of every node .*'spark-b': \[\]"
    ):
        dv.propose_pair(facts, model_cache="/srv/sparkpair/models")


def test_a_peer_on_no_subnet_of_this_node_is_named(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    cache.mkdir()
    r = runner.invoke(app, ["node", "init", "--root", str(HOSTS / "spark-head-good"), "--peer", "spark-b=10.9.9.9",
                            "--model-cache", str(cache), "--out", str(tmp_path / "n.env")], env={"COLUMNS": "300"})  # fmt: skip
    assert r.exit_code == 2 and "no up RoCE port's subnet holds the peers ['10.9.9.9']" in " ".join(
        r.output.split()
    )


def test_an_existing_file_is_kept_without_force(tmp_path: Path) -> None:
    out = tmp_path / "node.env"
    out.write_text("SPARKPAIR_NODE_NAME=keep\n")
    code, text = init("spark-head-good", out)
    assert (
        code == 2
        and "exists; wanted a new file, or --force" in text
        and out.read_text() == "SPARKPAIR_NODE_NAME=keep\n"
    )


def test_out_and_sparkpair_node_env_naming_two_files_are_refused(tmp_path: Path) -> None:
    r = runner.invoke(app, ["node", "init", "--root", str(HOSTS / "spark-head-good"), "--out", str(tmp_path / "a.env")],
                      env={"SPARKPAIR_NODE_ENV": str(tmp_path / "b.env")})  # fmt: skip
    assert r.exit_code == 2 and "name two different node env files" in r.output
    assert str(tmp_path / "a.env") in r.output and str(tmp_path / "b.env") in r.output


def test_without_iproute2_the_addresses_come_from_the_kernels_ioctls(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image without `ip` (discovery in a node's container) reads each netdev's primary
    address and netmask with SIOCGIFADDR/SIOCGIFNETMASK: the same as `ip` says, on this machine."""
    import shutil

    from sparkpair_cli.preflight.fabric import ipv4_addresses
    from sparkpair_cli.preflight.host import Host

    if shutil.which("ip") is None:
        pytest.skip("no iproute2 here to compare with")
    with_ip = ipv4_addresses(Host())
    monkeypatch.setenv("PATH", "/nonexistent")
    without = ipv4_addresses(Host())
    assert without and {k: v[:1] for k, v in with_ip.items()} == without


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_api_key_given_with_set_is_written_but_never_printed(tmp_path: Path, dry_run: bool) -> None:
    key = "sk-PLANTED-node-init-0123456789"
    out = tmp_path / "node.env"
    code, output = init(
        "spark-head-good", out, "--set", f"SPARKPAIR_API_KEY={key}", *(["--dry-run"] * dry_run)
    )
    assert code == 0, output
    assert key not in output and key[:8] not in output, output
    assert f"<hidden, {len(key)} characters>" in output, output
    if not dry_run:
        assert parse_env_file(out)["SPARKPAIR_API_KEY"] == key
