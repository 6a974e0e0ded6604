"""``sparkpair report`` against the real vLLM CPU server (the session's ``vllm_server``): the shipped
accuracy set is asked greedy and the page is written in bounded time with every section; the nodes'
container sections name what they could not read (this server is a process, not a pair of
containers), and the GPU ones say so. The health suite is left out here (no --profile; the section
names why): it has its own real-server tests, and the report's use of it is tested against the
stand-in server (tests/unit/cli/test_report_fixture.py). With --bench on a one-cell workload. About
1-2 minutes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm_real


def test_the_report_runs_end_to_end_against_the_real_cpu_server(vllm_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from sparkpair_cli.report.html import read_report_data
    from sparkpair_cli.report.model import SECTIONS

    out = tmp_path / "report.html"
    # One benchmark cell (the quick workload cut to 1 user, 128 tokens in, 8 out): the --bench path,
    # not a speed.
    workload = tmp_path / "one-cell.yaml"
    workload.write_text(
        "name: one-cell\ndescription: one cell of the quick workload\nseed: 7\nrequests_per_user: 1\n"
        "warmup_requests: 0\nmetrics_interval_s: 0.5\n"
        "thinking_modes:\n  off: {chat_template_kwargs: {enable_thinking: false}}\n"
        "sampling: {temperature: 1.0, top_p: 1.0}\n"
        "grid: {context_tokens: [128], output_tokens: [8], concurrency: [1], thinking: [off]}\n"
    )
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.main", "report", "--base-url", vllm_server.base_url,
         "--node", "head=sparkpair-report-absent-head", "--node",
         "worker=sparkpair-report-absent-worker", "--window", "0", "--time-limit", "120",
         "--node-timeout", "30", "--bench", "--bench-workload", str(workload), "--bench-timeout", "240",
         "--out", str(out)],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    print(f"sparkpair report took {took:.0f} s: {r.stdout.strip()}")
    data = read_report_data(out)
    secs = {s["id"]: s for s in data["sections"]}
    assert list(secs) == [sid for sid, _ in SECTIONS]
    # No gateway and no profile: the health section says so rather than staying silent.
    assert secs["health"]["state"] == "empty" and "no profile" in secs["health"]["why"][0]
    # The real server answered every question of the accuracy set.
    acc = secs["accuracy"]["data"]
    assert acc["model"] == "tiny" and acc["asked"] == acc["of"] == 40, secs["accuracy"]["why"]
    assert all(row.get("error") is None for row in acc["rows"]), acc["rows"][:3]
    # The nodes' sections name the containers they could not read; the GPU ones name the device.
    assert secs["image"]["state"] == "empty"
    assert any("sparkpair-report-absent-head" in w for w in secs["image"]["why"]), secs["image"]["why"]
    assert secs["gpu"]["state"] == "empty" and secs["gpu"]["why"]
    # The benchmark cell, with its provenance, beside the field's single-user figures.
    bench = secs["bench"]
    assert bench["state"] == "filled", bench["why"]
    (cell,) = bench["data"]["result"]
    assert cell["concurrency"] == 1 and cell["per_user_decode_tok_s"] and bench["data"]["provenance"]
    assert any(f["concurrency"] == 1 for f in bench["data"]["reference"]["figures"])
    assert "this pair beside the field" in out.read_text()
    assert took < 120 + 30 + 240 + 60
