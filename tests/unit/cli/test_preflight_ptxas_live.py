"""The ptxas check on this machine's real Triton: it probes the binary Triton really uses for
sm_121a (Triton 3.6: the bundled ``ptxas-blackwell``), and fails naming B01 when that binary
is one that does not know sm_121a (Triton's CUDA 12.8 ``ptxas``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import load_node_env_file
from sparkpair_cli.preflight import toolchain
from sparkpair_cli.preflight.host import Host
from sparkpair_cli.preflight.result import Ctx, Result
from sparkpair_health.profile import load_profile

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


@pytest.mark.skipif(not (BUNDLED / "ptxas").exists(), reason="this Triton bundles no ptxas")
def test_a_ptxas_without_sm_121a_fails_naming_b01(monkeypatch: pytest.MonkeyPatch) -> None:
    # Triton's CUDA 12.8 ptxas: "Value 'sm_121a' is not defined for option 'gpu-name'".
    monkeypatch.setenv("TRITON_PTXAS_BLACKWELL_PATH", str(BUNDLED / "ptxas"))
    res = _check()
    assert res.status == "fail", res
    assert res.setting == "TRITON_PTXAS_BLACKWELL_PATH" and "B01" in res.note, res
