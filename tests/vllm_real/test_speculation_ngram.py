"""Speculative decoding against a real vLLM CPU server: n-gram drafting on the tiny model.

One server per module (the ``tiny-ngram`` profile: ``--speculative-config`` with method
``ngram``, k=3): the speculation checks pass and the suite reports a measured acceptance rate;
the server's ``/metrics`` carries vLLM 0.32's speculation counters under the names the checks
and the bench read; the bench reports acceptance columns per cell.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sparkpair_health.checks import CHECKS
from sparkpair_health.checks.speculation import SPEC_COUNTERS, SPEC_FIRST, SPEC_LAST, parse_spec_counters
from sparkpair_health.suite import SuiteSettings, run_suite
from sparkpair_serving.profile import load_profile

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]


@pytest.fixture(scope="module")
def ngram_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The tiny model served with n-gram speculation (started once for this module)."""
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.server import VllmServer

    logdir = tmp_path_factory.mktemp("vllm-ngram")
    server = VllmServer.from_profile(load_profile("tiny-ngram"), tiny_model, log_path=logdir / "server.log")
    server.start()
    try:
        server.wait_ready(timeout_s=float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420")))
        yield server
    finally:
        server.stop()


def test_the_cpu_server_runs_ngram_speculation_and_the_suite_reports_the_acceptance_rate(
    ngram_server: Any,
) -> None:
    assert '"method":"ngram"' in " ".join(ngram_server.command())
    settings = SuiteSettings(base_url=ngram_server.base_url, profile="tiny-ngram", skip_ready=True)
    chat = [c for c in CHECKS if c.id in ("chat", "stream", "determinism")]
    report = run_suite(settings, checks=[*SPEC_FIRST, *chat, *SPEC_LAST])
    bad = [(c.id, c.status, c.message) for c in report.checks if c.status not in ("pass", "skip")]
    assert not bad, bad
    acc = report.check("spec_acceptance")
    ev = acc.evidence
    assert ev["draft_tokens"] > 0 and 0.0 <= ev["acceptance_rate"] <= 1.0, ev
    assert f"acceptance rate {ev['acceptance_rate']:.3f}" in acc.message, acc.message
    # The same counters, read independently: the rate is over the suite's requests only.
    text = httpx.get(ngram_server.base_url + "/metrics", timeout=10).text
    for name in SPEC_COUNTERS.values():
        assert any(line.startswith(name) for line in text.splitlines()), f"{name} missing from /metrics"
    total = parse_spec_counters(text)
    assert total is not None and total.draft_tokens >= ev["draft_tokens"]


def test_bench_reports_acceptance_rate_and_mean_accepted_length_per_cell(
    ngram_server: Any, tmp_path: Path
) -> None:
    wl = tmp_path / "wl.yaml"
    wl.write_text(
        "name: spec\nseed: 3\nrequests_per_user: 1\nwarmup_requests: 0\nmetrics_interval_s: 0.5\n"
        "thinking_modes: {off: {}}\nsampling: {temperature: 0.0}\n"
        "grid: {context_tokens: [64], output_tokens: [16], concurrency: [2], thinking: [off]}\n"
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sparkpair_cli.cmd_bench",
            "--base-url",
            ngram_server.base_url,
            "--out",
            str(out),
            "--workload",
            str(wl),
            "--no-plots",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = json.loads((out / "result.json").read_text())["cells"]
    sm = cells[0]["server_metrics"]["summary"]
    assert sm["spec_acceptance_rate"] is not None and 0.0 <= sm["spec_acceptance_rate"] <= 1.0, sm
    assert sm["spec_acceptance_length"] is not None and 1.0 <= sm["spec_acceptance_length"] <= 4.0, sm
    assert "spec acc" in proc.stdout and "acc len" in proc.stdout, proc.stdout[-3000:]
