"""How the overlay finds the nvcc vLLM 0.34's DeepGEMM needs (``deepgemm.deepgemm_nvcc``,
``nvcc_problem``, ``deepgemm_unsupported``), on folders laid out as CUDA toolkits.

The toolkits' ``bin/nvcc`` are scripts that answer ``--version`` as nvcc does: the lookup is what is
tested here. That the answers equal vLLM 0.34.0's own ``is_deep_gemm_supported()`` with a real nvcc
(13.0), an old one and none is proven in the stack tier (``tests/stack/test_stack_serve_matrix.py``,
the ``nvcc-*`` cases).
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkpair_overlay.deepgemm import deepgemm_nvcc, deepgemm_unsupported, nvcc_problem, nvcc_release


def toolkit(root: Path, release: str | None) -> Path:
    """``root`` as a CUDA toolkit whose ``bin/nvcc`` says ``release X.Y`` (``None``: says no release)."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    line = f"Cuda compilation tools, release {release}, V{release}.1" if release else "nvcc: something else"
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\necho '{line}'\n")
    nvcc.chmod(0o755)
    return root


def env(**kw: str) -> dict[str, str]:
    return {"PATH": os.defpath, **kw}


def test_cuda_home_wins_and_an_empty_one_means_no_nvcc(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda-13", "13.0")
    assert deepgemm_nvcc(env(CUDA_HOME=str(home))) == str(home / "bin" / "nvcc")
    (tmp_path / "empty").mkdir()
    assert deepgemm_nvcc(env(CUDA_HOME=str(tmp_path / "empty"))) is None
    assert deepgemm_nvcc(env(CUDA_HOME=str(tmp_path / "absent"))) is None
    assert deepgemm_nvcc(env(CUDA_PATH=str(home))) == str(home / "bin" / "nvcc")


def test_without_cuda_home_the_toolkit_is_the_one_above_the_nvcc_on_path(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda-12.9", "12.9")
    assert deepgemm_nvcc({"PATH": f"{home / 'bin'}{os.pathsep}{os.defpath}"}) == str(home / "bin" / "nvcc")


def test_dg_jit_nvcc_compiler_names_the_compiler_inside_an_existing_toolkit(tmp_path: Path) -> None:
    home = toolkit(tmp_path / "cuda", "12.9")
    other = toolkit(tmp_path / "other", "13.0") / "bin" / "nvcc"
    assert deepgemm_nvcc(env(CUDA_HOME=str(home), DG_JIT_NVCC_COMPILER=str(other))) == str(other)
    assert deepgemm_nvcc(env(CUDA_HOME=str(home), DJ_JIT_NVCC_COMPILER=str(other))) == str(other)


def test_the_release_decides_and_an_unreadable_one_does_not_turn_deepgemm_off(tmp_path: Path) -> None:
    assert nvcc_release(str(toolkit(tmp_path / "a", "12.8") / "bin" / "nvcc")) == (12, 8)
    old = nvcc_problem((12, 9), env(CUDA_HOME=str(tmp_path / "a")))
    assert old is not None and old.startswith("nvcc 12.8 at ") and "older than the 12.9" in old
    assert nvcc_problem((12, 9), env(CUDA_HOME=str(toolkit(tmp_path / "b", "12.9")))) is None
    assert nvcc_problem((12, 9), env(CUDA_HOME=str(toolkit(tmp_path / "c", "13.0")))) is None
    assert nvcc_problem((12, 9), env(CUDA_HOME=str(toolkit(tmp_path / "d", None)))) is None
    (tmp_path / "e").mkdir()
    none = nvcc_problem((12, 9), env(CUDA_HOME=str(tmp_path / "e")))
    assert (
        none is not None and none.startswith("no nvcc for DeepGEMM's JIT") and "wanted nvcc >= 12.9" in none
    )


def test_only_a_release_whose_record_says_so_looks_for_nvcc(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    no_nvcc = env(CUDA_HOME=str(tmp_path / "e"))
    assert deepgemm_unsupported("0.33.0", no_nvcc) is None
    assert deepgemm_unsupported("0.32.0", no_nvcc) is None
    why = deepgemm_unsupported("0.34.0", no_nvcc)
    assert why is not None and why.endswith(": vLLM 0.34.0 then reports DeepGEMM unsupported")
    later = deepgemm_unsupported("0.35.0", no_nvcc)  # an unverified release patched anyway: the newest facts
    assert later is not None and "vLLM 0.35.0 (as 0.34.0)" in later
    assert deepgemm_unsupported("0.34.0", env(CUDA_HOME=str(toolkit(tmp_path / "ok", "13.0")))) is None
