"""Bad gateway settings stop ``sparkpair gateway`` at start with exit 3, naming the variable,
the value seen and what was wanted; before this, a bad profile/only/dsv4 left the gateway
up answering 503 "suite defect" forever, and a binary key file was a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from sparkpair_health.gateway import GatewaySettings, GatewaySettingsError
from sparkpair_serving.apikey import ApiKeyError, resolve_api_key
from typer.testing import CliRunner


def gateway(env: dict[str, str | None], *args: str) -> tuple[int, str]:
    """``gateway --check-settings`` with the node env's SPARKPAIR_PROFILE unless ``env`` sets it."""
    full = {"SPARKPAIR_PROFILE": "tiny-demo", **env}
    res = CliRunner().invoke(app, ["gateway", "--check-settings", *args], env=full)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output.replace("\n", " ").replace("  ", " ")


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"SPARKPAIR_PROFILE": "nope"}, "SPARKPAIR_PROFILE='nope': profile 'nope': no file"),
        ({"SPARKPAIR_ONLY": "bogus"}, "no such check ['bogus']"),
        ({"SPARKPAIR_DSV4": '{"bogus": 1}'}, "'bogus' is not a DeepSeek-V4 check setting; wanted a field"),
        ({"SPARKPAIR_DSV4": '{"request_timeout_s": -1}'}, "'request_timeout_s' was removed; it is now"),
        ({"SPARKPAIR_DSV4": '{"soak_requests": 15}'}, "now the profile field checks.dsv4.soak_requests"),
        ({"SPARKPAIR_DSV4_SOAK_REQUESTS": "15"}, "SPARKPAIR_DSV4_SOAK_REQUESTS: 'soak_requests' was removed"),
        ({"sparkpair_dsv4_soak_requests": "5"}, "sparkpair_dsv4_soak_requests: 'soak_requests' was removed"),
        ({"SPARKPAIR_RECOVERY_WINDOW_S": "1e-300"}, "SPARKPAIR_RECOVERY_WINDOW_S='1e-300'"),
        ({"SPARKPAIR_RECOVERY_MAX_RESTARTS": "1000000000000"}, "SPARKPAIR_RECOVERY_MAX_RESTARTS="),
        ({"SPARKPAIR_CANARY_INTERVAL_S": "1e-9"}, "SPARKPAIR_CANARY_INTERVAL_S='1e-9'"),
        ({"SPARKPAIR_BASE_URL": "http://[::1"}, "SPARKPAIR_BASE_URL='http://[::1': does not parse"),
        ({"SPARKPAIR_BASE_URL": "http://127.0.0.1:70000"}, "Port out of range"),
        ({"SPARKPAIR_STABILITY": '{"x": 1}'}, "SPARKPAIR_STABILITY: x=1"),
        ({"SPARKPAIR_PEERS": "spark-b"}, "SPARKPAIR_PEERS='spark-b': peer entry 'spark-b' is not name="),
        ({"SPARKPAIR_PEERS": '[{"name": "b"}]'}, "entry 0 address: Field required"),
        (
            {"SPARKPAIR_PEERS": "b=999.1.1.1"},
            "peer address '999.1.1.1' is neither an IP address nor a host name",
        ),
        ({"SPARKPAIR_PEERS": "b=http://x"}, "peer address 'http://x' is neither"),
        ({"SPARKPAIR_PEERS": "b=10.0.0.2,b=10.0.0.3"}, "peer names ['b'] are given twice"),
        ({"SPARKPAIR_PEERS": "b c=10.0.0.2"}, "peer name 'b c' is not a node name"),
        ({"SPARKPAIR_PEER_PROBE_PORT": "0"}, "SPARKPAIR_PEER_PROBE_PORT='0'"),
        ({"SPARKPAIR_READY_TIMEOUT_S": "inf"}, "SPARKPAIR_READY_TIMEOUT_S='inf'"),
        # Past threading's wait limit the worker thread would die after the first canary.
        ({"SPARKPAIR_CANARY_INTERVAL_S": "1e10"}, "SPARKPAIR_CANARY_INTERVAL_S='1e10': Input should be less"),
        ({"SPARKPAIR_CANARY_TIMEOUT_S": "1e10"}, "SPARKPAIR_CANARY_TIMEOUT_S='1e10': Input should be less"),
        ({"SPARKPAIR_STABILITY_INTERVAL_S": "1e10"}, "SPARKPAIR_STABILITY_INTERVAL_S='1e10'"),
        ({"SPARKPAIR_RECOVERY_AFTER_FAILURES": "99999999999"}, "SPARKPAIR_RECOVERY_AFTER_FAILURES="),
        ({"SPARKPAIR_RECOVERY_STALL_S": "1e300"}, "SPARKPAIR_RECOVERY_STALL_S='1e300'"),
        # The stability nodes: what the look would only find out at run time.
        (
            {"SPARKPAIR_STABILITY": '{"nodes": [{"name": "head", "kernel_log": "bogus"}]}'},
            "kernel_log='bogus': wanted 'local', 'none' or 'ssh://user@host'",
        ),
        (
            {"SPARKPAIR_STABILITY": '{"nodes": [{"name": "head", "docker_url": "garbage"}]}'},
            "docker_url='garbage': wanted unix://",
        ),
        ({"SPARKPAIR_STABILITY": '{"docker_timeout_s": "inf"}'}, "docker_timeout_s"),
        ({"SPARKPAIR_STABILITY": '{"command_timeout_s": 1e999}'}, "command_timeout_s"),
        ({"SPARKPAIR_STABILITY": '{"nodes": [{"name": ""}]}'}, "name"),
        (
            {"SPARKPAIR_STABILITY": '{"nodes": [{"name": "head"}, {"name": "head"}]}'},
            "['head'] named more than once",
        ),
        (
            {"SPARKPAIR_STABILITY": '{"nodes": [{"name": "head", "containers": [""]}]}'},
            "wanted Docker container names",
        ),
        (
            {"SPARKPAIR_STABILITY": '{"nodes": [{"name": "head", "containers": ["a", "a"]}]}'},
            "a container is named twice",
        ),
    ],
)
def test_bad_env_setting_exits_3_at_start(env: dict[str, str], fragment: str) -> None:
    code, out = gateway(env)
    assert code == 3 and fragment in out, out


def test_a_bad_api_key_value_is_never_shown_and_never_parsed() -> None:
    # Once every SPARKPAIR_* value starting with { was parsed as JSON and printed in the error.
    code, out = gateway({"SPARKPAIR_API_KEY": '{"sk-7731', "SPARKPAIR_PORT": "70000"})
    assert code == 3 and "SPARKPAIR_PORT='70000'" in out and "sk-7731" not in out, out


def test_report_path_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GatewaySettingsError, match="is a folder"):
        GatewaySettings.from_env(env={"SPARKPAIR_REPORT_JSON": str(tmp_path)})


def test_binary_key_file_is_an_api_key_error_not_a_traceback(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_bytes(b"\xde\xad\xbe\xef\xff")
    with pytest.raises(ApiKeyError, match="not UTF-8 text"):
        resolve_api_key(None, f, env={})
    code, out = gateway({"SPARKPAIR_API_KEY_FILE": str(f)})
    assert code == 3 and "not UTF-8 text" in out, out


def test_key_file_with_several_lines_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text("sk-one\nsk-two\n")
    with pytest.raises(ApiKeyError, match="holds 2 lines"):
        resolve_api_key(None, f, env={})


def test_good_settings_still_pass() -> None:
    code, out = gateway({})
    assert code == 0, out


def test_port_in_use_exits_3_at_once_instead_of_hanging_without_a_listener() -> None:
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "SPARKPAIR_PORT": str(port), "SPARKPAIR_BASE_URL": "http://127.0.0.1:1",
               "SPARKPAIR_PROFILE": "tiny-demo"}  # fmt: skip
        try:
            res = subprocess.run(
                [sys.executable, "-m", "sparkpair_cli.main", "gateway"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            pytest.fail("the gateway kept running with its port taken and nothing listening")
    assert res.returncode == 3, res.stderr
    assert f"port={port}" in res.stderr and "cannot listen there" in res.stderr, res.stderr


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        (
            {"SPARKPAIR_CANARY_INTERVAL_S": "inf"},
            "SPARKPAIR_CANARY_INTERVAL_S='inf': Input should be a finite",
        ),
        ({"SPARKPAIR_READY_TIMEOUT_S": "inf"}, "SPARKPAIR_READY_TIMEOUT_S='inf'"),
    ],
)
def test_infinite_gateway_timeouts_are_refused(env: dict[str, str], fragment: str) -> None:
    code, out = gateway(env)
    assert code == 3 and fragment in out, out


def test_without_a_profile_the_gateway_stops_naming_the_option_the_variable_and_the_profiles() -> None:
    """No default: the pair's gateway would otherwise judge DeepSeek-V4 with the tiny model's checks."""
    code, out = gateway({"SPARKPAIR_PROFILE": None})
    assert code == 3 and "Traceback" not in out, out
    assert "no profile: --profile and SPARKPAIR_PROFILE are unset" in out and "deepseek-v4-flash" in out, out
    code, out = gateway({"SPARKPAIR_PROFILE": None}, "--profile", "deepseek-v4-flash")
    assert code == 0 and '"profile": "deepseek-v4-flash"' in out, out
    code, out = gateway({"SPARKPAIR_PROFILE": "deepseek-v4-flash"})
    assert code == 0 and '"profile": "deepseek-v4-flash"' in out, out


def test_a_misspelt_setting_in_the_gateways_environment_is_named_with_the_one_meant() -> None:
    """compose.override.yaml's environment is read by nothing when a name is misspelt: the
    gateway says so at start (a warning; the settings it does read still load), and is silent
    on the names it, the node or compose read."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.upper().startswith("SPARKPAIR_")}
    code, out = gateway({**clean, "SPARKPAIR_RECOVERY_MAX_RESTART": "3"})
    assert code == 0, out
    assert (
        "warning: SPARKPAIR_RECOVERY_MAX_RESTART in the gateway's environment is not a sparkpair "
        "setting (nothing reads it); did you mean SPARKPAIR_RECOVERY_MAX_RESTARTS?"
    ) in out
    code, out = gateway(
        {
            **clean,
            "SPARKPAIR_RECOVERY_MAX_RESTARTS": "3",
            "SPARKPAIR_HEAD_ADDR": "10.0.0.1",
            "SPARKPAIR_NODE_ROLE": "head",
            "sparkpair_canary_interval_s": "30",  # read: pydantic-settings ignores the case
        }
    )
    assert code == 0 and "warning" not in out, out
