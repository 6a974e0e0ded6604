"""The ptxas check on this machine's real Triton: it probes the binary Triton really uses for
sm_121a (the bundled ``ptxas-blackwell``, CUDA 13.3 in Triton 3.8), which accepts it.

The check's failure on a ptxas that does not know sm_121a (B01: Triton 3.6's bundled CUDA 12.8
``ptxas``) is shown on that binary's recorded output (tests/unit/cli/test_preflight_trees.py,
``spark-head-bad-kernel``): the image's Triton (3.8) bundles CUDA 12.9 and 13.3 ptxas binaries,
both of which know sm_121a, so no such binary is on this machine to run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import load_node_env_file
from sparkpair_cli.preflight import toolchain
from sparkpair_cli.preflight.host import Host
from sparkpair_cli.preflight.result import Ctx, Result
from sparkpair_serving.profile import load_profile

triton = pytest.importorskip("triton")
HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
BUNDLED = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def _check() -> Result:
    env = load_node_env_file(HOSTS / "spark-head-good" / "node.env")
    ctx = Ctx(env, load_profile("deepseek-v4-flash"), Host(Path("/")))
    toolchain.check_ptxas(ctx, "sm_121a")
    (res,) = [r for r in ctx.report.results if r.id == "ptxas"]
    return res


@pytest.mark.skipif(not (BUNDLED / "ptxas-blackwell").exists(), reason="this Triton has no ptxas-blackwell")
def test_the_ptxas_triton_uses_for_sm_121a_accepts_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_PTXAS_BLACKWELL_PATH", raising=False)
    assert toolchain.ptxas_path("sm_121a") == (
        str(BUNDLED / "ptxas-blackwell"),
        "TRITON_PTXAS_BLACKWELL_PATH",
    )
    res = _check()
    assert res.status == "pass", res
