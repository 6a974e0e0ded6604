"""Bad input to ``sparkpair plan``: a ``--file`` that is not a kernel plan, and a
``SPARKPAIR_PROBE_RESULTS`` the plan cannot use, exit 2 naming the file and what was wanted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from typer.testing import CliRunner


def plan(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["plan", *args], env=env)
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output.replace("\n", " ").replace("  ", " ")


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ([1, 2], "top level is a list"),
        ({"router": 5}, "schema=null"),
        ({}, "schema=null"),
        ({"schema": "sparkpair-kernel-plan/1", "router": 5, "o_proj": {}}, "router=5"),
        ({"schema": "sparkpair-kernel-plan/1", "capability": 5, "router": {}, "o_proj": {}}, "capability=5"),
        (
            {"schema": "sparkpair-kernel-plan/1", "router": {"bfloat16": {"path": 1}}, "o_proj": {}},
            "router.bfloat16",
        ),
    ],
)
def test_plan_file_that_is_not_a_kernel_plan_exits_2(tmp_path: Path, obj: object, fragment: str) -> None:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(obj))
    code, out = plan("--file", str(f))
    assert code == 2 and fragment in out and str(f) in out, out


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "does not exist"),
        (b"\xff\xfe", "unusable"),
        (b"[1, 2]", "top level is a list"),
        (b"{}", "schema=null"),
    ],
)
def test_unusable_probe_file_exits_2_naming_it(tmp_path: Path, content: bytes | None, fragment: str) -> None:
    f = tmp_path / "probe.json"
    if content is not None:
        f.write_bytes(content)
    env = {"SPARKPAIR_PROBE_RESULTS": str(f), "SPARKPAIR_FAKE_CAPABILITY": "12.1"}
    code, out = plan(env=env)
    assert code == 2 and "SPARKPAIR_PROBE_RESULTS" in out and fragment in out, out
