"""router_gemm on the CPU: dispatch tables, validation, the fake implementation, and every config
run under TRITON_INTERPRET=1 on tiny shapes against fp64."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from sparkpair_overlay.kernels import router_gemm as rg
from sparkpair_overlay.kernels import router_gemm_configs as rgc


def test_dispatch_tables_hold_registered_configs_in_increasing_m() -> None:
    names = {c.name for c in rg.ROUTER_GEMM_CONFIGS}
    tables = (
        (rgc.ROUTER_BF16_DISPATCH, "bf16"),
        (rgc.ROUTER_FP32_DISPATCH, "fp32"),
        (rgc.ROUTER_FP32_NO_PLANES_DISPATCH, "fp32x3"),
    )
    for table, prefix in tables:
        ms = [m for m, _ in table]
        assert ms == sorted(ms)
        for _, cfg in table:
            assert cfg in rg.ROUTER_GEMM_CONFIGS and cfg.name.startswith(prefix)
    assert len(names) == len(rg.ROUTER_GEMM_CONFIGS)
    bf16, fp32 = rg.configs_for(torch.bfloat16), rg.configs_for(torch.float32)
    assert sorted(c.name for c in bf16 + fp32) == sorted(names)  # each config takes exactly one dtype
    assert all(c.name.startswith("bf16") for c in bf16) and all(c.name.startswith("fp32") for c in fp32)


def test_config_names_are_built_from_every_parameter() -> None:
    for c in rg.ROUTER_GEMM_CONFIGS:
        assert c.name == rgc.config_name(c.kernel, c.num_warps, c.num_stages, c.constexprs())
    base = dict(
        bm=16,
        bn=64,
        bk=256,
        split=16,
        warps=4,
        stages=1,
        w_mode=rgc.W_BF16,
        pdl=True,
        one_tile=True,
        hi_chunk=1,
        reduce_block=32,
    )
    assert rgc.dot_config(**base).name == "bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32"
    other = {
        "bm": 32,
        "bn": 32,
        "bk": 512,
        "split": 8,
        "warps": 2,
        "stages": 3,
        "w_mode": rgc.W_BF16X3,
        "pdl": False,
        "one_tile": False,
        "hi_chunk": 16,
        "reduce_block": 0,
    }
    seen = {rgc.dot_config(**base).name}
    for key, value in other.items():  # changing any one parameter changes the name
        name = rgc.dot_config(**{**base, key: value}).name
        assert name not in seen, (key, name)
        seen.add(name)
    assert rgc.rows_config(1, 2, 8, "fp32").name == "fp32_rows_m1_n2_k4096_w8_st1_pdl"


def test_dispatch_hands_large_bf16_m_to_cublas() -> None:
    assert rg.select_router_config(1, torch.bfloat16) is not None
    assert rg.select_router_config(8192, torch.bfloat16) is None
    assert rg.select_router_config(8192, torch.float32) is not None


def test_dispatch_skips_configs_that_cannot_take_k() -> None:
    assert rg.select_router_config(1, torch.bfloat16, 4096).kernel == "_router_rows_kernel"
    wide = rg.select_router_config(1, torch.bfloat16, 7168)  # DeepSeek-V3's hidden size
    assert wide is not None and wide.kernel == "_router_dot_kernel"
    assert rg.select_router_config(1, torch.float32, 7168).kernel == "_router_dot_kernel"
    x = torch.zeros(1, 7168, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="takes K <= 4096; got K=7168"):
        rg.router_gemm_with_config(
            x, torch.zeros(256, 7168, dtype=torch.bfloat16), "bf16_rows_m1_n2_k4096_w8_st1_pdl"
        )


def test_capture_plan_never_needs_a_presplit_weight() -> None:
    for m in (1, 16, 64, 65, 8192):
        cfg = rg.select_router_config(m, torch.float32, 4096, presplit=False)
        assert cfg.constexprs()["W_MODE"] == rgc.W_FP32_SPLIT, (m, cfg.name)


def test_reduce_config_follows_the_dot_config() -> None:
    by_name = {c.name: c for c in rg.ROUTER_GEMM_CONFIGS}
    r = rg.reduce_config(by_name["bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32"])
    assert (r.kernel, r["BLOCK"], r.num_warps, r["SPLIT_K"], r["USE_PDL"]) == (
        "_router_reduce_kernel",
        32,
        1,
        16,
        True,
    )
    assert (
        rg.reduce_config(by_name["bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32"], pdl=False)["USE_PDL"]
        is False
    )
    r = rg.reduce_config(by_name["bf16_dot_m16_n32_k512_s8_w4_st1_1t_pdl"])  # tile-counter config's fallback
    assert (r["BLOCK"], r.num_warps, r["SPLIT_K"]) == (rgc.ROUTER_REDUCE_CONFIG["BLOCK"], 4, 8)
    with pytest.raises(ValueError, match="bf16_rows_m1_n2_k4096_w8_st1_pdl has no split-K partials"):
        rg.reduce_config(by_name["bf16_rows_m1_n2_k4096_w8_st1_pdl"])
    # the served plans' split-K configs all reduce in the PDL second launch
    for _, cfg in rgc.ROUTER_BF16_DISPATCH + rgc.ROUTER_FP32_DISPATCH[:4]:
        name = cfg.name
        if cfg.kernel == "_router_dot_kernel":
            assert cfg["REDUCE_BLOCK"] > 0 and rg.reduce_config(cfg)["USE_PDL"], name


def test_bf16x3_split_is_exact_and_refuses_what_it_cannot_carry() -> None:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(64, 320, generator=g) * 0.05
    w[0, :4] = torch.tensor([1e-30, -3.38e38, 1.0 + 2**-23, -(2.0**-100)])  # tiny, huge, 24-bit
    planes = rg.bf16x3_split(w)
    assert planes.shape == (3, 64, 320) and planes.dtype == torch.bfloat16 and planes.is_contiguous()
    assert torch.equal(planes.double().sum(0), w.double()), "hi + mid + lo must equal w exactly"
    assert torch.equal(rg.bf16x3_split(torch.zeros(4, 8)), torch.zeros(3, 4, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="2-D float32"):
        rg.bf16x3_split(w.bfloat16())
    with pytest.raises(ValueError, match="meta device"):
        rg.bf16x3_split(w.to("meta"))
    with pytest.raises(ValueError, match="below 7.889e-31"):
        rg.bf16x3_split(torch.full((4, 8), 1e-36))
    w[1, 1] = 3.4e38  # rounds to bf16 infinity
    with pytest.raises(ValueError, match=r"\|w\| = 3.4e\+38; BF16x3 carries only finite"):
        rg.bf16x3_split(w)
    w[1, 1] = float("nan")
    with pytest.raises(ValueError, match="nan"):
        rg.bf16x3_split(w)


def test_config_and_planes_errors_name_what_was_wrong() -> None:
    x, w = torch.zeros(2, 64, dtype=torch.bfloat16), torch.zeros(16, 64)
    with pytest.raises(
        ValueError, match="unknown config 'nope'; choose from cublas, bf16_rows_m1_n2_k4096_w8_st1_pdl"
    ):
        rg.router_gemm_with_config(x, w, "nope")
    with pytest.raises(ValueError, match="config must be a router KernelConfig or its name; got 3"):
        rg.router_gemm_with_config(x, w, 3)
    with pytest.raises(ValueError, match="config must be a router KernelConfig"):
        rg.router_gemm_with_config(x, w, rgc.ROUTER_REDUCE_CONFIG)
    with pytest.raises(ValueError, match="reads the pre-split weight; pass planes=bf16x3_split"):
        rg.router_gemm_with_config(x, w, "fp32w3_dot_m16_n32_k256_s16_w4_st1_1t_pdl_r32")
    with pytest.raises(ValueError, match=r"planes must be bf16 \[3, 16, 64\]"):
        rg.router_gemm(x, w, torch.zeros(3, 16, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="weight dtype must be bfloat16 or float32; got torch.float16"):
        rg.select_router_config(1, torch.float16)
    with pytest.raises(ValueError, match="m must be an int >= 0; got -1"):
        rg.select_router_config(-1, torch.bfloat16)


def test_validation_errors() -> None:
    x = torch.zeros(3, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="K differs"):
        rg.router_gemm(x, torch.zeros(16, 32, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="x must be bfloat16"):
        rg.router_gemm(x.float(), torch.zeros(16, 64, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="weight must be"):
        rg.router_gemm(x, torch.zeros(16, 64, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"\[M, K\]"):
        rg.router_gemm(x[0], torch.zeros(16, 64, dtype=torch.bfloat16))


def test_fake_impl_gives_shape_and_dtype() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = torch.ops.sparkpair.router_gemm(
            torch.empty(7, 4096, dtype=torch.bfloat16), torch.empty(256, 4096, dtype=torch.bfloat16)
        )
        assert out.shape == (7, 256) and out.dtype == torch.float32


INTERPRET_SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter as it

    # Triton 3.6's interpreter multiplies bf16 dot operands as raw uint16 bits; upcast them first.
    _orig = it.InterpreterBuilder.create_dot
    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        def up(h):
            if h.dtype.scalar == tl.bfloat16:
                return it.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
            return h
        return _orig(self, up(a), up(b), d, input_precision, max_num_imprecise_acc)
    it.InterpreterBuilder.create_dot = create_dot

    from sparkpair_overlay.kernels import router_gemm as rg
    g = torch.Generator().manual_seed(0)
    for m in (1, 17):  # one row; more rows than a 16-row tile, not a power of two
        x = torch.randn(m, 320, generator=g).bfloat16()
        for wd in (torch.bfloat16, torch.float32):
            w = (torch.randn(48, 320, generator=g) * 0.05).to(wd)
            ref = x.double() @ w.double().t()
            planes = rg.bf16x3_split(w) if wd == torch.float32 else None
            for c in rg.configs_for(wd):
                out = rg.router_gemm_with_config(x, w, c, planes=planes)
                err = float((out.double() - ref).abs().max() / ref.abs().max())
                assert err < 1e-6, (m, c.name, err)
                if m == 17:  # run-to-run identical (once per config: the interpreter is slow)
                    again = rg.router_gemm_with_config(x, w, c, planes=planes)
                    assert torch.equal(out, again), "deterministic"
            for p in ((planes, None) if planes is not None else (None,)):  # the public dispatch
                err = float((rg.router_gemm(x, w, p).double() - ref).abs().max() / ref.abs().max())
                assert err < 1e-6, (m, "router_gemm", p is None, err)
    print("OK")
    """
)


@pytest.mark.slow
def test_every_config_under_triton_interpreter() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", INTERPRET_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr
