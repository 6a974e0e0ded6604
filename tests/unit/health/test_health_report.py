"""The report: verdict logic, JSON and JUnit XML, and the process exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from sparkpair_health.report import CheckResult, ReadyInfo, Report
from sparkpair_health.suite import SuiteSettings, suite_exit_code


def report(*statuses: str, ready: bool = True, aborted: str | None = None) -> Report:
    r = Report(
        base_url="http://127.0.0.1:1",
        served_model_name="tiny",
        profile="tiny-demo",
        aborted=aborted,
        ready=ReadyInfo(ready=ready, stage="ready" if ready else "decode", waited_s=1.5, detail="d"),
    )
    r.checks = [
        CheckResult(id=f"c{i}", title="t", status=s, message=f"m{i}", latency_ms=12.5)  # type: ignore[arg-type]
        for i, s in enumerate(statuses)
    ]
    return r


def test_skips_do_not_fail_the_verdict_but_fails_and_errors_do() -> None:
    assert report("pass", "skip").passed and suite_exit_code(report("pass", "skip")) == 0
    assert not report("pass", "fail").passed and suite_exit_code(report("pass", "fail")) == 1
    assert not report("pass", "error").passed and suite_exit_code(report("error")) == 1
    assert suite_exit_code(report(ready=False)) == 2
    assert suite_exit_code(report("pass", aborted="engine died: x")) == 2


def test_json_carries_the_verdict_counts_and_every_check() -> None:
    d = json.loads(report("pass", "fail", "skip").to_json())
    assert d["passed"] is False and d["counts"] == {"pass": 1, "fail": 1, "skip": 1, "error": 0}
    assert [c["status"] for c in d["checks"]] == ["pass", "fail", "skip"] and d["checks"][0][
        "latency_ms"
    ] == 12.5


def test_junit_maps_statuses_to_failure_error_and_skipped() -> None:
    root = ET.fromstring(report("pass", "fail", "error", "skip", aborted="engine died: x").to_junit_xml())
    assert root.get("tests") == "5" and root.get("failures") == "1" and root.get("errors") == "2"
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert cases["c1"].find("failure") is not None and cases["c2"].find("error") is not None
    assert cases["c3"].find("skipped") is not None and cases["readiness"].find("error") is not None


def test_settings_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="base_url='localhost:8000'"):
        SuiteSettings(base_url="localhost:8000")
    with pytest.raises(ValueError, match="only='nope': no such check"):
        SuiteSettings(base_url="http://127.0.0.1:1", only=["nope"])
    assert SuiteSettings(base_url="http://127.0.0.1:1/v1/").base_url == "http://127.0.0.1:1"


def test_printed_summary_counts_the_checks_and_names_readiness_apart() -> None:
    """The table shows a readiness row that is not a suite check; the summary says so, so that its
    counts (suite checks only) do not disagree with the number of rows."""
    from rich.console import Console
    from sparkpair_health.render import render_report

    for ready, want in (
        (True, "PASSED (readiness pass; checks: 1 pass, 1 skip)"),
        (False, "FAILED: server not"),
    ):
        console = Console(record=True, width=200)
        render_report(report("pass", "skip", ready=ready), console)
        assert want in console.export_text(), console.export_text()


def test_server_text_is_shown_as_text_never_read_as_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    """A check message or readiness detail holding Rich markup (a model answer with ``[/INST]``,
    ``[/]``) is printed as it is: no MarkupError, nothing swallowed."""
    from rich.console import Console
    from sparkpair_health import render

    r = report("fail", ready=False, aborted="engine said [/] and [bold]x")
    r.checks[0].message = "answer: [/INST] [/] [bold]y"
    r.ready.detail = "server: [/]"  # type: ignore[union-attr]
    console = Console(record=True, width=200)
    render.render_report(r, console)
    text = console.export_text()
    assert "answer: [/INST] [/] [bold]y" in text and "engine said [/] and [bold]x" in text, text

    # Without a terminal the spinner shows nothing: a "still waiting" line instead (as markup-safe).
    monkeypatch.setattr(render, "WAIT_LINE_S", 0.0)
    quiet = Console(record=True, width=200, force_terminal=False)
    with render.live_progress(quiet) as on_progress:
        on_progress("ready-wait", "not reachable [/]")
        on_progress("check-done", "models pass 12 ms [/]")
    out = quiet.export_text()
    assert "health: still waiting for readiness: not reachable [/]" in out, out
    assert "models 12 ms [/]" in out, out
