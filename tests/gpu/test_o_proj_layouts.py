"""Our o_proj on every ``wo_a`` layout vLLM 0.33 can hand it, on the GPU, through the dispatcher
(issue 30): the 3-D layouts of DeepGEMM's linear kernel and the 2-D checkpoint layout that
``--linear-backend triton | cutlass | b12x`` leave, all made from one checkpoint-form ``wo_a``
(:mod:`sparkpair_overlay.probe.operands`; vLLM is not installed on the GPU host, so its numerics form),
against fp64; and the probe's o_proj rows timed as CUDA-graph replay. GB10's plan (the kernel's
capability cache set to 12.1)."""

from __future__ import annotations

import pytest
import torch
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.numerics import rel_fro
from sparkpair_overlay.patches.o_proj import Fp8EinsumDispatcher
from sparkpair_overlay.plan import OProjDecision
from sparkpair_overlay.probe import kernels as kp
from sparkpair_overlay.probe import operands as ops

G, D, R = 4, 1024, 4096
LAYOUTS = ("w3-ue8m0-row", "w3-fp32-block", "w2-e8m0-block", "w2-fp32-block")


@pytest.fixture(autouse=True)
def _gb10_plan():
    cache = getattr(fe, "_CAPABILITY", None)
    if cache is not None:
        cache[torch.cuda.current_device()] = (12, 1)


def _never(*a, **k):
    raise AssertionError("the dispatcher sent a call our kernel takes to DeepGEMM")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("recipe", [(1, 1, 128), (1, 128, 128)], ids=["r1", "r128"])
@pytest.mark.parametrize("t", [1, 36, 2048])
def test_the_dispatcher_serves_every_layout_within_tolerance_of_fp64(layout, recipe, t):
    w2d, exps = ops.checkpoint_wo_a(G, D, R, seed=4)
    w, sw, _ = ops.post_process_wo_a(layout, w2d, exps, G, device="cuda", use_vllm=False)
    a, sa, _ = ops.activation(recipe, t, G, R, device="cuda", seed=t, use_vllm=False)
    out = torch.full((t, G, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    disp = Fp8EinsumDispatcher(_never, OProjDecision("triton", recipe, False, "t"), (12, 1), fe.fp8_einsum)
    disp("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
    torch.cuda.synchronize()
    assert disp.calls == {"triton": 1}
    err = rel_fro(out, ops.reference(a, sa, w2d.cuda(), exps, G))
    assert err <= 1e-2, (layout, recipe, t, err)


def test_the_probe_times_the_o_proj_on_the_served_layouts():
    rows = kp.probe_o_proj(2, ("w3-ue8m0-row", "w2-e8m0-block", "w2-fp32-block"), ts=(1, 36), use_vllm=False)
    triton_rows = [r for r in rows if r["backend"] == "triton"]
    assert len(triton_rows) == 3 * 2 * 2
    for r in triton_rows:
        assert r["ok"] and r["us"] and r["us"] > 0 and r["err"] <= 1e-2, r
        assert r["source"] == "numerics"
    # DeepGEMM is not installed here (no vLLM): its rows fail with the reason, never crash the probe
    assert all(not r["ok"] and r["error"] for r in rows if r["backend"] == "deepgemm")
