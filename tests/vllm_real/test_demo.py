"""`sparkpair demo` end to end: real vLLM CPU server, overlay loaded, health suite, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]


def _processes_with_env(marker: str) -> list[int]:
    """PIDs whose environment contains ``marker`` (every process the demo started inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _demo(home: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, SPARKPAIR_HOME=str(home), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "sparkpair_cli.main", "demo", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_demo_passes_every_applicable_check_shows_the_plan_and_leaves_no_process(tmp_path: Path) -> None:
    proc = _demo(tmp_path)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1
    report = json.loads((runs[0] / "health-report.json").read_text())
    assert report["passed"] is True, report
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert "fail" not in statuses.values(), statuses
    assert report.get("overlay_plan"), "the report must carry the overlay's kernel plan"
    assert "sparkpair overlay plan:" in out
    assert (runs[0] / "health-report.xml").exists()
    assert _processes_with_env(f"SPARKPAIR_HOME={tmp_path}") == []


def test_ctrl_c_during_the_demo_stops_every_vllm_process(tmp_path: Path) -> None:
    proc = _demo(tmp_path)
    deadline = time.monotonic() + 600
    # Wait until the vLLM server (and its engine) exist, then interrupt like a user would.
    while time.monotonic() < deadline:
        logs = list(tmp_path.glob("runs/*/vllm-server.log"))
        if logs and "EngineCore" in logs[0].read_text(errors="replace"):
            break
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        time.sleep(1)
    else:
        pytest.fail("the demo never started the vLLM engine")
    assert len(_processes_with_env(f"SPARKPAIR_HOME={tmp_path}")) >= 2
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "interrupted" in out
    assert _processes_with_env(f"SPARKPAIR_HOME={tmp_path}") == []
