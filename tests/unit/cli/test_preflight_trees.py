"""Preflight against recorded host trees (tests/fixtures/hosts/*), good and bad layouts."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import load_node_env_file
from sparkpair_cli.preflight import checks as pf
from sparkpair_cli.preflight.fabric import resolve_gid_index
from sparkpair_cli.preflight.result import Result
from sparkpair_serving.profile import load_profile

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"


def run(tree: str, **env_over: str) -> dict[str, Result]:
    env = load_node_env_file(HOSTS / tree / "node.env")
    if env_over:
        env = env.model_copy(update=env_over)
    rep = pf.run_local(env, load_profile("deepseek-v4-flash"), root=HOSTS / tree)
    return {r.id: r for r in rep.results}


EXPECTED = {
    "spark-head-good": {
        k: "pass"
        for k in (
            "rdma-link",
            "rdma-both-halves",
            "fabric-netdev",
            "fabric-mtu",
            "fabric-ip",
            "gid-index",
            "memory",
            "kernel-cma",
            "shm",
            "logind-removeipc",
            "driver",
            "ptxas",
            "flashinfer-dsv4",
            "deepgemm",
            "checkpoint",
        )
    },
    "spark-worker-good": {
        "gid-index": "pass",
        "memory": "warn",
        "logind-removeipc": "pass",
        "checkpoint": "pass",
    },
    "spark-worker-bad-fabric": {
        "rdma-link": "fail",
        "fabric-mtu": "warn",
        "fabric-ip": "fail",
        "gid-index": "fail",
        "memory": "pass",
    },
    "spark-head-bad-kernel": {
        "kernel-cma": "fail",
        "driver": "warn",
        "ptxas": "fail",
        "flashinfer-dsv4": "fail",
        "deepgemm": "fail",
        "gid-index": "pass",
    },
    "spark-head-bad-memory": {
        "memory": "fail",
        "shm": "fail",
        "logind-removeipc": "warn",
        "checkpoint": "fail",
    },
    "bare-vm": {
        "rdma-devices": "fail",
        "fabric-netdev": "fail",
        "gid-index": "fail",
        "driver": "fail",
        "ptxas": "fail",
        "flashinfer-dsv4": "fail",
        "deepgemm": "fail",
        "checkpoint": "fail",
    },
}


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_each_recorded_host_gets_the_verdicts_its_layout_deserves(tree: str) -> None:
    got = run(tree)
    for cid, status in EXPECTED[tree].items():
        assert cid in got, f"{tree}: no result {cid}; got {sorted(got)}"
        assert got[cid].status == status, f"{tree}: {cid} is {got[cid].status}: {got[cid].message}"
    if tree.endswith("-good"):
        assert not [r for r in got.values() if r.status == "fail"]


def test_every_message_names_node_setting_seen_and_wanted() -> None:
    for tree in EXPECTED:
        for r in run(tree).values():
            assert r.message.startswith(f"node {r.node}: ") and "; wanted " in r.message, r.message
            assert r.setting and r.seen and r.wanted


def test_a_roce_v1_gid_index_is_named_with_the_right_index() -> None:
    r = run("spark-worker-bad-fabric")["gid-index"]
    assert "NCCL_IB_GID_INDEX=2" in r.message
    assert "wanted 3 (the RoCEv2 IPv4 entry for 192.168.177.12)" in r.message
    assert "IB/RoCE v1 entry" in r.message


def test_gid_auto_resolves_from_sysfs_per_node() -> None:
    env = load_node_env_file(HOSTS / "spark-head-good" / "node.env")
    assert resolve_gid_index(env, HOSTS / "spark-head-good") == 3
    assert resolve_gid_index(env, HOSTS / "bare-vm") is None


def test_one_hca_when_both_halves_are_up_fails() -> None:
    r = run("spark-head-good", NCCL_IB_HCA="rocep1s0f1")["rdma-both-halves"]
    assert r.status == "fail" and "roceP2p1s0f1" in r.message and "B05" in r.message


def test_the_kho_kernel_is_named_with_its_fix() -> None:
    r = run("spark-head-bad-kernel")["kernel-cma"]
    assert "7.0.0-1019-nvidia" in r.message and "kho=off" in r.message and "CmaTotal 0 kB" in r.message


def test_the_real_b01_ptxas_message_is_shown() -> None:
    r = run("spark-head-bad-kernel")["ptxas"]
    assert "not defined for option 'gpu-name'" in r.message


def test_a_waived_check_is_reported_as_a_warning_with_the_reason() -> None:
    got = run("bare-vm", SPARKPAIR_PREFLIGHT_WAIVE="rdma-devices,driver")
    assert got["rdma-devices"].status == "warn" and "waived" in got["rdma-devices"].message
    assert got["driver"].status == "warn"
    assert got["ptxas"].status == "fail"


def test_a_crashing_check_is_a_named_failure(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal: not-a-number kB\n")
    env = load_node_env_file(HOSTS / "bare-vm" / "node.env")
    rep = pf.run_local(env, load_profile("deepseek-v4-flash"), root=tmp_path, only=["memory"])
    assert [r.status for r in rep.results] == ["fail"]


def test_nodes_are_compared_on_kernel_driver_and_mtu() -> None:
    reports = []
    for tree in ("spark-head-good", "spark-worker-bad-fabric"):
        env = load_node_env_file(HOSTS / tree / "node.env")
        reports.append(
            {
                "node": env.SPARKPAIR_NODE_NAME,
                "facts": pf.run_local(env, load_profile("deepseek-v4-flash"), root=HOSTS / tree).facts,
            }
        )
    res = {(r.id, r.node): r for r in pf.compare(reports)}
    assert res[("same-mtu", "spark-a")].status == "fail"
    assert "9000" in res[("same-mtu", "spark-a")].seen and "1500" in res[("same-mtu", "spark-a")].wanted
    assert res[("same-driver", "spark-b")].status == "pass"
    reports[1]["facts"]["kernel"] = "7.0.0-1019-nvidia"
    res = {(r.id, r.node): r for r in pf.compare(reports)}
    assert res[("same-kernel", "spark-b")].status == "warn"


# NCCL_IB_HCA as NCCL reads it (docs/reference/node-env.md): '^' excludes, '=' is exact.


def test_an_exclude_list_that_drops_one_half_fails_both_halves() -> None:
    r = run("spark-head-good", NCCL_IB_HCA="^=roceP2p1s0f1")["rdma-both-halves"]
    assert r.status == "fail", r.message
    assert "NCCL uses ['rocep1s0f1']" in r.message and "roceP2p1s0f1" in r.message, r.message
    assert "both halves listed" not in r.message


def test_an_exclude_list_of_the_down_ports_passes() -> None:
    got = run("spark-head-good", NCCL_IB_HCA="^=rocep1s0f0,roceP2p1s0f0")
    assert got["rdma-link"].status == "pass", got["rdma-link"].message
    r = got["rdma-both-halves"]
    assert r.status == "pass" and "NCCL uses ['roceP2p1s0f1', 'rocep1s0f1']" in r.message, r.message


def test_an_exclude_list_of_every_device_fails_naming_it() -> None:
    r = run("spark-head-good", NCCL_IB_HCA="^roce")["rdma-devices"]
    assert r.status == "fail" and "removes every device" in r.message, r.message


def test_an_exact_name_that_is_missing_fails() -> None:
    r = run("spark-head-good", NCCL_IB_HCA="=rocep1s0f1,rocep1s0f")["rdma-devices"]
    assert r.status == "fail" and "['rocep1s0f'] not found" in r.message, r.message


def test_excluding_both_halves_is_not_reported_as_both_halves_listed() -> None:
    got = run("spark-head-good", NCCL_IB_HCA="^=rocep1s0f1,roceP2p1s0f1")
    assert got["rdma-both-halves"].status == "fail", got["rdma-both-halves"].message
    assert "NCCL uses []" in got["rdma-both-halves"].message
    assert got["rdma-link"].status == "fail" and "is ACTIVE/LinkUp" in got["rdma-link"].message


def test_a_flashinfer_without_the_dspark_drafts_window_fails_naming_that_pair(tmp_path: Path) -> None:
    """The DSpark profile's draft asks (32, 192) besides the target's (32, 128)."""
    import json
    import shutil

    tree = tmp_path / "spark-head-good"
    shutil.copytree(HOSTS / "spark-head-good", tree, symlinks=True)
    rec = tree / "_cmd" / "flashinfer-dsv4-table.json"
    data = json.loads(rec.read_text())
    answer = json.loads(data["stdout"])
    answer["answers"] = [[32, 128, True], [32, 192, False]]
    data["stdout"] = json.dumps(answer) + "\n"
    rec.write_text(json.dumps(data))
    env = load_node_env_file(HOSTS / "spark-head-good" / "node.env")
    res = {r.id: r for r in pf.run_local(env, load_profile("deepseek-v4-flash"), root=tree).results}
    assert (
        res["flashinfer-dsv4"].status == "fail"
        and "(32, 192) in table: False" in res["flashinfer-dsv4"].message
    )
    nospec = {r.id: r for r in pf.run_local(env, load_profile("deepseek-v4-flash-nospec"), root=tree).results}
    assert nospec["flashinfer-dsv4"].status == "pass", nospec["flashinfer-dsv4"].message


def test_the_report_ends_with_a_verdict_line_naming_the_failed_checks() -> None:
    """Under the table: FAILED with the node, the count and the ids of the failed checks (and the
    warnings), or passed with the count; a compare run (results without a node) names none."""
    from rich.console import Console

    def printed(report) -> str:
        console = Console(record=True, width=200)
        pf.print_report(report, console)
        return console.export_text().strip().splitlines()[-1]

    env = load_node_env_file(HOSTS / "spark-worker-bad-fabric" / "node.env")
    bad = pf.run_local(env, load_profile("deepseek-v4-flash"), root=HOSTS / "spark-worker-bad-fabric")
    failed = [r.id for r in bad.results if r.status == "fail"]
    assert failed
    assert printed(bad) == (
        f"FAILED: node {bad.node}: {len(failed)} of {len(bad.results)} checks failed ({', '.join(failed)}); "
        f"2 warnings (rdma-both-halves, fabric-mtu)"
    )
    env = load_node_env_file(HOSTS / "spark-head-good" / "node.env")
    good = pf.run_local(env, load_profile("deepseek-v4-flash"), root=HOSTS / "spark-head-good")
    assert printed(good) == f"passed: node {good.node}: {len(good.results)} checks"
    first_fail = next(r for r in bad.results if r.status == "fail")
    assert printed([first_fail]) == f"FAILED: 1 of 1 checks failed ({first_fail.id})"
    assert printed(good.results[:1]) == "passed: 1 check"
