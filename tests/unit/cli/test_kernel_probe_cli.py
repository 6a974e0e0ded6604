"""``sparkpair probe`` on a CPU machine: refuses with exit 2 and writes nothing."""

from __future__ import annotations

import pytest


def test_probe_without_gpu_exits_2(tmp_path) -> None:
    typer = pytest.importorskip("typer")
    import torch
    from sparkpair_cli import cmd_probe
    from typer.testing import CliRunner

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    cmd_probe.register(app)
    out = tmp_path / "probe.json"
    res = CliRunner().invoke(app, ["probe", "--out", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert "CUDA" in res.output


def test_probe_refuses_a_profile_it_cannot_read_token_counts_from(tmp_path) -> None:
    """The token counts come from the profile: one that does not load, or gives no capture sizes, is
    refused with exit 2 naming it, before any GPU work (nothing written)."""
    typer = pytest.importorskip("typer")
    from sparkpair_cli import cmd_probe
    from typer.testing import CliRunner

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    cmd_probe.register(app)
    out = tmp_path / "probe.json"
    res = CliRunner().invoke(app, ["probe", "--out", str(out), "--profile", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2 and not out.exists() and "--profile" in res.output, res.output
    # a real profile that lists no capture sizes and sets no maximum (the tiny demo's)
    res = CliRunner().invoke(app, ["probe", "--out", str(out), "--profile", "tiny-demo"])
    assert res.exit_code == 2 and not out.exists(), res.output
    assert "neither cudagraph_capture_sizes" in res.output.replace("\n", " "), res.output
    assert cmd_probe.profile_tokens("deepseek-v4-flash").decode[-1] == 36
