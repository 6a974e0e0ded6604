"""CUDA-graph capture at every capture size of the DSpark profile works with our kernels.

The sizes come from the profile's ``--compilation-config`` ``cudagraph_capture_sizes`` (the list
vLLM 0.33 keeps, up to max_num_seqs x (k + 1) = 36: docs/reference/speculation.md). The paths
come from the kernel plan at capability 12.1 (GB10, faked as the other tests/gpu do): the router
GEMM for bf16 and fp32 gate weights and the o_proj ``fp8_einsum`` with the plan's recipe. At each
size one graph holds a router call and an einsum call; replayed over fresh inputs it must give
the eager result bit for bit and stay within the fp64-reference tolerance of the kernel tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.kernels import router_gemm as rg
from sparkpair_overlay.numerics import fp8_einsum_reference, make_fp8_operands, max_rel, rel_fro
from sparkpair_overlay.plan import build_plan

pytestmark = pytest.mark.gpu

# Read with yaml, not the pydantic schema: the GPU machine's image has no pydantic (the schema's
# own tests, tests/unit/health/test_profile_speculation.py, cover the same values and check that
# these sizes hold every uniform verify batch up to max_num_seqs x (k + 1)).
_SERVER = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "configs/profiles/deepseek-v4-flash.yaml").read_text()
)["server"]
_ARGS: list[str] = _SERVER["args"]
SIZES: list[int] = json.loads(_ARGS[_ARGS.index("--compilation-config") + 1])["cudagraph_capture_sizes"]
N, K = 256, 4096  # DeepSeek-V4-Flash gate (test_router_gemm.py)
G, D, R = 4, 1024, 4096  # o_proj per rank at TP=2 (test_fp8_einsum.py)
ROUTER_TOL = {torch.bfloat16: 1e-5, torch.float32: 2e-6}
EINSUM_TOL = 1e-2


def _plan():  # type: ignore[no-untyped-def]
    return build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        capability_source="SPARKPAIR_FAKE_CAPABILITY",
    )


def _step(x, w, planes, ours, a, sa, ew, sw, out, recipe):  # type: ignore[no-untyped-def]
    """One router call (ours below the plan's max_m, else vLLM's cuBLAS tier) and one einsum."""

    def step() -> torch.Tensor:
        logits = rg.router_gemm(x, w, planes) if ours else torch.mm(x.float(), w.float().t())
        fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (ew, sw), out, recipe=recipe)
        return logits

    return step


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float32], ids=["bf16w", "fp32w"])
def test_router_and_o_proj_capture_and_replay_at_every_capture_size(w_dtype: torch.dtype) -> None:
    plan = _plan()
    router = plan.router_bf16 if w_dtype == torch.bfloat16 else plan.router_fp32
    recipe = plan.o_proj.recipe
    assert plan.o_proj.backend == "triton" and recipe is not None, plan.line()
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(N, K, device="cuda", generator=g) * K**-0.5).to(w_dtype)
    planes = rg.bf16x3_split(w) if w_dtype == torch.float32 else None
    enc = "fp32" if recipe == (1, 128, 128) else "int32"
    graphs = {}
    for m in SIZES:
        ours = router.path != "upstream" and (router.max_m is None or m <= router.max_m)
        x = torch.randn(m, K, device="cuda", generator=g).to(torch.bfloat16)
        a, sa, ew, sw, sa_f, sw_f = make_fp8_operands(m, G, D, R, recipe, enc, seed=m)
        out = torch.empty((m, G, D), dtype=torch.bfloat16, device="cuda")
        step = _step(x, w, planes, ours, a, sa, ew, sw, out, recipe)
        step()  # warm-up (compile) outside capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            logits = step()
        graphs[m] = (graph, step, logits, out, x, a, ew, sa_f, sw_f, ours)
    for m, (graph, step, logits, out, x, a, ew, sa_f, sw_f, ours) in graphs.items():
        x.copy_(torch.randn(m, K, device="cuda", generator=g).to(torch.bfloat16))
        a.copy_(make_fp8_operands(m, G, D, R, recipe, enc, seed=1000 + m)[0])
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        got_logits, got_einsum = logits.clone(), out.clone()
        eager_logits = step()
        torch.cuda.synchronize()
        assert torch.equal(got_logits, eager_logits) and torch.equal(got_einsum, out), (
            f"M={m}: replay != eager"
        )
        assert max_rel(got_logits, x.double() @ w.double().t()) <= ROUTER_TOL[w_dtype], (m, ours)
        assert rel_fro(got_einsum, fp8_einsum_reference(a, sa_f, ew, sw_f)) <= EINSUM_TOL, m
