"""Bad input to the router GEMM's Python API: a ValueError naming the setting, the value seen and
the value wanted, before anything reaches Triton."""

from __future__ import annotations

import pytest
import torch
from sparkpair_overlay.kernels import router_gemm as rg
from sparkpair_overlay.kernels._common import make_config

DOT = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 2, "W_MODE": 0}
ROWS = {"BLOCK_M": 1, "BLOCK_N": 2, "BLOCK_K": 64, "W_DTYPE": "bf16"}


def dot(warps: int = 4, stages: int = 1, drop: str = "", **over: object):
    meta = {k: v for k, v in {**DOT, **over}.items() if k != drop}
    return make_config("hand", "_router_dot_kernel", warps, stages, **meta)


@pytest.mark.parametrize(
    ("cfg", "fragment"),
    [
        (dot(SPLIT_K=0), "config hand: SPLIT_K = 0; want an int >= 1"),
        (dot(SPLIT_K=-1), "SPLIT_K = -1; want an int >= 1"),
        (dot(REDUCE_BLOCK=-32), "REDUCE_BLOCK = -32; want 0 or a power of two >= 32"),
        (dot(REDUCE_BLOCK=48), "REDUCE_BLOCK = 48"),
        (dot(W_MODE=3), "W_MODE = 3; want 0 (bf16), 1"),
        (dot(W_MODE="0"), "W_MODE = '0'"),
        (dot(BLOCK_K=100), "BLOCK_K = 100; want a power of two >= 16"),
        (dot(BLOCK_N=8), "BLOCK_N = 8; want a power of two >= 16"),
        (dot(USE_PDL="yes"), "USE_PDL = 'yes'; want True or False"),
        (dot(drop="W_MODE"), "missing keys ['W_MODE']"),
        (dot(drop="SPLIT_K"), "missing keys ['SPLIT_K']"),
        (dot(FOO=1), "unknown keys ['FOO']"),
        (dot(FIXUP=True), "unknown keys ['FIXUP']"),
        (dot(warps=3), "num_warps = 3; want 1, 2, 4, 8, 16 or 32"),
        (dot(stages=0), "num_stages = 0; want an int >= 1"),
        (make_config("r", "_router_rows_kernel", 4, 1, **{**ROWS, "W_DTYPE": "fp16"}), "W_DTYPE = 'fp16'"),
        (make_config("r", "_router_rows_kernel", 4, 1, **{**ROWS, "BLOCK_K": 0}), "BLOCK_K = 0"),
        (make_config("r", "_router_rows_kernel", 4, 1, BLOCK_M=1, BLOCK_N=2, BLOCK_K=64), "missing keys"),
    ],
)
def test_hand_built_configs_are_refused_before_triton(cfg, fragment: str) -> None:
    x = torch.zeros(3, 64, dtype=torch.bfloat16)
    w = torch.zeros(16, 64, dtype=torch.float32 if "fp16" in fragment else torch.bfloat16)
    with pytest.raises(ValueError, match="router_gemm: config") as err:
        rg.router_gemm_with_config(x, w, cfg)
    assert fragment in str(err.value), str(err.value)


def test_every_registered_config_passes_the_same_check() -> None:
    for cfg in rg.ROUTER_GEMM_CONFIGS:
        rg.validate_config(cfg)
    rg.validate_config(dot())  # and a sound hand-built one


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (
            lambda: rg.router_gemm_with_config(torch.zeros(1, 8).bfloat16(), None, None),
            "must be torch.Tensors",
        ),
        (lambda: rg.router_gemm(torch.zeros(1, 8).bfloat16(), None), "must be torch.Tensors"),
        (lambda: rg.configs_for(torch.float16), "configs_for: weight dtype must be bfloat16 or float32"),
        (lambda: rg.configs_for("bf16"), "got 'bf16'"),
        (lambda: rg.configs_for(torch.bfloat16, k=-1), "configs_for: k must be None or an int >= 1; got -1"),
        (lambda: rg.select_router_config(1.5, torch.bfloat16), "m must be an int >= 0; got 1.5"),
        (lambda: rg.select_router_config(True, torch.bfloat16), "m must be an int >= 0; got True"),
        (lambda: rg.select_router_config(3, torch.bfloat16, k=0), "k must be None or an int >= 1; got 0"),
        (
            lambda: rg.reduce_config("bf16_dot_m16_n32_k512_s8_w4_st1_1t_pdl"),
            "cfg must be a router KernelConfig",
        ),
        (
            lambda: rg.reduce_config(rg.ROUTER_GEMM_CONFIGS[1], pdl="no"),
            "pdl must be None, True or False; got 'no'",
        ),
    ],
)
def test_bad_arguments_name_what_was_wrong(call, fragment: str) -> None:
    with pytest.raises(ValueError) as err:
        call()
    assert fragment in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("kw", "fragment"), [({"fixup": "no"}, "fixup must be True or False"), ({"pdl": "off"}, "pdl")]
)
def test_string_flags_are_not_taken_as_true(kw: dict, fragment: str) -> None:
    x, w = torch.zeros(2, 64, dtype=torch.bfloat16), torch.zeros(16, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=fragment):
        rg.router_gemm_with_config(x, w, "bf16_dot_m16_n32_k512_s8_w4_st1_1t_pdl", **kw)


def test_offsets_past_int32_are_copied_or_refused(monkeypatch) -> None:
    """The kernels index in int32: a view whose row stride puts an element at 2**31 or beyond is
    copied to a contiguous tensor (H200, before this guard: a silently wrong row, or an illegal
    memory access); an operand too large even when contiguous is refused. Meta tensors: no memory."""
    big = torch.empty(2**33, device="meta", dtype=torch.bfloat16)
    x = big.as_strided((3, 64), (2**30, 1))
    assert rg._int32_indexable(x, "x").stride() == (64, 1)
    small = torch.empty(3, 64, device="meta", dtype=torch.bfloat16)
    assert rg._int32_indexable(small, "x") is small
    with pytest.raises(ValueError, match=r"x \[1048576, 4096\] holds 4294967296 elements; the kernels index"):
        rg._int32_indexable(torch.empty((2**20, 2**12), device="meta"), "x")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # lets the launcher take non-CUDA tensors
    xm = torch.empty((2**21, 256), device="meta", dtype=torch.bfloat16)
    wm = torch.empty((256, 256), device="meta", dtype=torch.bfloat16)
    with pytest.raises(
        ValueError, match=r"output \[2097152, 256\] and its 16 split-K partial\(s\) hold 8589934592 elements"
    ):
        rg.router_gemm_with_config(xm, wm, "bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32")
