"""``sparkpair plan --file``: shows a plan JSON the plugin wrote (the command module alone)."""

from __future__ import annotations

import json

import typer
from sparkpair_cli.cmd_plan import register
from sparkpair_overlay.plan import build_plan
from typer.testing import CliRunner


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command()
    def other() -> None:  # a second command keeps typer in multi-command mode, as in main.py
        """Placeholder."""

    return app


def test_plan_file_is_shown_as_a_table_and_as_json(tmp_path):
    plan = build_plan(vllm_version="0.32.0", version_verified=True, allow_unverified=False,
                      platform="cuda", capability=(12, 1))
    f = tmp_path / "kernel-plan.json"
    f.write_text(plan.dumps())
    runner = CliRunner()
    res = runner.invoke(_app(), ["plan", "--file", str(f)])
    assert res.exit_code == 0, res.output
    for want in ("triton-bf16-lowM (M<=32)", "triton(1,1,128)", "cap 12.1"):
        assert want in res.output
    res = runner.invoke(_app(), ["plan", "--file", str(f), "--json"])
    assert res.exit_code == 0 and json.loads(res.output) == json.loads(plan.dumps())


def test_unreadable_plan_file_exits_2(tmp_path):
    res = CliRunner().invoke(_app(), ["plan", "--file", str(tmp_path / "missing.json")])
    assert res.exit_code == 2 and "not readable JSON" in res.output
