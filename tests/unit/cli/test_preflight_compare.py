"""``preflight --compare`` judges the GID facts and the failures inside the reports it is
given, on reports made from the recorded host trees."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import load_node_env_file
from sparkpair_cli.main import app
from sparkpair_cli.preflight import checks as pf
from sparkpair_cli.preflight.result import Result
from sparkpair_serving.profile import load_profile
from typer.testing import CliRunner

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"


def report(tree: str, **env_over: str) -> dict:
    """The ``--facts-out`` report of a recorded host tree, as JSON data."""
    env = load_node_env_file(HOSTS / tree / "node.env")
    if env_over:
        env = env.model_copy(update=env_over)
    rep = pf.run_local(env, load_profile("deepseek-v4-flash"), root=HOSTS / tree)
    return json.loads(rep.to_json())


def compare_cli(tmp_path: Path, *reports: dict) -> tuple[int, str]:
    args = ["preflight"]
    for i, r in enumerate(reports):
        p = tmp_path / f"r{i}.json"
        p.write_text(json.dumps(r))
        args += ["--compare", str(p)]
    res = CliRunner().invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, " ".join(res.output.split())


def by_id(results: list[Result], cid: str) -> list[Result]:
    return [r for r in results if r.id == cid]


@pytest.fixture(scope="module")
def good_pair() -> tuple[dict, dict]:
    head, worker = report("spark-head-good"), report("spark-worker-good")
    assert not [r for r in head["results"] + worker["results"] if r["status"] == "fail"]
    return head, worker


def test_a_good_pair_compares_clean(good_pair: tuple[dict, dict], tmp_path: Path) -> None:
    head, worker = good_pair
    assert head["facts"]["gid_index"] == worker["facts"]["gid_index"] == 3
    assert head["facts"]["gid_type"] == worker["facts"]["gid_type"] == "RoCE v2"
    code, out = compare_cli(tmp_path, head, worker)
    assert code == 0, out
    assert "same-gid-index" in out and "same-gid-type" in out and "reports-pass" in out


def test_a_different_gid_index_fails_naming_node_and_fact(
    good_pair: tuple[dict, dict], tmp_path: Path
) -> None:
    head, worker = good_pair
    worker = json.loads(json.dumps(worker))
    worker["facts"]["gid_index"] = 5
    res = by_id(pf.compare([head, worker]), "same-gid-index")
    assert {r.status for r in res} == {"fail"}
    msg = next(r.message for r in res if r.node == "spark-b")
    assert msg.startswith("node spark-b: NCCL_IB_GID_INDEX (resolved)=5; wanted equal on every node"), msg
    assert "'spark-a': 3" in msg
    code, out = compare_cli(tmp_path, head, worker)
    assert code == 1 and "same-gid-index" in out, out


def test_a_roce_v1_entry_on_one_node_fails_the_gid_type(tmp_path: Path) -> None:
    head = report("spark-head-good")
    # spark-worker-bad-fabric has its index set to 2, a RoCE v1 entry (recorded tree)
    worker = report("spark-worker-bad-fabric")
    assert worker["facts"]["gid_type"] != "RoCE v2"
    res = by_id(pf.compare([head, worker]), "same-gid-type")
    assert {r.status for r in res} == {"fail"}
    assert any(r.node == "spark-b" and "type of the GID entry NCCL uses=" in r.message for r in res)


def test_a_gid_fact_recorded_by_one_node_only_fails(good_pair: tuple[dict, dict]) -> None:
    head, _ = good_pair
    mem_only = report("spark-worker-good")
    mem_only["facts"].pop("gid_index")
    res = by_id(pf.compare([head, mem_only]), "same-gid-index")
    assert {r.status for r in res} == {"fail"}
    assert any("not in this node's report" in r.message for r in res)


def test_a_fail_inside_a_report_fails_the_comparison(good_pair: tuple[dict, dict], tmp_path: Path) -> None:
    head, _ = good_pair
    bad = report("spark-head-bad-memory", SPARKPAIR_NODE_NAME="spark-b")
    assert [r for r in bad["results"] if r["status"] == "fail"]
    res = by_id(pf.compare([head, bad]), "reports-pass")
    fails = [r for r in res if r.status == "fail"]
    assert fails and all(r.node == "spark-b" for r in fails)
    assert any("check memory in spark-b's report=fail" in r.message for r in fails), [
        r.message for r in fails
    ]
    code, out = compare_cli(tmp_path, head, bad)
    assert code == 1, out


def test_results_that_are_not_results_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"node": "a", "results": [{"id": "x", "status": "maybe"}], "facts": {}}))
    res = CliRunner().invoke(app, ["preflight", "--compare", str(p), "--compare", str(p)])
    assert res.exit_code == 2 and "status pass/warn/fail" in " ".join(res.output.split())


def test_a_must_match_fact_no_report_recorded_fails_a_warn_fact_warns() -> None:
    a = {"node": "a", "results": [], "facts": {"kernel": "6.8"}}
    b = {"node": "b", "results": [], "facts": {"kernel": "6.8"}}
    res = by_id(pf.compare([a, b]), "same-gid-type")
    assert {r.status for r in res} == {"fail"} and "not in this node's report" in res[0].message
    c = {"node": "c", "results": [], "facts": {"fabric_mtu": 9000}}
    d = {"node": "d", "results": [], "facts": {"fabric_mtu": 9000}}
    assert {r.status for r in by_id(pf.compare([c, d]), "same-kernel")} == {"warn"}


def write_reports(tmp_path: Path, *reports: dict) -> list[str]:
    paths = []
    for i, r in enumerate(reports):
        p = tmp_path / f"node{i}.json"
        p.write_text(json.dumps(r))
        paths.append(str(p))
    return paths


@pytest.mark.parametrize(
    "form",
    ["one-flag", "repeated", "mixed"],
)
def test_compare_takes_several_files_after_one_flag_or_the_flag_repeated(
    good_pair: tuple[dict, dict], tmp_path: Path, form: str
) -> None:
    """Every form reads every file: the worker with another GID index (the second file, or the
    third) fails the comparison, so a form that dropped a file would pass."""
    head, worker = good_pair
    bad = json.loads(json.dumps(worker))
    bad["node"], bad["facts"]["gid_index"] = "spark-c", 5
    a, b, c = write_reports(tmp_path, head, worker, bad)
    args = {
        "one-flag": ["--compare", a, b, c],
        "repeated": ["--compare", a, "--compare", b, "--compare", c],
        "mixed": ["--compare", a, b, "--compare", c],
    }[form]
    res = CliRunner().invoke(app, ["preflight", *args])
    out = " ".join(res.output.split())
    assert res.exit_code == 1, out
    assert "same-gid-index" in out and "spark-c" in out, out
    res = CliRunner().invoke(app, ["preflight", *args[: args.index(b) + 1]])  # head + worker only
    assert res.exit_code == 0, " ".join(res.output.split())


def test_report_files_without_compare_are_refused(good_pair: tuple[dict, dict], tmp_path: Path) -> None:
    a, b = write_reports(tmp_path, *good_pair)
    res = CliRunner().invoke(app, ["preflight", a, b])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "given without --compare" in out and "Traceback" not in out, out


def test_two_reports_of_one_node_are_refused_naming_the_node_and_files(tmp_path: Path) -> None:
    """A second report of node a would be merged into a's row silently (the newest wins)."""
    a = {"node": "a", "results": [], "facts": {"kernel": "6.8"}}
    b = {"node": "b", "results": [], "facts": {"kernel": "6.8"}}
    pa, pa2, pb = tmp_path / "a.json", tmp_path / "a2.json", tmp_path / "b.json"
    for p, r in ((pa, a), (pa2, a), (pb, b)):
        p.write_text(json.dumps(r))
    res = CliRunner().invoke(app, ["preflight", "--compare", str(pa), str(pa2), str(pb)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "node a given twice" in out and "a2.json" in out, out
    res = CliRunner().invoke(app, ["preflight", "--compare", str(pa), str(pb), str(pa)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "a.json given twice" in out, out


@pytest.mark.parametrize("field", ["node", "setting"])
def test_report_data_that_looks_like_rich_markup_is_printed_as_is(tmp_path: Path, field: str) -> None:
    """Node names and settings are data: `[/]` in them once crashed Rich (MarkupError)."""
    bad = {"id": "memory", "status": "fail", "setting": "x"}
    a = {"node": "a", "results": [bad], "facts": {"kernel": "6.8"}}
    b = {"node": "b", "results": [], "facts": {"kernel": "6.8"}}
    if field == "node":
        a["node"] = "[/bold]a[/]"
    else:
        bad["setting"] = "[bold]x[/]"
    code, out = compare_cli(tmp_path, a, b)
    assert code == 1, out
    assert ("[/bold]a[/]" if field == "node" else "[bold]x[/]") in out, out


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_report_that_is_not_a_regular_file_is_refused_without_reading(tmp_path: Path, kind: str) -> None:
    """`/dev/zero` once grew the reader to a MemoryError; a FIFO with no writer hung it."""
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"node": "a", "results": [], "facts": {}}))
    if kind == "fifo":
        other = tmp_path / "b.fifo"
        os.mkfifo(other)
    else:
        other = Path("/dev/zero")
    res = CliRunner().invoke(app, ["preflight", "--compare", str(a), str(other)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "not a regular file" in out and str(other) in out, out


def test_a_report_larger_than_the_cap_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(pf.REPORT_LIMIT_BYTES + 1)  # sparse: no disk used
    res = CliRunner().invoke(app, ["preflight", "--compare", str(big), str(big)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and f"larger than {pf.REPORT_LIMIT_BYTES} bytes" in out, out
