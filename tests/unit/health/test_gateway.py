"""The gateway's /readyz follows the suite and the canary; settings come from env with one schema."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from sparkpair_health.gateway import Gateway, GatewaySettings, GatewaySettingsError
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from dsv4_fault_server import FaultState, Served, serve  # noqa: E402
from readyz_poll import wait_readyz  # noqa: E402


def _dsv4_profile() -> str:
    """deepseek-v4-flash without speculation (the DeepSeek-V4 fault server counts no draft
    tokens; the speculation checks have their own tests) with the server's default of thinking
    on (as the fault server does) and a needle that fits the fault server's prompts."""
    import tempfile

    import yaml
    from sparkpair_serving.profile import PROFILES_DIR

    d = yaml.safe_load((PROFILES_DIR / "deepseek-v4-flash.yaml").read_text())
    d["server"].pop("speculation", None)
    args = d["server"]["args"]
    if "--default-chat-template-kwargs" in args:
        i = args.index("--default-chat-template-kwargs")
        del args[i : i + 2]
    d["checks"]["dsv4"] = {"long_context_tokens": 3000}
    p = Path(tempfile.mkdtemp(prefix="wt-gw-")) / "dsv4-fault.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


DSV4_PROFILE = _dsv4_profile()


def gw_settings(base_url: str, **kw: Any) -> GatewaySettings:
    base: dict[str, Any] = dict(
        base_url=base_url,
        profile=DSV4_PROFILE,
        only=["models", "chat", "thinking_modes"],
        long_prompt_timeout_s=30,  # the suite's requests: liveness bounds on a loaded machine
        canary_interval_s=0.5,
        canary_timeout_s=2.0,
        ready_timeout_s=20,
        request_timeout_s=30,
    )
    base.update(kw)
    return GatewaySettings(**base)


def wait_for(fn: Any, timeout_s: float, what: str) -> Any:
    t_end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < t_end:
        last = fn()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {timeout_s} s; last: {last}")


def readyz(url: str) -> httpx.Response:
    return httpx.get(url + "/readyz", timeout=5)


@pytest.mark.slow
def test_ready_after_passing_suite_then_503_naming_the_dead_engine_within_one_canary_interval() -> None:
    st = FaultState(served_model_name="deepseek-v4-flash")
    with serve(st) as fault:
        gw = Gateway(gw_settings(fault.base_url))
        with Served(gw.app) as g:
            assert httpx.get(g.base_url + "/livez").status_code == 200
            assert readyz(g.base_url).status_code == 503, "ready before any suite ran"
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                rep = httpx.get(g.base_url + "/report").json()
                ids = [c["id"] for c in rep["checks"]]
                assert (
                    rep["passed"]
                    and "chat" in ids
                    and "dsv4.greedy_sanity" in ids
                    and "dsv4.tool_calls" in ids
                )
                wait_for(lambda: (gw.last_canary or {}).get("ok"), 5, "a successful canary")
                metrics = httpx.get(g.base_url + "/metrics").text
                for name in (
                    "sparkpair_ready 1.0",
                    'sparkpair_check_status{check="thinking_modes",status="pass"} 1.0',
                    "sparkpair_check_duration_seconds{",
                    "sparkpair_canary_latency_seconds_count",
                    "sparkpair_suite_passed 1.0",
                ):
                    assert name in metrics, name
                st.faults.add("engine_dead")
                held, r = wait_readyz(g.base_url, 503, 5, "engine dead")
                assert held <= 0.5 + 0.5, (
                    f"/readyz 200 to a poll sent {held:.2f} s in: later than one canary interval (+ slack)"
                )
                body = r.json()
                assert body["failing_check"] == "canary" and "EngineDeadError" in body["cause"]
                assert body["cause"].startswith("engine died")
                assert "sparkpair_ready 0.0" in httpx.get(g.base_url + "/metrics").text
                st.faults.discard("engine_dead")
                wait_readyz(g.base_url, 200, 30)
            finally:
                gw.stop()


@pytest.mark.slow
def test_readyz_names_the_failing_check_when_the_suite_fails() -> None:
    st = FaultState(served_model_name="deepseek-v4-flash", faults={"garbage"})
    with serve(st) as fault:
        gw = Gateway(gw_settings(fault.base_url)).start()
        try:
            with Served(gw.app) as g:
                wait_for(lambda: gw.phase == "suite_failed", 60, "suite_failed")
                r = readyz(g.base_url)
                assert r.status_code == 503
                assert r.json()["failing_check"] == "dsv4.greedy_sanity"
                assert "lacks 'Paris'" in r.json()["cause"]
                time.sleep(1.2)
                assert readyz(g.base_url).status_code == 503, "a passing canary must not hide a failed suite"
                assert httpx.get(g.base_url + "/report").json()["passed"] is False
        finally:
            gw.stop()


@pytest.mark.slow
def test_unreachable_server_is_not_ready_with_the_readiness_cause_and_the_gateway_gives_up() -> None:
    gw = Gateway(gw_settings("http://127.0.0.1:9", ready_timeout_s=1.5)).start()
    try:
        with Served(gw.app) as g:
            wait_for(lambda: gw.phase == "not_ready", 20, "not_ready")
            body = readyz(g.base_url).json()
            assert body["failing_check"] == "readiness" and "not ready after" in body["cause"]
            assert gw.gave_up is not None and "not ready after" in gw.gave_up
            live = httpx.get(g.base_url + "/livez")
            assert live.status_code == 503 and live.json()["cause"].startswith("gave up: not ready")
    finally:
        gw.stop()


def test_api_key_reaches_the_server_and_never_the_endpoints(tmp_path: Path) -> None:
    key = "sk-gateway-secret-42"
    kf = tmp_path / "key"
    kf.write_text(key + "\n")
    st = FaultState(served_model_name="deepseek-v4-flash", api_key=key)
    with serve(st) as fault:
        gw = Gateway(gw_settings(fault.base_url, api_key_file=kf)).start()
        try:
            with Served(gw.app) as g:
                wait_readyz(g.base_url, 200, 60)
                texts = [httpx.get(g.base_url + p).text for p in ("/readyz", "/report", "/metrics", "/livez")]
        finally:
            gw.stop()
    assert all(key not in t for t in texts)
    assert key not in repr(gw.s) and key not in gw.s.model_dump_json()


@pytest.mark.parametrize(
    ("profile", "setting", "runs"),
    [
        ("deepseek-v4-flash", None, True),  # unset: the profile says DeepSeek-V4
        ("tiny-demo", None, False),  # unset: the profile says another model
        ("deepseek-v4-flash", "false", False),  # skipped on request
        ("tiny-demo", "true", True),  # added on request (the tests' tiny model)
    ],
)
def test_the_model_checks_follow_the_profile_unless_the_setting_says_otherwise(
    profile: str, setting: str | None, runs: bool
) -> None:
    env = {"SPARKPAIR_PROFILE": profile}
    if setting is not None:
        env["SPARKPAIR_DSV4_CHECKS"] = setting
    assert GatewaySettings.from_env(env).runs_model_checks() is runs


def test_settings_from_env_use_one_schema_and_name_the_bad_variable() -> None:
    env = {
        "SPARKPAIR_BASE_URL": "http://127.0.0.1:8000/v1",
        "SPARKPAIR_CANARY_INTERVAL_S": "2.5",
        "SPARKPAIR_DSV4_CHECKS": "false",
        "SPARKPAIR_DSV4": "{}",
        "SPARKPAIR_ONLY": "models, chat",
        "SPARKPAIR_API_KEY": "k-123",
    }
    s = GatewaySettings.from_env(env, overrides={"port": 9000, "profile": None})
    assert (s.base_url, s.canary_interval_s, s.dsv4_checks, s.dsv4, s.only, s.port) == (
        "http://127.0.0.1:8000",
        2.5,
        False,
        {},
        ["models", "chat"],
        9000,
    )
    assert s.api_key is not None and s.api_key.get_secret_value() == "k-123"
    with pytest.raises(
        GatewaySettingsError, match=r"SPARKPAIR_CANARY_INTERVAL_S='-1'.*greater than or equal to 0.1"
    ):
        GatewaySettings.from_env({"SPARKPAIR_CANARY_INTERVAL_S": "-1"})
    # The model-check settings are profile fields now: the old variable is refused, naming the field.
    with pytest.raises(GatewaySettingsError, match=r"SPARKPAIR_DSV4.*field checks\.dsv4\.soak_requests"):
        GatewaySettings.from_env({"SPARKPAIR_DSV4": '{"soak_requests": 15}'})
    with pytest.raises(GatewaySettingsError, match=r"SPARKPAIR_DSV4=.*not valid JSON"):
        GatewaySettings.from_env({"SPARKPAIR_DSV4": "{bad"})
    with pytest.raises(GatewaySettingsError, match=r"SPARKPAIR_BASE_URL='localhost:8000'.*http://host:port"):
        GatewaySettings.from_env({"SPARKPAIR_BASE_URL": "localhost:8000"})


def test_cli_command_reads_env_and_options_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkpair_cli.cmd_gateway import register

    app = typer.Typer()
    register(app)

    @app.command()
    def _other() -> None:  # a second command keeps typer in multi-command mode
        pass

    monkeypatch.setenv("SPARKPAIR_PROFILE", "tiny-demo")  # as the node env sets it
    monkeypatch.setenv("SPARKPAIR_CANARY_INTERVAL_S", "7")
    monkeypatch.setenv("SPARKPAIR_API_KEY", "never-print-me")
    r = CliRunner().invoke(app, ["gateway", "--check-settings", "--port", "9123"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["canary_interval_s"], d["port"], d["dsv4"]) == (7.0, 9123, {})
    monkeypatch.setenv("SPARKPAIR_DSV4", '{"soak_requests": 3}')
    r = CliRunner().invoke(app, ["gateway", "--check-settings"])
    assert r.exit_code == 3 and "checks.dsv4.soak_requests" in r.output, r.output
    monkeypatch.delenv("SPARKPAIR_DSV4")
    assert "never-print-me" not in r.output
    monkeypatch.setenv("SPARKPAIR_PORT", "70000")
    r = CliRunner().invoke(app, ["gateway", "--check-settings"])
    assert r.exit_code == 3 and "SPARKPAIR_PORT='70000'" in r.output and "65535" in r.output


def test_stability_fatal_on_a_node_turns_readyz_503_naming_node_and_cause() -> None:
    from sparkpair_health.node_access import CommandResult
    from sparkpair_health.stability import StabilityMonitor

    kernel = {"text": "kernel: Linux version 6.11.0\n"}

    def recorded(argv, timeout_s):  # type: ignore[no-untyped-def]
        if argv[:4] == ["journalctl", "-k", "-b", "-1"]:
            return CommandResult(0, "kernel: reboot: Power down\n")
        return CommandResult(0, kernel["text"])

    st = FaultState(served_model_name="deepseek-v4-flash")
    with serve(st) as fault:
        s = gw_settings(
            fault.base_url,
            stability={"nodes": [{"name": "worker", "kernel_log": "local"}]},
            stability_interval_s=0.5,
        )
        gw = Gateway(s)
        assert s.stability is not None
        gw.monitor = StabilityMonitor(s.stability, runners={"worker": recorded})
        gw.start()
        try:
            with Served(gw.app) as g:
                wait_readyz(g.base_url, 200, 60)
                rep = httpx.get(g.base_url + "/report").json()
                assert {c["id"]: c["status"] for c in rep["checks"]}["stability"] == "pass"
                kernel["text"] += "kernel: NVRM: Xid (PCI:000f:01:00): 79, GPU has fallen off the bus\n"
                body = wait_readyz(g.base_url, 503, 5)[1].json()
                assert body["failing_check"] == "stability"
                assert body["cause"].startswith("worker kernel: the GPU reported an Xid error")
                assert (
                    'sparkpair_stability_findings{node="worker",severity="fatal"} 1.0'
                    in httpx.get(g.base_url + "/metrics").text
                )
        finally:
            gw.stop()
