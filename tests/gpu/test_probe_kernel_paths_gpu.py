"""The probe's kernel-path step on the GPU: every plan candidate of the o_proj kernel at every token
count of the DSpark profile, on the served layout, against fp64, timed, with the instructions it ran.

The token counts come from the profile (``configs/profiles/deepseek-v4-flash.yaml``: its CUDA-graph capture
sizes and vLLM 0.33's GB10 prefill chunk, with the powers of two between). On the H200 (torch 2.11,
Triton 3.6, no vLLM) the operands are numerics' (the same layouts vLLM makes: per-row packed UE8M0 weights
read as block scales, group-major activations with MN-major TMA-aligned scales) and the instructions are
sm_90's: the rows measure structure, not GB10 (docs/reference/triton-gb10.md). With
``SPARKPAIR_PROBE_OUT=<dir>`` the rows and the probe JSON are written there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import triton
import yaml
from sparkpair_overlay.jsonio import Fields
from sparkpair_overlay.kernel_path_row import KernelPathRow
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.o_proj_configs import choose_config_ranges
from sparkpair_overlay.plan import ProbeResults, build_plan
from sparkpair_overlay.probe import ServedTokens, run_probe, served_tokens
from sparkpair_overlay.probe import kernels as kp
from sparkpair_overlay.probe.kernel_paths import probe_kernel_paths

pytestmark = pytest.mark.gpu

# Read with yaml, not the pydantic schema: the GPU machine's image has no pydantic.
_ARGS: list[str] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "configs/profiles/deepseek-v4-flash.yaml").read_text()
)["server"]["args"]
TOKENS = served_tokens(_ARGS, "profile deepseek-v4-flash")
LAYOUT = "w3-ue8m0-row/a-ue8m0-tma"  # GB10's served o_proj with vLLM's defaults
OUT = os.environ.get("SPARKPAIR_PROBE_OUT")


def test_every_plan_candidate_at_every_served_token_count_on_the_served_layout() -> None:
    ts = TOKENS.kernel_path_ts()
    assert TOKENS.decode == (1, 2, 4, 6, 8, 12, 16, 18, 24, 30, 32, 36) and ts[-1] == 2048
    rows = probe_kernel_paths(2, "w3-ue8m0-row", (1, 1, 128), ts)
    plan = choose_config_ranges([KernelPathRow.from_json(Fields(r, "row")) for r in rows], LAYOUT)
    if OUT:
        Path(OUT, "kernel_paths.json").write_text(
            json.dumps(
                {
                    "device": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "triton": triton.__version__,
                    "token_counts": TOKENS.to_json(),
                    "rows": rows,
                    "decision": plan.to_json(),
                },
                indent=1,
            )
        )
    want = set()
    for c in fe.FP8_EINSUM_PLAN_CANDIDATES:
        lo, hi = fe.candidate_range(c) or (0, -1)
        want |= {(c.name, t) for t in ts if lo <= t <= hi}
    assert {(r["config"], r["tokens"]) for r in rows} == want
    bad = [(r["config"], r["tokens"], r["error"]) for r in rows if not r["ok"]]
    assert not bad, bad
    for r in rows:
        assert r["layout"] == LAYOUT and r["err"] <= kp.O_PROJ_TOL and r["us"] > 0, r
        assert r["triton"] == triton.__version__ and r["instructions"], r  # the MMAs its PTX holds
    assert plan.source == "probe", plan.reason
    # the kernel takes the choice: the public dispatch runs the chosen config and matches fp64
    fe.use_plan(plan.ranges, plan.fp32_scales)
    try:
        for t in (*TOKENS.decode, TOKENS.prefill_chunk):
            assert fe.select_fp8_einsum_config(t).name == plan.config_at(t)
    finally:
        fe.use_plan(None, plan.fp32_scales)


def test_the_probe_with_capability_12_1_writes_the_choice_the_plan_adopts(
    tmp_path: Path, monkeypatch
) -> None:
    """``run_probe`` as the node runs it, capability faked to GB10's, with the DeepGEMM the image's vLLM
    vendors named (this machine has no vLLM; DeepGEMM's own rows fail here, as on a CPU), cut down to bound
    the device time: the first layout the switches make (the served one) with recipe (1,1,128) (the other
    layouts' rows are the stack tier's and tests/gpu/test_o_proj_layouts.py's), capture sizes 1 and 36
    and a 64-token chunk (the test above takes every served count)."""
    import sparkpair_overlay.deepgemm as dg

    monkeypatch.setattr(
        dg, "deepgemm_found", lambda *a, **k: ("vendored", "vllm.third_party.deep_gemm 2.8.1")
    )
    out = Path(OUT or tmp_path) / "probe.json"
    tokens = ServedTokens((1, 36), 64, "cut-down DSpark profile")

    def o_proj_runner(tp: int, layouts, deepgemm: str):  # type: ignore[no-untyped-def]
        assert layouts[0] == "w3-ue8m0-row", layouts
        rows = kp.probe_o_proj(tp, layouts[:1], deepgemm=deepgemm, ts=tokens.o_proj_ts())
        return [r for r in rows if r["recipe"] == [1, 1, 128]]

    data = run_probe(
        out,
        2,
        kernels=True,
        registry=(),
        environ={"SPARKPAIR_FAKE_CAPABILITY": "12.1"},
        o_proj_runner=o_proj_runner,
        tokens=tokens,
    )
    assert data["capability"] == [12, 1] and data["triton"] == triton.__version__
    dec = data["kernel_path_decision"]
    assert data["o_proj_decision"]["backend"] == "triton" and dec is not None and dec["source"] == "probe", (
        dec
    )
    probe = ProbeResults.from_json(data)
    plan = build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        capability_source="SPARKPAIR_FAKE_CAPABILITY",
        probe=probe,
    )
    assert plan.o_proj_configs is not None and plan.o_proj_configs.reason.startswith("probe decision:"), (
        plan.line()
    )
    assert (
        data["mx_accumulation"]["mx-tile"] is not None and data["mx_accumulation"]["mx-tile-acc"] is not None
    )
