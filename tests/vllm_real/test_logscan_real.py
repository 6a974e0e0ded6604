"""The log scanner on real vLLM logs: a healthy server's log has no fatal finding.

The engine-death log (a real SIGKILLed engine core) is scanned in
``test_health_engine_death.py``, which owns that server.
"""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from sparkpair_health.logscan import scan_file

pytestmark = pytest.mark.vllm_real


def test_a_healthy_real_server_log_has_no_fatal_finding(vllm_server) -> None:  # type: ignore[no-untyped-def]
    # Make sure the log holds served requests, not only start-up lines.
    r = httpx.post(
        vllm_server.base_url + "/v1/chat/completions",
        timeout=60,
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
    )
    assert r.status_code == 200
    result = scan_file(vllm_server.log_path)
    assert result.lines > 20
    assert not result.fatal, result.to_json()


def test_the_logscan_command_reads_a_real_log_from_stdin_and_exits_0(vllm_server) -> None:  # type: ignore[no-untyped-def]
    r = subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.main", "logscan", "-"],
        input=vllm_server.log_path.read_text(errors="replace"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout[-2000:]
    assert "no fatal finding" in r.stdout


def test_the_logscan_command_exits_1_on_a_fatal_line_appended_to_a_real_log(vllm_server, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "vllm.log"
    log.write_text(
        vllm_server.log_path.read_text(errors="replace")
        + "(EngineCore_DP0 pid=1) ERROR KeyError: 'float8_e8m0fnu'\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.main", "logscan", str(log), "--json", str(tmp_path / "f.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stdout[-2000:]
    assert "e8m0_keyerror" in (tmp_path / "f.json").read_text()
