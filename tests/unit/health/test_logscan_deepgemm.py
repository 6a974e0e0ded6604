# ruff: noqa: E501  (log lines are quoted whole)
"""The DeepGEMM log signatures: each matches its failure and not its near miss.

The matching lines are in tests/unit/health/test_logscan_catalogue.py ``SAMPLES`` (each matches only
its own pattern); here each pattern also meets a line that looks like it and must not match.
tests/stack/test_deepgemm_logscan_texts.py shows every text exists in the installed packages.
"""

from __future__ import annotations

import pytest
from sparkpair_health.logscan import CATALOGUE, scan_lines

DEEPGEMM_IDS = [p.id for p in CATALOGUE if p.id.startswith("deepgemm_")]

MATCHES = {
    "deepgemm_sf_transform": "RuntimeError: Assertion error (csrc/apis/layout.hpp:118): Unknown SF transformation",
    "deepgemm_arch": "Assertion error (csrc/apis/../jit_kernels/impls/sm120_fp8_fp4_gemm_1d1d.hpp:40): Unsupported architecture",
    "deepgemm_host_assert": "RuntimeError: Assertion error (csrc/apis/../jit_kernels/impls/smxx_layout.hpp:77): sf.dim() == 2",
    "deepgemm_device_assert": "Assertion failed: /tmp/dg/kernel.cuh:88, condition: k_idx < num_k_blocks",
    "deepgemm_scale_dtype": "Expected tensor scales dtype to be torch.float32 or torch.float8_e8m0fnu or torch.uint8, got torch.float16 instead",
    "deepgemm_unavailable": "RuntimeError: Sparse Attention Indexer CUDA op requires DeepGEMM support in the current vLLM environment.",
    "deepgemm_import_failed": "WARNING [deep_gemm.py:215] Failed to import vendored deep_gemm: OSError",
}

NEAR_MISSES = {
    # the oracle's own words about DeepGEMM choosing a layout are not a failure
    "deepgemm_sf_transform": "INFO [deep_gemm.py:100] DeepGEMM E8M0 enabled on current platform; SF transformation to UE8M0",
    # vLLM's platform docstring says which archs DeepGEMM supports
    "deepgemm_arch": "DEBUG DeepGEMM E8M0 disabled: DeepGEMM not supported on this system (architecture sm_80).",
    # Python's own assert and other libraries' error formats are not DeepGEMM's
    "deepgemm_host_assert": "AssertionError: Assertion error in tokenizer (vocab.json:12)",
    "deepgemm_device_assert": "Assertion failed: x > 0, file foo.c, line 12",
    "deepgemm_scale_dtype": "Expected tensor scales dtype to be torch.float32",
    "deepgemm_unavailable": "INFO DeepGEMM backend is available: vllm.third_party.deep_gemm 2.8.1",
    "deepgemm_import_failed": "DEBUG Imported deep_gemm module from vllm.third_party.deep_gemm",
}


def test_every_deepgemm_pattern_has_a_match_and_a_near_miss() -> None:
    assert set(DEEPGEMM_IDS) == set(MATCHES) == set(NEAR_MISSES)


@pytest.mark.parametrize("pid", sorted(MATCHES))
def test_the_pattern_matches_its_failure_line(pid: str) -> None:
    assert scan_lines([MATCHES[pid]]).ids() == [pid]


@pytest.mark.parametrize("pid", sorted(NEAR_MISSES))
def test_the_pattern_ignores_its_near_miss(pid: str) -> None:
    assert pid not in scan_lines([NEAR_MISSES[pid]]).ids()


def test_a_sf_transform_failure_is_named_once_not_also_as_a_generic_assert() -> None:
    ids = scan_lines([MATCHES["deepgemm_sf_transform"], MATCHES["deepgemm_arch"]]).ids()
    assert sorted(ids) == ["deepgemm_arch", "deepgemm_sf_transform"]


def test_deepgemm_failures_are_fatal_and_the_import_warning_alone_is_not() -> None:
    assert scan_lines([MATCHES["deepgemm_sf_transform"]]).fatal
    assert not scan_lines([MATCHES["deepgemm_import_failed"]]).fatal
