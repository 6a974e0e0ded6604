"""The whole health suite passes against the real vLLM CPU server, and its checks can fail there too.

Uses the session's ``vllm_server`` fixture (tiny-demo profile, overlay loaded); nothing
here breaks that server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from sparkpair_health.suite import SuiteSettings, Timeouts, run_suite

pytestmark = pytest.mark.vllm_real


def _plan_path(server) -> Path:  # type: ignore[no-untyped-def]
    return Path(server.env["SPARKPAIR_PLAN_PATH"])


def test_every_applicable_check_passes_against_the_real_vllm_server(
    vllm_server, tiny_profile, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    events: list[tuple[str, str]] = []
    settings = SuiteSettings(
        base_url=vllm_server.base_url,
        profile=tiny_profile,
        report_json=tmp_path / "report.json",
        junit_xml=tmp_path / "report.xml",
        plan_file=_plan_path(vllm_server),
        timeouts=Timeouts(ready_s=120),
    )
    report = run_suite(settings, on_progress=lambda e, d: events.append((e, d)))
    bad = [(c.id, c.status, c.message) for c in report.checks if c.status not in ("pass", "skip")]
    assert report.passed, bad
    statuses = {c.id: c.status for c in report.checks}
    for must in (
        "models",
        "chat",
        "stream",
        "stream_no_usage",
        "tool_required",
        "tool_named",
        "long_prompt_accepted",
        "long_prompt_rejected",
        "determinism",
        "thinking_modes",
    ):
        assert statuses[must] == "pass", (must, report.check(must).message)
    # The tiny profile skips semantic checks with its stated reason.
    assert statuses["semantic"] == "skip" and "random weights" in report.check("semantic").message
    assert all(c.latency_ms > 0 for c in report.checks if c.status == "pass")
    assert report.server_version == "0.32.0"
    # The overlay's plan is in the report when the overlay wrote it, and the skip says so when not.
    if _plan_path(vllm_server).is_file():
        assert report.overlay_plan is not None and statuses["overlay_plan"] == "pass"
    else:
        assert statuses["overlay_plan"] == "skip" and "does not exist" in report.overlay_plan_note
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["passed"] is True and on_disk["counts"]["fail"] == 0
    suite = ET.parse(tmp_path / "report.xml").getroot()
    assert suite.get("failures") == "0" and suite.get("errors") == "0"
    assert [e for e, _ in events][:1] in (["ready"], ["ready-wait"]) and events[-1] == ("done", "passed")
    tool = report.check("tool_required").evidence
    assert tool["finish_reason"] == "tool_calls" and tool["request"]["logit_bias"]


def test_without_the_whitespace_setting_the_tool_check_fails_on_the_real_server(
    vllm_server, tiny_profile
) -> None:  # type: ignore[no-untyped-def]
    # The random model wanders in JSON whitespace until max_tokens when nothing stops it:
    # the check must report that, not pass.
    p = tiny_profile.model_copy(deep=True)
    p.checks.tools.suppress_whitespace_tokens = False
    p.checks.tools.max_tokens = 48
    settings = SuiteSettings(
        base_url=vllm_server.base_url, profile=p, only=["tool_required"], skip_ready=True
    )
    res = run_suite(settings).check("tool_required")
    assert res.status == "fail"
    assert "finish_reason is 'length', wanted 'tool_calls'" in res.message, res.message


def test_the_health_command_exits_0_and_writes_both_reports(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkpair_cli.main",
            "health",
            "--base-url",
            vllm_server.base_url,
            "--profile",
            "tiny-demo",
            "--report-json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "r.xml"),
            "--plan-file",
            str(_plan_path(vllm_server)),
            "--ready-timeout",
            "120",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "PASSED" in r.stdout and "tool_required" in r.stdout
    assert json.loads((tmp_path / "r.json").read_text())["passed"] is True
    assert (tmp_path / "r.xml").read_text().startswith("<?xml")


def test_the_health_command_exits_non_zero_when_a_check_fails(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A profile whose max_model_len disagrees with the server's is a failed models check.
    prof = tmp_path / "wrong.yaml"
    text = (Path(__file__).resolve().parents[2] / "configs/profiles/tiny-demo.yaml").read_text()
    prof.write_text(text.replace("max_model_len: 2048", "max_model_len: 4096"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkpair_cli.main",
            "health",
            "--base-url",
            vllm_server.base_url,
            "--profile",
            str(prof),
            "--only",
            "models",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout[-3000:]
    assert "max_model_len=2048" in r.stdout.replace("\n", " ") or "2048" in r.stdout
