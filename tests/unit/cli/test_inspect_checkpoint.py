"""``sparkpair inspect``: completeness and gate dtype from safetensors headers (no torch)."""

from __future__ import annotations

import shutil
from pathlib import Path

import typer
from sparkpair_cli import cmd_inspect
from sparkpair_cli.preflight.checkpoint import inspect_checkpoint, resolve_model_dir
from typer.testing import CliRunner

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
GOOD = HOSTS / "spark-head-good" / "models"
BAD = HOSTS / "spark-head-bad-memory" / "models"
ID = "deepseek-ai/DeepSeek-V4-Flash-0731"
REV = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
"""The commit the DeepSeek-V4 profile pins (--revision)."""


def _cli(*args: str):  # type: ignore[no-untyped-def]
    app = typer.Typer()
    cmd_inspect.register(app)
    app.command("_")(lambda: None)
    return CliRunner().invoke(app, list(args))


def test_a_complete_checkpoint_with_bf16_gates_passes() -> None:
    d = resolve_model_dir(ID, GOOD)
    assert d is not None and d.name == REV
    rep = inspect_checkpoint(d, gate_dtype="BF16")
    assert rep.problems == [] and rep.gate_dtypes == {"BF16": 2} and len(rep.shards) == 2 and rep.tensors == 9


def test_missing_and_truncated_shards_and_the_wrong_gate_dtype_are_each_named() -> None:
    rep = inspect_checkpoint(resolve_model_dir(ID, BAD), gate_dtype="BF16")  # type: ignore[arg-type]
    text = "\n".join(rep.problems)
    assert "model-00002-of-00002.safetensors: missing (5 tensors)" in text
    assert "model-00001-of-00002.safetensors: 3357 bytes; wanted 3457" in text
    assert "gate weights: dtypes {'F32': 1}; wanted all BF16" in text


def test_the_cli_exits_nonzero_on_a_problem_and_zero_on_a_good_checkpoint() -> None:
    r = _cli("inspect", ID, "--hf-home", str(GOOD), "--gate-dtype", "BF16")
    assert r.exit_code == 0 and "gate dtypes {'BF16': 2}" in r.output
    r = _cli("inspect", ID, "--hf-home", str(BAD), "--gate-dtype", "BF16")
    assert r.exit_code == 1 and "problem: model-00002-of-00002.safetensors: missing" in r.output
    r = _cli("inspect", "nobody/nothing", "--hf-home", str(GOOD))
    assert r.exit_code == 1 and "wanted a downloaded checkpoint" in r.output


def test_a_tensor_the_index_names_but_the_shard_lacks_is_found(tmp_path: Path) -> None:
    src = resolve_model_dir(ID, GOOD)
    assert src is not None
    d = tmp_path / "ckpt"
    shutil.copytree(src, d)
    idx = d / "model.safetensors.index.json"
    idx.write_text(idx.read_text().replace('"head.weight"', '"lm_head.weight"'))
    rep = inspect_checkpoint(d)
    assert any("lm_head.weight named by the index is not in the shard" in p for p in rep.problems)


def test_the_generated_tiny_model_is_a_complete_single_file_checkpoint(tiny_model: Path) -> None:
    rep = inspect_checkpoint(tiny_model)
    assert rep.problems == [] and rep.tensors > 0
