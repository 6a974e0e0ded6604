"""Bad ``sparkpair demo`` options are refused before anything starts (exit 2, the option named),
not a traceback from mkdir and not a vLLM server started with a negative timeout."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_cli import cmd_demo, tinymodel
from sparkpair_cli.main import app
from typer.testing import CliRunner


@pytest.fixture(autouse=True)
def _no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*a: object, **k: object) -> None:
        raise AssertionError("the demo started a server on bad input")

    monkeypatch.setattr(cmd_demo.VllmServer, "from_profile", refuse)
    monkeypatch.setattr(tinymodel, "generate_tiny_model", refuse)


def demo(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["demo", *args], env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output.replace("\n", " ").replace("  ", " ")


def test_workdir_that_is_a_file_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, out = demo("--workdir", str(f))
    assert code == 2 and "--workdir" in out and "is a file; wanted a folder" in out, out


def test_workdir_whose_runs_folder_is_a_file_exits_2(tmp_path: Path) -> None:
    (tmp_path / "runs").write_text("x")
    code, out = demo("--workdir", str(tmp_path))
    assert code == 2 and "runs' is a file" in out, out


def test_sparkpair_home_that_is_a_file_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, out = demo(env={"SPARKPAIR_HOME": str(f)})
    assert code == 2 and "SPARKPAIR_HOME" in out and "is a file" in out, out


@pytest.mark.parametrize("value", ["-5", "0", "nan"])
def test_non_positive_ready_timeout_exits_2_before_starting(tmp_path: Path, value: str) -> None:
    code, out = demo("--ready-timeout", value, "--workdir", str(tmp_path))
    assert code == 2 and "--ready-timeout=" in out and "wanted a positive number" in out, out


def test_profile_naming_an_unknown_generated_model_is_refused(tmp_path: Path) -> None:
    # Only 'generated:tiny' exists; 'generated:huge' used to build the tiny model silently.
    src = Path(__file__).resolve().parents[3] / "configs" / "profiles" / "tiny-demo.yaml"
    prof = tmp_path / "huge.yaml"
    prof.write_text(src.read_text().replace('"generated:tiny"', '"generated:huge"'))
    assert "generated:huge" in prof.read_text()
    code, out = demo("--profile", str(prof), "--workdir", str(tmp_path / "wd"))
    assert code == 2 and "'generated:huge'" in out and "generated:tiny" in out, out
