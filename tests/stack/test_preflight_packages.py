"""Preflight's package checks against the packages the image ships, installed for real in the
stack venv: FlashInfer 0.7.2.post1's SM120 DSv4 decode table and the image's Triton's (3.8) bundled
ptxas.

Each check runs live (``Host("/")``: its child Python is this venv's, as the node's is the
image's). The FlashInfer check must answer as vLLM 0.33 itself answers
(``vllm.utils.flashinfer.has_flashinfer_sparse_mla_sm120_config``), and fail on a table that
lacks the pair; the ptxas check must pass on the ptxas Triton really uses for sm_121a. Its failure
on a ptxas that rejects sm_121a (B01: Triton 3.6's bundled CUDA 12.8 one; Triton 3.8 bundles none
such, and falls back to its own binary when the setting names a missing one) is shown on that
binary's recorded output (tests/unit/cli/test_preflight_trees.py). (The DeepGEMM presence check
has its own test file.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

flashinfer = pytest.importorskip("flashinfer")
triton = pytest.importorskip("triton")

from sparkpair_cli.deploy.nodeenv import load_node_env_file  # noqa: E402
from sparkpair_cli.preflight import checks as pf  # noqa: E402
from sparkpair_cli.preflight import toolchain  # noqa: E402
from sparkpair_cli.preflight.result import Result  # noqa: E402
from sparkpair_serving.profile import load_profile  # noqa: E402

HOSTS = Path(__file__).resolve().parents[1] / "fixtures" / "hosts"
BUNDLED = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def _run(check: str, profile: str = "deepseek-v4-flash") -> Result:
    env = load_node_env_file(HOSTS / "spark-head-good" / "node.env")
    rep = pf.run_local(env, load_profile(profile), Path("/"), only=[check])
    assert rep.results, f"check group {check} gave no result"
    return rep.results[-1]


def test_the_stack_has_the_flashinfer_the_release_pins_or_its_named_substitute() -> None:
    """vLLM 0.33.0: the 0.7.2.post1 it pins (the image's); 0.34.0: 0.7.4 for the 0.7.3 it pins, which the
    registry lacks, named in the release's record."""
    from importlib.metadata import requires, version

    from packaging.requirements import Requirement
    from sparkpair_overlay.versions import release

    have = version("flashinfer-python")
    asked = next(Requirement(r) for r in requires("vllm") or [] if Requirement(r).name == "flashinfer-python")
    rec = release(str(stacklib.installed_vllm()))
    assert rec is not None
    named = {(s.package, s.asked, s.used) for s in rec.substitutes}
    assert asked.specifier.contains(have) or ("flashinfer-python", str(asked.specifier), have) in named, (
        have, str(asked.specifier), rec.substitutes)


def test_flashinfer_0_7_2_envelope_iterates_without_the_pair_vllm_asks() -> None:
    """The fact behind the defect: iterating the table does not list (32, 128); ``in`` has it."""
    from flashinfer.mla._sparse_mla_sm120 import _DECODE_DSV4_DISPATCH as table

    assert (32, 128) not in [tuple(p) for p in table]
    assert (32, 128) in table


def test_the_pair_asked_is_the_pair_vllm_asks_at_tp2() -> None:
    """vLLM's own padding of the local query heads (0.33 ``_pad_to_supported_q_heads``, 0.34
    ``pad_to_supported_q_heads``)."""
    from vllm.models.deepseek_v4.nvidia import flashinfer_sparse as fs

    heads_per_rank = toolchain.DSV4_DECODE_HEADS // 2
    pad = getattr(fs, stacklib.upstream_name("_pad_to_supported_q_heads"))
    assert toolchain.dsv4_decode_pair(2) == (
        pad(heads_per_rank),
        toolchain.DSV4_DECODE_TOPK,
    )
    assert toolchain.dsv4_decode_pair(2) == (32, 128)
    assert toolchain.DSV4_Q_HEAD_SPECIALISATIONS == tuple(fs._SPARSE_MLA_SUPPORTED_Q_HEADS)


def test_flashinfer_check_passes_on_the_real_flashinfer_as_vllm_0_33_does() -> None:
    from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120_config

    assert has_flashinfer_sparse_mla_sm120_config(32, 128) is True
    res = _run("flashinfer")
    assert res.id == "flashinfer-dsv4"
    assert res.status == "pass", res.message
    assert "(32, 128)" in res.seen, res.message


def test_flashinfer_check_passes_for_a_profile_that_is_not_dsv4() -> None:
    res = _run("flashinfer", "tiny-pair")
    assert res.status == "pass" and res.seen == "n/a", res.message


SITECUSTOMIZE = """
import flashinfer.mla._sparse_mla_sm120 as m
m._DECODE_DSV4_DISPATCH = frozenset({(64, 128), (64, 512), (64, 1024)})
"""
"""Fault: a FlashInfer whose DSv4 table has only the TP=1 entries (a plain set, as older builds
shipped a table of pairs). The real 0.7.2.post1 cannot be made to lack the pair otherwise."""


def test_flashinfer_check_fails_on_a_table_without_the_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    res = _run("flashinfer")
    assert res.status == "fail", res.message
    assert "(32, 128), (32, 192) in table: False" in res.seen and "TP=2" in res.wanted, res.message
    assert res.message.startswith("node spark-a: FlashInfer DSv4 decode table="), res.message


def test_flashinfer_check_fails_when_flashinfer_does_not_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['flashinfer'] = None\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    res = _run("flashinfer")
    assert res.status == "fail" and "flashinfer" in res.seen, res.message


def test_flashinfer_check_fails_without_the_sparse_mla_decode_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        "import flashinfer.decode as d\ndel d.trtllm_batch_decode_sparse_mla_dsv4\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    res = _run("flashinfer")
    assert res.status == "fail" and "trtllm_batch_decode_sparse_mla_dsv4" in res.seen, res.message


def _ptxas_release(exe: str) -> tuple[int, int]:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_the_ptxas_triton_uses_for_sm_121a_is_cuda_12_9_and_the_check_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TRITON_PTXAS_BLACKWELL_PATH", raising=False)
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    exe, setting = toolchain.ptxas_path("sm_121a")
    assert exe == str(BUNDLED / "ptxas-blackwell") and setting == "TRITON_PTXAS_BLACKWELL_PATH"
    assert _ptxas_release(exe) >= (12, 9)
    res = _run("ptxas")
    assert res.status == "pass" and res.seen == exe, res.message


def test_the_recorded_trees_answer_in_the_format_the_live_check_prints() -> None:
    """tests/fixtures/hosts recordings are this venv's real FlashInfer answer."""
    live = subprocess.run(
        [sys.executable, "-c", toolchain.FLASHINFER_DSV4_CMD, json.dumps([[32, 128], [32, 192]])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert live.returncode == 0, live.stderr[-2000:]
    rec = json.loads((HOSTS / "spark-head-good" / "_cmd" / "flashinfer-dsv4-table.json").read_text())
    assert json.loads(live.stdout.strip().splitlines()[-1]) == json.loads(rec["stdout"])
