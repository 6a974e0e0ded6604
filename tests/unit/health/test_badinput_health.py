"""Bad input to ``sparkpair health`` and the profile loader: a clear error naming the setting,
the value seen and the value wanted; exit 3; never a traceback, never a report lost at the end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from sparkpair_health.report import Report, ReportWriteError
from sparkpair_health.suite import SuiteSettings, _load_plan
from sparkpair_serving.profile import ProfileError, load_profile
from typer.testing import CliRunner

CLOSED = "http://127.0.0.1:1"


PROFILE_ENV = {"SPARKPAIR_PROFILE": "tiny-demo"}
"""The profile a node's env sets (health has no default profile)."""


def health(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["health", "--ready-timeout", "0.5", *args], env=PROFILE_ENV)
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.output


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\xff\xfe\x00binary", "not UTF-8 text"),
        (b"", "an empty file"),
        (b"- a\n- b\n", "top level is a list"),
    ],
)
def test_profile_that_is_not_a_yaml_mapping_is_a_profile_error(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    f = tmp_path / "p.yaml"
    f.write_bytes(content)
    with pytest.raises(ProfileError, match=fragment):
        load_profile(f)
    code, out = health("--base-url", CLOSED, "--profile", str(f))
    assert code == 3 and fragment in out.replace("\n", " ").replace("  ", " "), out


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://[::1", "does not parse"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://:80", "no host"),
        ("http://127.0.0.1:0", "port 0"),
        ("ftp://127.0.0.1:1", "wanted http://host:port"),
        ("http://user:hunter2@127.0.0.1:1", "holds user:password"),
    ],
)
def test_malformed_base_url_is_refused_before_any_request(url: str, fragment: str) -> None:
    code, out = health("--base-url", url)
    assert code == 3, out
    assert fragment in out and "--base-url" in out, out
    assert "hunter2" not in out, out


@pytest.mark.parametrize("option", ["--report-json", "--junit"])
def test_report_path_that_is_a_folder_is_refused_before_the_run(tmp_path: Path, option: str) -> None:
    code, out = health("--base-url", CLOSED, option, str(tmp_path))
    assert code == 3, out
    assert "is a folder" in out and option in out, out


def test_report_path_under_a_file_is_refused_before_the_run(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, out = health("--base-url", CLOSED, "--report-json", str(f / "r.json"))
    assert code == 3 and "is a file, not a folder" in out, out


def test_report_folders_that_do_not_exist_yet_are_created(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "r.json"
    code, out = health("--base-url", CLOSED, "--report-json", str(target))
    assert code == 2, out  # not ready: the closed port
    assert target.is_file()


def test_timeout_option_errors_name_the_option() -> None:
    code, out = health("--base-url", CLOSED, "--request-timeout", "0")
    assert code == 3 and "--request-timeout=0.0" in out, out


def test_report_write_failure_is_a_clear_error_naming_the_path(tmp_path: Path) -> None:
    with pytest.raises(ReportWriteError, match=f"cannot write the JSON report to {tmp_path}"):
        Report(base_url=CLOSED, served_model_name="m", profile="p").write(tmp_path)


def test_binary_plan_file_is_a_failed_check_not_a_crash(tmp_path: Path) -> None:
    f = tmp_path / "plan.json"
    f.write_bytes(b"\xff\xfe\x00")
    report = Report(base_url=CLOSED, served_model_name="m", profile="p")
    res = _load_plan(SuiteSettings(base_url=CLOSED, plan_file=f), report)
    assert res.status == "fail" and "not readable JSON" in res.message


def test_plan_file_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    code, out = health("--base-url", CLOSED, "--plan-file", str(tmp_path))
    assert code == 3 and "is a folder" in out, out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--request-timeout", "inf"], "--request-timeout=inf: Input should be a finite number"),
        (["--ready-timeout", "inf"], "--ready-timeout=inf: Input should be a finite number"),
        (["--served-model-name", ""], "--served-model-name='': String should have at least 1 character"),
    ],
)
def test_infinite_timeout_and_empty_model_name_are_refused(args: list[str], fragment: str) -> None:
    # An infinite timeout waits forever (DESIGN: nothing is retried forever); '' was
    # silently replaced by the profile's name.
    res = CliRunner().invoke(app, ["health", "--base-url", CLOSED, *args], env=PROFILE_ENV)
    assert res.exit_code == 3 and fragment in res.output.replace("\n", " ").replace("  ", " "), res.output


def test_without_a_profile_health_stops_naming_the_option_the_variable_and_the_profiles() -> None:
    """No default: pointed at the DeepSeek pair, health would otherwise run the tiny model's checks."""
    quick = ["--ready-timeout", "0.5"]  # a CLI that took a default profile fails fast, not in 600 s
    res = CliRunner().invoke(app, ["health", "--base-url", CLOSED, *quick], env={"SPARKPAIR_PROFILE": None})
    out = " ".join(res.output.split())
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 3 and "Traceback" not in out, out
    assert "no profile: --profile and SPARKPAIR_PROFILE are unset" in out, out
    assert "deepseek-v4-flash" in out and "tiny-demo" in out, out
    unset: dict[str, str | None] = {"SPARKPAIR_PROFILE": None}
    blank = CliRunner().invoke(app, ["health", "--base-url", CLOSED, "--profile", " ", *quick], env=unset)
    assert blank.exit_code == 3 and "no profile" in blank.output


def test_the_profile_comes_from_sparkpair_profile_and_the_option_wins(tmp_path: Path) -> None:
    missing = str(tmp_path / "from-env.yaml")
    args = ["health", "--base-url", CLOSED, "--ready-timeout", "0.5"]
    res = CliRunner().invoke(app, args, env={"SPARKPAIR_PROFILE": missing})
    assert res.exit_code == 3 and "from-env.yaml" in " ".join(res.output.split()), res.output
    opt = str(tmp_path / "from-option.yaml")
    env = {"SPARKPAIR_PROFILE": missing}
    res = CliRunner().invoke(app, ["health", "--base-url", CLOSED, "--profile", opt], env=env)
    out = " ".join(res.output.split())
    assert res.exit_code == 3 and "from-option.yaml" in out and "from-env.yaml" not in out, out


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_profile_that_is_not_a_regular_file_says_so(tmp_path: Path, kind: str) -> None:
    """`/dev/zero` and a FIFO were reported as "no file"; a FIFO must not be waited on."""
    if kind == "fifo":
        target = tmp_path / "p.yaml"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    with pytest.raises(ProfileError, match="not a regular file"):
        load_profile(target)
    res = CliRunner().invoke(app, ["health", "--base-url", CLOSED], env={"SPARKPAIR_PROFILE": str(target)})
    out = " ".join(res.output.split())
    assert res.exit_code == 3 and "not a regular file" in out and str(target) in out, out


def test_a_profile_under_a_home_that_does_not_exist_is_a_profile_error() -> None:
    """`~nouser/x.yaml` raised RuntimeError (a traceback) from Path.expanduser."""
    value = "~sparkpair-no-such-user/x.yaml"
    with pytest.raises(ProfileError, match="cannot expand the leading ~"):
        load_profile(value)
    res = CliRunner().invoke(app, ["health", "--base-url", CLOSED, "--profile", value])
    out = " ".join(res.output.split())
    assert res.exit_code == 3 and value in out, out
