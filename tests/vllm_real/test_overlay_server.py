"""The plugin inside a real vLLM CPU server: one plan line per process, and the plan JSON.

Uses the session's ``vllm_server`` fixture (tiny Llama, overlay installed, ``SPARKPAIR_PLAN_PATH``
pointing into the fixture's temp folder). vLLM's CPU platform forces ``spawn``
(platforms/cpu.py:409 in 0.32.0), so the API server, the engine core and the worker each
load plugins themselves.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm_real

PLAN_RE = re.compile(r"^\((?P<proc>[^ ]+) pid=(?P<pid>\d+)\) INFO .*?(?P<line>sparkpair overlay plan: .*)$")


def _plan_lines(log: str) -> list[re.Match[str]]:
    out = []
    for raw in log.splitlines():
        if "sparkpair overlay plan:" in raw:
            m = PLAN_RE.match(raw)
            assert m, f"plan line without vLLM's process prefix: {raw!r}"
            out.append(m)
    return out


def test_plan_line_appears_once_in_every_vllm_process(vllm_server):
    log = Path(vllm_server.log_path).read_text(errors="replace")
    matches = _plan_lines(log)
    pids = [int(m["pid"]) for m in matches]
    assert len(pids) == len(set(pids)), f"a process logged the plan twice: {pids}"
    # Every process of the server that logged anything logged the plan line once.
    prefixed = {int(p) for p in re.findall(r"^\([^ ]+ pid=(\d+)\)", log, flags=re.M)}
    assert prefixed, "no vLLM-prefixed log lines at all"
    assert set(pids) == prefixed, f"processes without a plan line: {sorted(prefixed - set(pids))}"
    # API server, engine core and at least one worker.
    assert vllm_server.proc.pid in pids, "the API server did not log the plan line"
    kinds = {m["proc"] for m in matches}
    assert any(k.startswith("EngineCore") for k in kinds), kinds
    assert any("Worker" in k for k in kinds), kinds
    assert len(pids) >= 3


def test_plan_json_exists_and_matches_the_logged_line(vllm_server):
    plan_path = Path(vllm_server.env["SPARKPAIR_PLAN_PATH"])
    data = json.loads(plan_path.read_text())
    assert data["schema"] == "sparkpair-kernel-plan/1"
    assert data["vllm_version"] == "0.32.0" and data["version_verified"] is True
    assert data["platform"] == "cpu" and data["capability"] is None
    assert data["o_proj"]["backend"] == "upstream"
    assert data["router"]["bfloat16"]["path"] == data["router"]["float32"]["path"] == "upstream"
    log = Path(vllm_server.log_path).read_text(errors="replace")
    lines = {m["line"] for m in _plan_lines(log)}
    assert lines == {data["line"]}, "processes disagree with each other or with the JSON"
    assert not list(plan_path.parent.glob(f".{plan_path.name}.*.tmp")), "a temp file was left behind"
