"""Every DeepGEMM log signature in logscan's catalogue is text the installed packages produce.

A reworded upstream message must not turn a fatal finding into a silent pass, so each pattern
is matched against a line built from the installed vLLM 0.33 / vendored DeepGEMM itself: the
strings compiled into DeepGEMM's extension, its header's printf format, vLLM's own exception
and log texts (raised or logged for real where a CPU can).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

from sparkpair_health.logscan import CATALOGUE, scan_lines  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _vllm_root() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


DG = _vllm_root() / "third_party" / "deep_gemm"


@lru_cache(maxsize=1)
def _so_strings() -> list[str]:
    """Printable runs (>= 4 chars) of the vendored DeepGEMM extension, as ``strings`` lists them."""
    (so,) = DG.glob("_C_extension*.so")
    return [m.decode() for m in re.findall(rb"[\x20-\x7e]{4,}", so.read_bytes())]


def _matches(pid: str, line: str) -> bool:
    return pid in scan_lines([line]).ids()


def test_every_deepgemm_pattern_is_covered_here() -> None:
    assert {p.id for p in CATALOGUE if p.id.startswith("deepgemm_")} == set(COVERED)


def _dg_exception_line(message: str) -> str:
    """DeepGEMM's exception text, ``<name> error (<file>:<line>): <message>``, from its parts in the .so."""
    strings = _so_strings()
    assert " error (" in strings and "Assertion" in strings  # DGException's name and separator
    csrc = next(s for s in strings if s.startswith("csrc/apis/") and s.endswith(".hpp"))
    return f"RuntimeError: Assertion error ({csrc}:42): {message}"


def case_sf_transform() -> None:
    assert "Unknown SF transformation" in _so_strings()
    assert _matches("deepgemm_sf_transform", _dg_exception_line("Unknown SF transformation"))


def case_arch() -> None:
    text = "Unsupported architecture or scaling factor types"
    assert text in _so_strings() and "Unsupported architecture" in _so_strings()
    assert _matches("deepgemm_arch", _dg_exception_line(text))
    assert _matches("deepgemm_arch", _dg_exception_line("Unsupported architecture"))


def case_host_assert() -> None:
    strings = _so_strings()
    cond = next(s for s in strings if s.startswith("sf.stride(") or s.startswith("sf.dim()"))
    assert _matches("deepgemm_host_assert", _dg_exception_line(cond))


def case_device_assert() -> None:
    header = (DG / "include" / "deep_gemm" / "common" / "exception.cuh").read_text()
    fmt = re.search(r'printf\("(Assertion failed: %s:%d, condition: %s)\\n"', header)
    assert fmt, "DG_DEVICE_ASSERT's printf format changed"
    line = fmt.group(1).replace("%s", "/root/.cache/vllm/deep_gemm/kernel.cuh", 1).replace("%d", "88")
    assert _matches("deepgemm_device_assert", line.replace("%s", "num_k_blocks > 0"))


def case_scale_dtype() -> None:
    import torch
    from vllm.model_executor.layers.quantization.utils.fp8_utils import (
        deepgemm_post_process_weight_scale_block,
    )

    with pytest.raises(AssertionError) as e:
        deepgemm_post_process_weight_scale_block(
            ws=torch.ones(1, 8, 32, dtype=torch.bfloat16),
            mn=1024,
            k=4096,
            quant_block_shape=(128, 128),
            num_groups=1,
        )
    assert _matches("deepgemm_scale_dtype", f"AssertionError: {e.value}")


def case_unavailable() -> None:
    from vllm.utils import deep_gemm

    with pytest.raises(RuntimeError) as e:
        deep_gemm._missing()
    assert _matches("deepgemm_unavailable", f"RuntimeError: {e.value}")
    src = (_vllm_root() / "model_executor" / "layers" / "sparse_attn_indexer.py").read_text()
    m = re.search(r'"(Sparse Attention Indexer CUDA op requires DeepGEMM support in )"', src)
    assert m and _matches("deepgemm_unavailable", f"RuntimeError: {m.group(1)}the current vLLM environment.")


def case_import_failed() -> None:
    # On a CPU the vendored extension cannot load, so vLLM really logs this warning.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKPAIR_", "VLLM_"))}
    r = subprocess.run(
        [sys.executable, "-c", "from vllm.utils import deep_gemm as d; print(d._import_deep_gemm())"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    from vllm.utils.import_utils import has_deep_gemm

    if has_deep_gemm():
        pytest.skip("DeepGEMM imports here: vLLM logs no import failure")
    lines = (r.stdout + r.stderr).splitlines()
    assert "deepgemm_import_failed" in scan_lines(lines).ids(), lines[-5:]


COVERED = {
    "deepgemm_sf_transform": case_sf_transform,
    "deepgemm_arch": case_arch,
    "deepgemm_host_assert": case_host_assert,
    "deepgemm_device_assert": case_device_assert,
    "deepgemm_scale_dtype": case_scale_dtype,
    "deepgemm_unavailable": case_unavailable,
    "deepgemm_import_failed": case_import_failed,
}


@pytest.mark.parametrize("pid", sorted(COVERED))
def test_the_pattern_matches_text_the_installed_packages_produce(pid: str) -> None:
    COVERED[pid]()
