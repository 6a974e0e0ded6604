"""``sparkpair report`` from recorded nodes: the recorded host trees (tests/fixtures/hosts), the
recorded vLLM logs (tests/faults/logs) and a recorded NCCL all-reduce log give the same page every
time; every section is there, filled or named empty with why; and headless Chromium (the browser
the status-page test uses, scripts/ensure-chromium.sh) renders it and reads its embedded data."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from obslib import rendered_dom, report_sections
from sparkpair_cli.main import app
from sparkpair_cli.report.api_sections import score_answer
from sparkpair_cli.report.gather import build_report
from sparkpair_cli.report.html import ReportFileError, read_report_data, render
from sparkpair_cli.report.model import NO_CUDA, SECTIONS, Options
from sparkpair_cli.report.nodes import RecordedNode
from sparkpair_serving.profile import load_profile
from typer.testing import CliRunner

TESTS = Path(__file__).resolve().parents[2]
HOSTS = TESTS / "fixtures" / "hosts"
LOGS = TESTS / "faults" / "logs"
WHEN = "2026-01-02T03:04:05+00:00"


def recorded(folder: Path, tree: str, log: str | None, nccl: str | None = None) -> Path:
    """A recorded node (docs/report.md): the host tree, the container's log, the NCCL log."""
    folder.mkdir(parents=True)
    for entry in (HOSTS / tree).iterdir():
        (folder / entry.name).symlink_to(entry)
    if log is not None:
        (folder / "container.log").symlink_to(LOGS / log)
    if nccl is not None:
        (folder / "files" / "tmp").mkdir(parents=True)
        (folder / "files" / "tmp" / "sparkpair-nccl-allreduce.log").symlink_to(HOSTS / "nccl-logs" / nccl)
    return folder


@pytest.fixture
def pair(tmp_path: Path) -> list[RecordedNode]:
    head = recorded(tmp_path / "head", "spark-head-good", "vllm032-cpu-mp-worker-killed-head.log",
                    "h200x2-socket-allreduce-rank0.log")  # fmt: skip
    worker = recorded(tmp_path / "worker", "spark-worker-good", "vllm032-cpu-engine-core-sigkill.log")
    return [RecordedNode("head", head), RecordedNode("worker", worker)]


def build(nodes: list[RecordedNode], root: Path) -> dict:
    opts = Options(base_url=None, accuracy=False, window_s=0, run_root=str(root), node_timeout_s=60)
    return build_report(nodes, opts, profile=load_profile("deepseek-v4-flash"), generated_at=WHEN)


def test_the_recorded_pair_gives_the_same_page_every_time_with_every_section(
    pair: list[RecordedNode], tmp_path: Path
) -> None:
    a, b = build(pair, tmp_path), build(pair, tmp_path)
    assert a == b
    page = render(a)
    assert page == render(b)
    secs = {s["id"]: s for s in a["sections"]}
    assert [s["id"] for s in a["sections"]] == [sid for sid, _ in SECTIONS]
    for sid, s in secs.items():
        assert s["state"] in ("filled", "partial", "empty"), sid
        assert s["state"] == "filled" or s["why"], f"{sid} is {s['state']} without saying why"
    # Preflight read both recorded trees and compared them.
    pf = secs["preflight"]
    assert pf["state"] == "filled" and set(pf["data"]["nodes"]) == {"head", "worker"}
    assert {r["id"] for r in pf["data"]["nodes"]["head"]} >= {"rdma-link", "gid-index", "memory"}
    assert pf["data"]["compare"], "no --compare result"
    # The recorded all-reduce ran over sockets: the verdict says so (not a pass).
    (log,) = secs["nccl"]["data"]["logs"]
    assert log["ok"] is False and "NET/Socket" in log["verdict"] and log["rows"]
    # No GPU in a recording without nvidia-smi: named, in the GPU section and the image's.
    assert secs["gpu"]["state"] == "empty" and all(NO_CUDA in w for w in secs["gpu"]["why"])
    # The killed engine's log is a fatal finding on the node that logged it.
    st = secs["stability"]["data"]["nodes"]
    assert st["worker"]["fatal"] and any(f["severity"] == "fatal" for f in st["worker"]["findings"])
    # Nothing probed on a recording without a probe file: named per node, with the path looked at.
    assert any("head: probe: no probe file at" in w for w in secs["kernels"]["why"])
    # No absolute path of this machine: the run's own folder is shown relative.
    assert str(tmp_path) not in page and str(TESTS) not in page
    # The page's embedded data is the report.
    out = tmp_path / "r.html"
    out.write_text(page)
    assert read_report_data(out) == json.loads(json.dumps(a))


PROBE = TESTS.parent / "benchmarks" / "results" / "probe-kernel-paths" / "run1" / "probe.json"
"""A probe file the probe wrote on a GPU (capability 12.1 faked): benchmarks/results/probe-kernel-paths."""


def test_the_kernel_section_shows_each_candidates_time_triton_and_instructions_and_the_choice(
    pair: list[RecordedNode], tmp_path: Path
) -> None:
    probe_dir = pair[0].folder / "files" / "var" / "cache" / "sparkpair" / "vllm"
    probe_dir.mkdir(parents=True)
    (probe_dir / "sparkpair-probe.json").symlink_to(PROBE)
    report = build(pair, tmp_path)
    kernels = {s["id"]: s for s in report["sections"]}["kernels"]
    probe = kernels["data"]["nodes"]["head"]["probe"]
    recorded_rows = json.loads(PROBE.read_text())["kernel_paths"]
    assert len(probe["kernel_paths"]) == len(recorded_rows) > 0
    row = probe["kernel_paths"][0]
    assert row["us"] == recorded_rows[0]["us"] and row["triton"] and row["instructions"], row
    decision = probe["kernel_path_decision"]
    assert decision and all(r["reason"] for r in decision["ranges"]), decision
    assert kernels["data"]["nodes"]["head"]["triton_in_probe"] == sorted({r["triton"] for r in recorded_rows})
    # the worker has no probe file: named, not silently left out
    assert any("worker: probe: no probe file at" in w for w in kernels["why"]), kernels["why"]
    page = render(report)
    assert "kernel_path_decision" in page and decision["ranges"][0]["reason"] in page
    assert recorded_rows[0]["instructions"][0] in page and recorded_rows[0]["config"] in page


def test_headless_chromium_renders_every_section_and_reads_the_embedded_data(
    pair: list[RecordedNode], tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    out.write_text(render(build(pair, tmp_path)))
    dom = rendered_dom(out.as_uri())
    shown = list(report_sections(dom))
    assert shown == [sid for sid, _ in SECTIONS], "a section is missing from the rendered page"
    # The page's own script parsed the embedded JSON in the browser and counted the sections.
    assert f'data-sections="{len(SECTIONS)}"' in dom, dom[:2000]


def test_the_cli_writes_the_report_from_recorded_nodes_and_compares_with_an_earlier_one(
    pair: list[RecordedNode], tmp_path: Path
) -> None:
    args = ["report", "--recorded", f"head={pair[0].folder}", "--recorded", f"worker={pair[1].folder}",
            "--base-url", "", "--no-accuracy", "--window", "0", "--profile", "deepseek-v4-flash"]  # fmt: skip
    first = tmp_path / "first.html"
    res = CliRunner().invoke(app, [*args, "--out", str(first)])
    assert res.exit_code == 0, res.output
    assert "sections filled" in res.output and first.is_file()
    second = tmp_path / "second.html"
    res = CliRunner().invoke(app, [*args, "--out", str(second), "--compare", str(first)])
    assert res.exit_code == 0, res.output
    secs = {s["id"]: s for s in read_report_data(second)["sections"]}
    (earlier,) = secs["compare"]["data"]["earlier"]
    assert earlier["file"] == "first.html" and secs["compare"]["state"] == "filled"
    # A file that is not a report is a bad option: refused before anything is gathered, naming it.
    junk = tmp_path / "junk.html"
    junk.write_text("<html>hello</html>")
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "third.html"), "--compare", str(junk)])
    assert res.exit_code == 2 and "junk.html: no embedded report data" in res.output, res.output
    assert not (tmp_path / "third.html").exists()
    with pytest.raises(ReportFileError, match="junk.html"):
        read_report_data(junk)


@pytest.mark.parametrize(
    "args, said",
    [
        (["--node", "head"], "--node 'head'; wanted NAME=CONTAINER"),
        (["--node", "head=c1@http://x"], "Docker URL 'http://x'"),
        (["--node", "head=c1", "--node", "head=c2"], "a name is given twice"),
        (["--recorded", "head=/nonexistent-folder"], "wanted NAME=FOLDER with an existing folder"),
        (["--node-timeout", "0"], "--node-timeout=0; wanted seconds > 0"),
        (["--kernel-log", "remote"], "--kernel-log='remote'"),
        (["--out", "/nonexistent-folder/r.html"], "does not exist"),
    ],
)
def test_bad_options_are_refused_naming_the_option_and_what_is_wanted(args: list[str], said: str) -> None:
    res = CliRunner().invoke(app, ["report", *args])
    assert res.exit_code == 2, res.output
    assert said in " ".join(res.output.split()), res.output


def test_the_accuracy_score_wants_the_answer_as_a_whole_word_on_the_first_line() -> None:
    assert score_answer("42", ["42"]) and score_answer("The answer is 42.", ["42"])
    assert not score_answer("420", ["42"]) and not score_answer("4.2", ["42"])
    assert score_answer("Paris\nIt is in France.", ["paris"]) and not score_answer("\nLyon\nParis", ["paris"])
    assert score_answer("Carbon dioxide (CO2).", ["carbon dioxide", "co2"])
    assert (
        not score_answer("", ["yes"])
        and score_answer("0.75", ["0.75"])
        and not score_answer("0.755", ["0.75"])
    )


@pytest.mark.parametrize("faults", [set(), {"usage_wrong"}])
def test_without_a_gateway_the_report_runs_the_health_suite_and_keeps_each_checks_evidence(
    pair: list[RecordedNode], tmp_path: Path, faults: set[str]
) -> None:
    sys.path.insert(0, str(TESTS / "faults"))
    from health_fault_server import FaultServer

    out = tmp_path / "r.html"
    with FaultServer(faults) as srv:
        args = ["report", "--recorded", f"head={pair[0].folder}", "--recorded", f"worker={pair[1].folder}",
                "--base-url", srv.base_url, "--profile", "tiny-demo", "--window", "0", "--time-limit", "120",
                "--request-timeout", "30", "--out", str(out)]  # fmt: skip
        res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    secs = {s["id"]: s for s in read_report_data(out)["sections"]}
    rep = secs["health"]["data"]["report"]
    assert secs["health"]["data"]["source"] == "suite" and rep["ready"]["ready"]
    assert rep["checks"] and all("evidence" in c for c in rep["checks"])
    status = {c["id"]: c["status"] for c in rep["checks"]}
    assert secs["summary"]["data"]["verdict"] == ("passed" if rep["passed"] else "failed")
    # The stand-in answers the protocol checks as vLLM does; wrong usage counts fail the verdict by name.
    if faults:
        assert rep["passed"] is False and "fail" in status.values(), status
    else:
        assert status["chat"] == "pass" and status["determinism"] == "pass", status
    assert secs["accuracy"]["data"]["asked"] == 40
