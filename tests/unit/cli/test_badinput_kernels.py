"""Bad input to ``sparkpair kernels build``: exit 2 before any compiling, naming the option, the value
seen and what was wanted (the build itself takes minutes, so a bad path must not wait for it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_cli.main import app
from typer.testing import CliRunner


def build(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["kernels", "build", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, " ".join(res.output.replace("│", " ").split())


@pytest.mark.parametrize(
    ("arch", "fragment"),
    [
        ("sm_75", "--arch 'sm_75': unknown arch 'sm_75'; choose from sm_121a, sm_120a, sm_90a"),
        (",,", "--arch ',,': unknown arch ',,'"),
        ("sm_90a,bogus", "unknown arch 'bogus'"),
    ],
)
def test_unknown_arch_exits_2(arch: str, fragment: str) -> None:
    code, out = build("--arch", arch)
    assert code == 2 and fragment in out, out


def test_cache_dir_that_is_a_file_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, out = build("--arch", "sm_90a", "--cache-dir", str(f))
    assert code == 2 and f"--cache-dir '{f}' exists and is not a directory" in out, out


def test_cache_dir_that_cannot_be_created_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("x")
    code, out = build("--arch", "sm_90a", "--cache-dir", str(f / "sub"))
    assert code == 2 and "cannot be created" in out and "afile/sub" in out, out


@pytest.mark.parametrize("value", ["", "."])
def test_cache_dir_that_is_the_current_directory_exits_2(value: str) -> None:
    code, out = build("--arch", "sm_90a", "--cache-dir", value)
    assert code == 2 and "give a directory for the Triton cache" in out, out


def test_repeated_arch_is_built_once() -> None:
    from sparkpair_cli.cmd_kernels import _parse_archs

    assert _parse_archs("sm_90a, sm_90a,sm_121a") == ["sm_90a", "sm_121a"]
