"""``sparkpair plan --file``: shows a plan JSON the plugin wrote (the command module alone)."""

from __future__ import annotations

import json

import typer
from sparkpair_cli.cmd_plan import register
from sparkpair_overlay.plan import build_plan
from sparkpair_overlay.serve_matrix import Switches
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


def test_plan_shows_the_o_proj_config_per_token_range_and_where_it_came_from(tmp_path):
    from sparkpair_overlay.kernel_path_row import KernelPathRow
    from sparkpair_overlay.kernels.fp8_einsum_plan import UNBOUNDED
    from sparkpair_overlay.probe_results import ProbeResults

    layout = "w3-ue8m0-row/a-ue8m0-tma"
    rows = tuple(KernelPathRow("fp8_einsum", "tile", c, t, 1, UNBOUNDED, layout, True, us)
                 for c, t, us in (("dec_t16_d64_k4_w4", 1, 10.0), ("t64_d64_r2_s4", 1, 14.0),
                                  ("dec_t16_d64_k4_w4", 36, 30.0), ("t64_d64_r2_s4", 36, 15.0)))
    probe = ProbeResults(capability=(12, 1), kernel_paths=rows, vllm_version="0.33.0",
                         switches=Switches())
    plan = build_plan(vllm_version="0.33.0", version_verified=True, allow_unverified=False,
                      platform="cuda", capability=(12, 1), probe=probe)
    f = tmp_path / "kernel-plan.json"
    f.write_text(plan.dumps())
    res = CliRunner().invoke(_app(), ["plan", "--file", str(f)], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    for want in ("probe on w3-ue8m0-row/a-ue8m0-tma", "T 1 ", "dec_t16_d64_k4_w4", "T >= 2", "t64_d64_r2_s4",
                 "T=36: fastest of 2 correct"):
        assert want in res.output, (want, res.output)
    # without a probe: the built-in table, saying it is not a GB10 measurement
    bare = build_plan(vllm_version="0.33.0", version_verified=True, allow_unverified=False,
                      platform="cuda", capability=(12, 1))
    f.write_text(bare.dumps())
    res = CliRunner().invoke(_app(), ["plan", "--file", str(f)], env={"COLUMNS": "300"})
    assert res.exit_code == 0 and "default on w3-ue8m0-row/a-ue8m0-tma" in res.output, res.output
    assert "not measured on GB10" in res.output and "T 257-1023" in res.output
