"""The head's kernel plan reaches the health verdict: the gateway's ``plan_path`` setting
(``SPARKPAIR_PLAN_PATH``, what compose sets on the ``health`` service) feeds the suite's
``overlay_plan`` check, which passes with the plan in the report, and fails on a plan file that
is not JSON. (The two-container run of the same path is tests/docker/test_sim_pair.py.)"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sparkpair_health.gateway import Gateway, GatewaySettings, GatewaySettingsError
from sparkpair_overlay.plan import build_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from dsv4_fault_server import FaultState, Served, serve  # noqa: E402

PLAN = build_plan(
    vllm_version="0.33.0", version_verified=True, allow_unverified=False, platform="cuda", capability=(12, 1)
).to_json()


def settings(base_url: str, plan_path: Path | None) -> GatewaySettings:
    env = {
        "SPARKPAIR_BASE_URL": base_url,
        "SPARKPAIR_PROFILE": "deepseek-v4-flash",
        "SPARKPAIR_ONLY": "models,chat",
        "SPARKPAIR_DSV4_CHECKS": "false",
        "SPARKPAIR_READY_TIMEOUT_S": "20",
    }
    if plan_path is not None:
        env["SPARKPAIR_PLAN_PATH"] = str(plan_path)
    return GatewaySettings.from_env(env)


def report_of(plan_file: Path | None) -> dict[str, Any]:
    st = FaultState(served_model_name="deepseek-v4-flash")
    with serve(st) as fault:
        gw = Gateway(settings(fault.base_url, plan_file)).start()
        try:
            with Served(gw.app) as g:
                t_end = time.monotonic() + 60
                while gw.phase not in ("ready", "suite_failed") and time.monotonic() < t_end:
                    time.sleep(0.1)
                rep = httpx.get(g.base_url + "/report", timeout=5).json()
                rep["_readyz"] = httpx.get(g.base_url + "/readyz", timeout=5).status_code
                return rep
        finally:
            gw.stop()


def overlay_plan(rep: dict[str, Any]) -> dict[str, Any]:
    (check,) = [c for c in rep["checks"] if c["id"] == "overlay_plan"]
    return check


def test_the_plan_path_setting_comes_from_sparkpair_plan_path(tmp_path: Path) -> None:
    p = tmp_path / "kernel-plan.json"
    assert settings("http://127.0.0.1:9", p).plan_path == p
    assert settings("http://127.0.0.1:9", None).plan_path is None
    # read as the overlay reads the same variable: blanks stripped, a blank value names no file
    # (the gateway took " " as a file called " " and "  /x" as a relative path)
    assert settings("http://127.0.0.1:9", Path(f"  {p}  ")).plan_path == p
    assert settings("http://127.0.0.1:9", Path(" ")).plan_path is None


@pytest.mark.parametrize("name", ["SPARKPAIR_PLAN_FILE", "sparkpair_plan_file"])
def test_the_old_plan_file_name_is_refused_naming_value_and_new_name(name: str, tmp_path: Path) -> None:
    p = str(tmp_path / "kernel-plan.json")
    with pytest.raises(GatewaySettingsError) as e:
        GatewaySettings.from_env({"SPARKPAIR_BASE_URL": "http://127.0.0.1:9", name: p})
    wanted = f"{name}={p!r} is no longer read; wanted SPARKPAIR_PLAN_PATH (the same value, new name)"
    assert str(e.value) == wanted


def test_a_plan_file_that_is_a_folder_is_refused_naming_the_variable(tmp_path: Path) -> None:
    # refused when the settings are made (the gateway exits at start), not at the first suite run
    with pytest.raises(ValueError, match="plan_path=.* is a folder"):
        settings("http://127.0.0.1:9", tmp_path)


def test_the_plan_the_head_wrote_is_in_the_health_report(tmp_path: Path) -> None:
    p = tmp_path / "kernel-plan.json"
    p.write_text(json.dumps(PLAN))
    rep = report_of(p)
    assert overlay_plan(rep)["status"] == "pass", overlay_plan(rep)
    assert rep["overlay_plan"] == PLAN and rep["_readyz"] == 200


def test_a_corrupt_plan_file_fails_the_overlay_plan_check(tmp_path: Path) -> None:
    p = tmp_path / "kernel-plan.json"
    p.write_text('{"schema": "sparkpair-kernel-plan/1", "router')
    rep = report_of(p)
    check = overlay_plan(rep)
    assert (
        check["status"] == "fail" and str(p) in check["message"] and "not readable JSON" in check["message"]
    )
    assert rep["passed"] is False and rep["_readyz"] == 503


def test_without_the_setting_the_check_can_only_skip() -> None:
    rep = report_of(None)
    assert overlay_plan(rep)["status"] == "skip" and rep["overlay_plan"] is None


def test_settings_error_names_the_variable_for_a_bad_value(tmp_path: Path) -> None:
    with pytest.raises(GatewaySettingsError, match="SPARKPAIR_PLAN_PATH"):
        GatewaySettings.from_env({"SPARKPAIR_PLAN_PATH": str(tmp_path)})  # a folder
