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
