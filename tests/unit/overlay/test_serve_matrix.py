"""The serve matrix (pure), the pair check's comparison, the version guard and the node's launch check.

The matrix's facts about vLLM 0.33 are proven on the wheel in ``tests/stack/test_stack_serve_matrix.py``;
these tests pin its decisions and its messages."""

from __future__ import annotations

import pytest
from sparkpair_overlay import pair, versions
from sparkpair_overlay.plan import ProbeResults, build_plan
from sparkpair_overlay.serve_matrix import (
    RECIPE_SM90,
    RECIPE_SM100,
    Switches,
    linear_outcome,
    matrix,
    o_proj_candidates_on,
    o_proj_verdict,
    serve_verdict,
)


def test_issue_30_case_1_deepgemm_1_128_128_on_the_per_row_scales_is_refused_by_name():
    v = serve_verdict(Switches(), "deepgemm", RECIPE_SM90)
    assert not v.served and v.weight == "w3-ue8m0-row"
    assert "sf.size(-2) == ceil_div(D, 128)" in v.why and "wanted SPARKPAIR_O_PROJ=triton" in v.why
    assert "VLLM_USE_DEEP_GEMM_E8M0=0" in v.why  # the other way out: fp32 block scales
    assert serve_verdict(Switches(use_deep_gemm_e8m0=False), "deepgemm", RECIPE_SM90).served


@pytest.mark.parametrize(
    "lb,weight", [("triton", "w2-e8m0-block"), ("cutlass", "w2-e8m0-block"), ("b12x", "w2-fp32-block")]
)
def test_issue_30_case_2_a_non_deepgemm_linear_backend_leaves_wo_a_2d_served_by_our_kernel_only(lb, weight):
    s = Switches(linear_backend=lb)
    assert linear_outcome(s).weight == weight
    for recipe in (RECIPE_SM100, RECIPE_SM90):
        t = serve_verdict(s, "triton", recipe)
        assert t.served and t.route == "triton" and "viewed as [G, D, R]" in t.why
        d = serve_verdict(s, "deepgemm", recipe)
        assert not d.served and "2-D checkpoint layout" in d.why and f"--linear-backend {lb}" in d.why
    up = serve_verdict(s, "upstream", RECIPE_SM100)
    assert not up.served and "vLLM's own o_proj (SPARKPAIR_O_PROJ=upstream)" in up.why


@pytest.mark.parametrize(
    "s,needle",
    [
        (Switches(use_deep_gemm=False), "VLLM_USE_DEEP_GEMM=0 with --linear-backend auto"),
        (Switches(linear_backend="marlin"), "repacks DeepSeek-V4's wo_a"),
        (Switches(linear_backend="humming"), "repacks"),
        (Switches(linear_backend="flashinfer_cutlass"), "SM90-only"),
        (Switches(linear_backend="torch"), "SM90-only"),
        (Switches(linear_backend="deep_gemm", use_deep_gemm=False), "vLLM has no kernel left"),
        (Switches(deepgemm="broken"), "import raises"),
        (Switches(deepgemm="none"), "no DeepGEMM installed"),
    ],
)
def test_switches_that_leave_no_servable_wo_a_are_refused_naming_switch_and_way_out(s, needle):
    for backend in ("triton", "deepgemm", "upstream"):
        v = serve_verdict(s, backend, RECIPE_SM100)
        assert not v.served and needle in v.why and "wanted" in v.why, v.why


def test_values_without_an_fp8_block_kernel_fall_back_to_vllms_automatic_choice():
    for lb in ("flashinfer_trtllm", "aiter", "emulation"):
        assert linear_outcome(Switches(linear_backend=lb)).weight == "w3-ue8m0-row"
        assert (
            "VLLM_USE_DEEP_GEMM=0" in linear_outcome(Switches(linear_backend=lb, use_deep_gemm=False)).refusal
        )


def test_a_top_level_deep_gemm_is_served_only_with_evidence():
    s = Switches(deepgemm="external")
    for backend in ("triton", "deepgemm"):
        v = serve_verdict(s, backend, RECIPE_SM100)
        assert v.served and v.needs_evidence


def test_the_probe_measures_exactly_the_candidates_the_matrix_serves_on_a_layout():
    assert o_proj_candidates_on("w3-ue8m0-row") == (
        ("triton", RECIPE_SM100),
        ("triton", RECIPE_SM90),
        ("deepgemm", RECIPE_SM100),
    )
    assert o_proj_candidates_on("w3-fp32-block") == (
        ("triton", RECIPE_SM100),
        ("triton", RECIPE_SM90),
        ("deepgemm", RECIPE_SM90),
    )
    assert o_proj_candidates_on("w2-e8m0-block") == (("triton", RECIPE_SM100), ("triton", RECIPE_SM90))
    with pytest.raises(ValueError, match="o_proj backend 'cutlass'"):
        o_proj_verdict("cutlass", RECIPE_SM100, "w3-ue8m0-row")


def test_every_refusal_in_the_matrix_names_a_way_out():
    for c in matrix():
        assert c.verdict.served or "wanted" in c.verdict.why, c


def _plan(**kw):
    base = dict(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
    )
    return build_plan(**{**base, **kw})


def test_the_pair_identity_differs_where_the_ranks_would_serve_differently():
    a = pair.serve_identity(_plan(), Switches())
    b = pair.serve_identity(_plan(o_proj_mode="deepgemm"), Switches(use_deep_gemm_e8m0=False))
    diffs = pair.differences([a, b])
    assert any(d.startswith("o_proj: rank 0 triton(1,1,128) on w3-ue8m0-row, rank 1 deepgemm") for d in diffs)
    assert "VLLM_USE_DEEP_GEMM_E8M0: rank 0 1, rank 1 0" in diffs
    assert pair.differences([a, dict(a)]) == []
    msg = pair.mismatch_message(diffs, 1)
    assert (
        msg.startswith("sparkpair overlay: refusing to build the model on rank 1")
        and "wanted one plan" in msg
    )


def test_pair_check_needs_no_peer_in_one_process():
    pair.reset()
    pair.check_once(_plan(), Switches())  # no distributed group: nothing to compare, no error
    pair.reset()


@pytest.mark.parametrize(
    "version,cap,allow,stops",
    [
        ("0.35.0", (12, 1), False, True),
        ("0.35.0", (12, 0), False, True),
        ("0.35.0", (12, 1), True, False),
        ("0.35.0", (9, 0), False, False),
        ("0.35.0", None, False, False),
        ("0.33.0", (12, 1), False, False),
        ("0.34.0", (12, 1), False, False),
    ],
)
def test_the_version_guard_stops_only_unverified_vllm_on_family_120(version, cap, allow, stops):
    why = versions.guard_problem(version, cap, allow)
    assert (why is not None) == stops
    if stops:
        assert "vLLM 0.35.0 is not a verified version" in why and "SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1" in why


def _probe(decision_layout: str | None = None, linear: str = "auto") -> ProbeResults:
    rows = [
        {
            "backend": "triton",
            "recipe": [1, 1, 128],
            "t": t,
            "ok": True,
            "us": 5.0,
            "weight_layout": decision_layout or "w3-ue8m0-row",
            "act_layout": "a-ue8m0-tma",
        }
        for t in (1, 36)
    ]
    dec = (
        None
        if decision_layout is None
        else {"backend": "triton", "recipe": [1, 1, 128], "weight_layout": decision_layout, "reason": "t"}
    )
    return ProbeResults.from_json(
        {
            "schema": "sparkpair-probe/2",
            "capability": [12, 1],
            "o_proj": rows,
            "switches": Switches(linear_backend=linear).to_json(),
            "o_proj_decision": dec,
        }
    )


def test_the_node_refuses_before_vllm_what_vllm_would_refuse_at_construction(monkeypatch):
    import sparkpair_overlay.deepgemm as dg
    from sparkpair_overlay.plugin import launch_problem, linear_backend_of

    monkeypatch.setattr(
        dg, "deepgemm_found", lambda *a, **k: ("vendored", "vllm.third_party.deep_gemm 2.8.1")
    )
    assert (
        linear_backend_of(["--x", "1", "--linear-backend", "cutlass", "--linear-backend=triton"]) == "triton"
    )
    probe = _probe("w2-e8m0-block", linear="triton")
    assert launch_problem({}, ["--linear-backend", "triton"], probe, "0.33.0") is None
    # the profile's own --linear-backend wins over the probe's, and makes a layout the choice was not made on
    why = launch_problem({}, ["--linear-backend", "deep_gemm"], probe, "0.33.0")
    assert why is not None and "was not proven on these operands" in why
    why = launch_problem({"VLLM_USE_DEEP_GEMM": "0"}, [], _probe(), "0.33.0")
    assert why is not None and "VLLM_USE_DEEP_GEMM=0 with --linear-backend auto" in why
    why = launch_problem({}, [], _probe(), "0.35.0")
    assert why is not None and "vLLM 0.35.0 is not a verified version" in why
    assert launch_problem({"SPARKPAIR_ALLOW_UNVERIFIED_VLLM": "1"}, [], _probe(), "0.35.0") is None


NO_NVCC = ("no nvcc for DeepGEMM's JIT (looked at CUDA_HOME, CUDA_PATH, PATH and /usr/local/cuda; "
           "wanted nvcc >= 12.9)")


def test_deepgemm_unsupported_by_the_release_acts_as_vllm_use_deep_gemm_0_and_is_named():
    """vLLM 0.34 without an nvcc >= 12.9: wo_a stays 2-D exactly as with VLLM_USE_DEEP_GEMM=0; the
    automatic and the deep_gemm linear backends are refused naming the missing nvcc and the way back, a
    2-D one serves."""
    off = Switches(deepgemm_unsupported=NO_NVCC)
    assert not off.deepgemm_on and Switches().deepgemm_on
    auto = serve_verdict(off, "triton", RECIPE_SM100)
    assert not auto.served and f"DeepGEMM unavailable ({NO_NVCC}) with --linear-backend auto" in auto.why
    assert "wanted --linear-backend triton, cutlass or b12x" in auto.why and "CUDA_HOME" in auto.why
    dg_off = Switches(linear_backend="deep_gemm", deepgemm_unsupported=NO_NVCC)
    dg = serve_verdict(dg_off, "triton", RECIPE_SM100)
    assert not dg.served and "--linear-backend deep_gemm with DeepGEMM unavailable (no nvcc" in dg.why
    tri = Switches(linear_backend="triton", deepgemm_unsupported=NO_NVCC)
    assert linear_outcome(tri) == linear_outcome(Switches(linear_backend="triton", use_deep_gemm=False))
    assert serve_verdict(tri, "triton", RECIPE_SM100).served
    assert "unsupported: no nvcc" in off.describe() and off.to_json()["deepgemm_unsupported"] == NO_NVCC


def test_the_pair_check_names_a_node_whose_deepgemm_is_unsupported():
    same = pair.serve_identity(_plan(), Switches())
    other = pair.serve_identity(_plan(), Switches(deepgemm_unsupported=NO_NVCC))
    assert pair.differences([same, other]) == ["deepgemm_supported: rank 0 yes, rank 1 no"]
