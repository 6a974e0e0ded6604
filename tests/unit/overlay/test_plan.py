"""The kernel plan's decisions, table-driven (pure functions; no vLLM import)."""

from __future__ import annotations

import json

import pytest
from sparkpair_overlay.o_proj_route import deepgemm_rejects, einsum_route, triton_operands, weight_layout
from sparkpair_overlay.plan import (
    DECISION_MARGIN,
    DEFAULT_ROUTER_MAX_M,
    RECIPE_SM90,
    RECIPE_SM100,
    OProjDecision,
    PlanError,
    ProbeResults,
    build_plan,
    capability_family,
    decide_o_proj,
    decide_router,
    pick_stable,
    upstream_recipe,
)
from sparkpair_overlay.serve_matrix import ROUTER_LAYOUTS, Switches, act_layout

CAPS = [(12, 1), (12, 0), (10, 0), (9, 0), None]


@pytest.mark.parametrize(
    "cap,family", [((12, 1), 120), ((12, 0), 120), ((10, 0), 100), ((10, 3), 100), ((9, 0), 90), (None, None)]
)
def test_capability_family_matches_vllm_rule(cap, family):
    assert capability_family(cap) == family


@pytest.mark.parametrize(
    "cap,recipe,tma",
    [((12, 1), RECIPE_SM100, True), ((10, 0), RECIPE_SM100, True), ((9, 0), RECIPE_SM90, False)],
)
def test_upstream_recipe_mirrors_vllm_compute_fp8_einsum_recipe(cap, recipe, tma):
    assert upstream_recipe(cap) == (recipe, tma)


# (cap, weight dtype, SPARKPAIR_ROUTER, kernel error) -> (path, max_m)
ROUTER_TABLE = [
    ((12, 1), "bfloat16", "auto", None, "triton-bf16-lowM", DEFAULT_ROUTER_MAX_M),
    ((12, 1), "float32", "auto", None, "triton-fp32-accurate", None),
    ((12, 0), "bfloat16", "auto", None, "triton-bf16-lowM", DEFAULT_ROUTER_MAX_M),
    ((12, 0), "float32", "auto", None, "triton-fp32-accurate", None),
    ((12, 1), "bfloat16", "triton", None, "triton-bf16-lowM", DEFAULT_ROUTER_MAX_M),
    ((12, 1), "bfloat16", "upstream", None, "upstream", None),
    ((12, 1), "float32", "upstream", None, "upstream", None),
    ((12, 1), "float16", "auto", None, "upstream", None),
    ((12, 1), "bfloat16", "auto", "ImportError: no triton", "upstream", None),
    ((12, 1), "float32", "triton", "ImportError: no triton", "upstream", None),
    ((10, 0), "bfloat16", "auto", None, "upstream", None),
    ((10, 0), "float32", "triton", None, "upstream", None),
    ((9, 0), "bfloat16", "auto", None, "upstream", None),
    ((9, 0), "float32", "auto", None, "upstream", None),
    (None, "bfloat16", "auto", None, "upstream", None),
    (None, "float32", "triton", None, "upstream", None),
]


@pytest.mark.parametrize("cap,dtype,mode,kerr,path,max_m", ROUTER_TABLE)
def test_router_decision_table(cap, dtype, mode, kerr, path, max_m):
    d = decide_router(cap, dtype, mode=mode, kernel_error=kerr, platform="cuda" if cap else "cpu")
    assert (d.path, d.max_m) == (path, max_m), d.reason
    assert d.reason


def test_router_kernel_error_is_the_reason():
    d = decide_router((12, 1), "bfloat16", kernel_error="ModuleNotFoundError: No module named 'triton'")
    assert d.path == "upstream" and "No module named 'triton'" in d.reason


def test_router_on_rocm_is_upstream_even_with_family_like_capability():
    assert decide_router((12, 1), "bfloat16", platform="rocm").path == "upstream"


def test_router_forced_triton_elsewhere_says_it_was_ignored():
    d = decide_router((10, 0), "bfloat16", mode="triton")
    assert d.path == "upstream" and "ignored" in d.reason


def test_router_max_m_override_wins():
    d = decide_router((12, 1), "bfloat16", max_m_override=8)
    assert (d.path, d.max_m, d.label) == ("triton-bf16-lowM", 8, "triton-bf16-lowM(M<=8)")


def _probe(router=(), o_proj=(), cap=(12, 1), switches=Switches(), decision=None):
    return ProbeResults.from_json(
        {"schema": "sparkpair-probe/2", "capability": list(cap), "router": list(router),
         "o_proj": list(o_proj), "switches": None if switches is None else switches.to_json(),
         "o_proj_decision": decision}
    )


def _r(path, m, ok=True, us=10.0, dtype="bfloat16", layout=None):
    return {"path": path, "weight_dtype": dtype, "m": m, "ok": ok, "us": us, "shape": [256, 4096],
            "layout": layout or ROUTER_LAYOUTS[dtype]}


def test_router_probe_crossover_sets_threshold():
    probe = _probe([_r("triton-bf16-lowM", 1, us=5), _r("cublas", 1, us=9),
                    _r("triton-bf16-lowM", 8, us=6), _r("cublas", 8, us=9),
                    _r("triton-bf16-lowM", 32, us=12), _r("cublas", 32, us=10),
                    _r("triton-bf16-lowM", 512, us=40), _r("cublas", 512, us=20)])
    d = decide_router((12, 1), "bfloat16", probe=probe)
    assert (d.path, d.max_m) == ("triton-bf16-lowM", 8)


def test_router_probe_failure_is_never_chosen_by_auto():
    probe = _probe([_r("triton-bf16-lowM", 1, ok=False), _r("cublas", 1)])
    assert decide_router((12, 1), "bfloat16", probe=probe).path == "upstream"
    probe32 = _probe([_r("triton-fp32-accurate", 512, ok=False, dtype="float32")])
    assert decide_router((12, 1), "float32", probe=probe32).path == "upstream"


def test_router_probe_cublas_always_faster_keeps_upstream():
    probe = _probe([_r("triton-bf16-lowM", 1, us=20), _r("cublas", 1, us=9)])
    d = decide_router((12, 1), "bfloat16", probe=probe)
    assert d.path == "upstream" and "cuBLAS" in d.reason


def test_probe_for_another_capability_is_ignored():
    probe = _probe([_r("triton-bf16-lowM", 1, ok=False)], cap=(12, 0))
    d = decide_router((12, 1), "bfloat16", probe=probe)
    assert d.path == "triton-bf16-lowM" and "ignored" in d.reason


def test_probe_shape_mismatch_is_ignored_for_that_layer():
    probe = _probe([_r("triton-bf16-lowM", 1, ok=False), _r("cublas", 1)])
    assert decide_router((12, 1), "bfloat16", probe=probe, shape=(128, 2048)).path == "triton-bf16-lowM"
    assert decide_router((12, 1), "bfloat16", probe=probe, shape=(256, 4096)).path == "upstream"


# (cap, SPARKPAIR_O_PROJ, recipe override, kernel error) -> (backend, recipe, patch_recipe)
O_PROJ_TABLE = [
    ((12, 1), "auto", None, None, "triton", RECIPE_SM100, False),
    ((12, 0), "auto", None, None, "triton", RECIPE_SM100, False),
    ((12, 1), "auto", RECIPE_SM90, None, "triton", RECIPE_SM90, True),
    ((12, 1), "triton", None, None, "triton", RECIPE_SM100, False),
    ((12, 1), "triton", RECIPE_SM90, None, "triton", RECIPE_SM90, True),
    ((12, 1), "deepgemm", None, None, "deepgemm", RECIPE_SM100, False),
    ((12, 1), "deepgemm", None, "ImportError", "deepgemm", RECIPE_SM100, False),
    ((12, 1), "upstream", None, None, "upstream", None, False),
    ((12, 1), "auto", None, "ImportError: x", "upstream", None, False),
    ((12, 1), "triton", None, "ImportError: x", "upstream", None, False),
    ((10, 0), "auto", None, None, "upstream", None, False),
    ((10, 0), "triton", RECIPE_SM90, None, "upstream", None, False),
    ((9, 0), "auto", None, None, "upstream", None, False),
    ((9, 0), "deepgemm", None, None, "upstream", None, False),
    (None, "auto", None, None, "upstream", None, False),
    (None, "triton", None, None, "upstream", None, False),
]


@pytest.mark.parametrize("cap,mode,recipe,kerr,backend,want_recipe,patch", O_PROJ_TABLE)
def test_o_proj_decision_table(cap, mode, recipe, kerr, backend, want_recipe, patch):
    d = decide_o_proj(cap, mode=mode, recipe_override=recipe, kernel_error=kerr,
                      platform="cuda" if cap else "cpu")
    assert (d.backend, d.recipe, d.patch_recipe) == (backend, want_recipe, patch), d.reason


def _o(backend, recipe, t, ok=True, us=10.0, weight="w3-ue8m0-row"):
    return {"backend": backend, "recipe": list(recipe), "t": t, "ok": ok, "us": us, "weight_layout": weight,
            "act_layout": act_layout(recipe)}


def test_o_proj_probe_deepgemm_chosen_only_when_correct_and_fastest():
    rows = [_o("deepgemm", RECIPE_SM100, t, us=5) for t in (1, 32, 2048)] + [
        _o("triton", RECIPE_SM100, t, us=9) for t in (1, 32, 2048)]
    assert decide_o_proj((12, 1), probe=_probe(o_proj=rows)).backend == "deepgemm"
    rows[1] = _o("deepgemm", RECIPE_SM100, 32, ok=False, us=5)
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows))
    assert (d.backend, d.recipe) == ("triton", RECIPE_SM100)


def test_o_proj_probe_can_select_sm90_recipe_which_patches_the_recipe():
    rows = [_o("deepgemm", RECIPE_SM100, 1, ok=False), _o("triton", RECIPE_SM100, 1, us=12),
            _o("triton", RECIPE_SM90, 1, us=8)]
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows))
    assert (d.backend, d.recipe, d.patch_recipe) == ("triton", RECIPE_SM90, True)


def test_o_proj_probe_with_nothing_correct_stays_upstream():
    rows = [_o("deepgemm", RECIPE_SM100, 1, ok=False), _o("triton", RECIPE_SM100, 1, ok=False)]
    assert decide_o_proj((12, 1), probe=_probe(o_proj=rows)).backend == "upstream"


def test_o_proj_forced_deepgemm_over_failing_probe_warns_in_reason():
    rows = [_o("deepgemm", RECIPE_SM100, 1, ok=False)]
    d = decide_o_proj((12, 1), mode="deepgemm", probe=_probe(o_proj=rows))
    assert d.backend == "deepgemm" and "wrong at T=[1]" in d.reason


@pytest.mark.parametrize("bad", ["fast", "UPSTREAMX", ""])
def test_unknown_modes_raise(bad):
    with pytest.raises(PlanError, match="SPARKPAIR_ROUTER"):
        decide_router((12, 1), "bfloat16", mode=bad)
    with pytest.raises(PlanError, match="SPARKPAIR_O_PROJ"):
        decide_o_proj((12, 1), mode=bad)


@pytest.mark.parametrize(
    "data,needle",
    [
        ({"schema": "other/1", "capability": [12, 1]}, "schema"),
        ({"schema": "sparkpair-probe/2"}, r"capability=null; wanted \[MAJOR, MINOR\]"),
        ({"schema": "sparkpair-probe/2", "capability": [12, 1], "router": [{"path": "x"}]},
         r"router\[0\]\.weight_dtype is missing"),
        ({"schema": "sparkpair-probe/1", "capability": [12, 1]}, "record no operand layout.*probe again"),
        ({"schema": "sparkpair-probe/2", "capability": [12, 1],
          "o_proj": [dict(_o("triton", RECIPE_SM100, 1), weight_layout="w9")]},
         r"o_proj\[0\]\.weight_layout"),
        ({"schema": "sparkpair-probe/2", "capability": [12, 1],
          "o_proj": [dict(_o("triton", RECIPE_SM100, 1), act_layout="a-fp32-tma")]}, "the layout recipe"),
        ([1, 2], "top level"),
    ],
)
def test_bad_probe_json_raises_naming_the_problem(data, needle):
    with pytest.raises(PlanError, match=needle):
        ProbeResults.from_json(data)


def _plan(**kw):
    base = dict(vllm_version="0.32.0", version_verified=True, allow_unverified=False, platform="cuda",
                capability=(12, 1))
    base.update(kw)
    return build_plan(**base)


@pytest.mark.parametrize("cap", CAPS)
def test_plan_line_is_one_line_naming_version_cap_and_paths(cap):
    p = _plan(capability=cap, platform="cuda" if cap else "cpu")
    line = p.line()
    assert "\n" not in line
    assert line.startswith("sparkpair overlay plan: router=bf16:")
    assert " o_proj=" in line and "vllm 0.32.0" in line
    assert ("cap cpu" if cap is None else f"cap {cap[0]}.{cap[1]}") in line
    assert p.patches_router == (cap is not None and cap[0] == 12)
    assert p.patches_o_proj == (cap is not None and cap[0] == 12)


def test_unverified_version_plans_nothing_and_names_the_version():
    p = _plan(vllm_version="0.34.0")
    p2 = _plan(vllm_version="0.34.0", version_verified=False)
    assert p.patches_o_proj  # version_verified passed as True above: the plan trusts its input
    assert not p2.patching_allowed and not p2.patches_router and not p2.patches_o_proj
    assert "0.34.0 is not verified" in p2.o_proj.reason and "UNVERIFIED" in p2.line()
    p3 = _plan(vllm_version="0.34.0", version_verified=False, allow_unverified=True)
    assert p3.patching_allowed and p3.patches_o_proj


def test_plan_json_round_trips_and_is_deterministic():
    a, b = _plan(settings={"SPARKPAIR_ROUTER": "auto"}), _plan(settings={"SPARKPAIR_ROUTER": "auto"})
    assert a.dumps() == b.dumps()
    data = json.loads(a.dumps())
    assert data["schema"] == "sparkpair-kernel-plan/1"
    assert data["o_proj"]["label"] == "triton(1,1,128)" and data["router"]["bfloat16"]["max_m"] == 32
    assert data["line"] == a.line() and "pid" not in data


def test_layer_decision_uses_the_same_inputs_as_the_plan():
    p = _plan(router_max_m=4)
    assert p.router_decision("bfloat16", (256, 4096)).max_m == 4
    assert p.router_decision("float32", (256, 4096)).path == "triton-fp32-accurate"
    unverified = _plan(vllm_version="9", version_verified=False)
    assert unverified.router_decision("bfloat16", None).path == "upstream"


# ---------------------------------------------------------------- per-call predicate (real tensors)

torch = pytest.importorskip("torch")


class _Cuda:
    """A real tensor that reports ``is_cuda`` (there is no GPU here; only the flag is faked)."""

    def __init__(self, t):
        self._t = t

    def __getattr__(self, name):
        return getattr(self._t, name)

    is_cuda = True


def _call(recipe=RECIPE_SM100, t=3, g=4, r=256, k=512, sa_dtype=torch.int32, sw_dtype=torch.int32):
    x = _Cuda(torch.zeros(t, g, k, dtype=torch.float8_e4m3fn))
    inner_a = (k // 128 + 3) // 4 if sa_dtype == torch.int32 else k // 128
    sa = torch.zeros(t, g, inner_a, dtype=sa_dtype)
    w = torch.zeros(g, r, k, dtype=torch.float8_e4m3fn)
    sw = torch.zeros(g, r, (k // 128 + 3) // 4, dtype=sw_dtype) if sw_dtype == torch.int32 else torch.zeros(
        g, r // 128, k // 128, dtype=sw_dtype)
    out = torch.zeros(t, g, r, dtype=torch.bfloat16)
    return (x, sa), (w, sw), out


TRITON = OProjDecision("triton", RECIPE_SM100, False, "test")


def test_einsum_route_takes_triton_for_the_o_proj_call_it_implements():
    a, b, out = _call()
    assert einsum_route(TRITON, (12, 1), "bhr,hdr->bhd", a, b, out, (1, 1, 128)) == ("triton", "ok")
    a, b, out = _call(sa_dtype=torch.float32, sw_dtype=torch.int32)
    assert einsum_route(TRITON, (12, 1), "bhr,hdr->bhd", a, b, out, [1, 128, 128])[0] == "triton"
    a, b, out = _call(sa_dtype=torch.float32, sw_dtype=torch.float32)
    assert einsum_route(TRITON, (12, 0), "bhr,hdr->bhd", a, b, out, (1, 128, 128))[0] == "triton"


@pytest.mark.parametrize(
    "change,needle",
    [
        (dict(cap=(10, 0)), "not family 120"),
        (dict(cap=None), "not family 120"),
        (dict(eq="bhd,hdr->bhr"), "equation"),
        (dict(recipe=(1, 1, 32)), "recipe"),
        (dict(sa_shape=(3, 4, 3)), "scale encodings"),
        (dict(sw=torch.float8_e8m0fnu), "not a wo_a layout"),
        (dict(cpu=True), "CUDA"),
        (dict(decision=OProjDecision("deepgemm", RECIPE_SM100, False, "x")), "plan o_proj=deepgemm"),
    ],
)
def test_einsum_route_sends_everything_else_to_deepgemm_with_a_reason(change, needle, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    a, b, out = _call(sa_dtype=torch.int32, sw_dtype=change.get("sw", torch.int32))
    if "sa_shape" in change:
        a = (a[0], torch.zeros(change["sa_shape"], dtype=torch.int32))
    if change.get("cpu"):
        a = (a[0]._t, a[1])
    route, reason = einsum_route(change.get("decision", TRITON), change.get("cap", (12, 1)),
                                 change.get("eq", "bhr,hdr->bhd"), a, b, out,
                                 change.get("recipe", (1, 1, 128)))
    assert route == "deepgemm" and needle in reason


def test_einsum_route_takes_a_2d_wo_a_and_hands_the_kernel_the_same_bytes_as_3d():
    """--linear-backend triton/cutlass leave wo_a [G*D, R] with [G*D/128, R/128] block scales: the
    dispatcher gives our kernel the same storage viewed [G, D, R] / [G, D/128, R/128]."""
    (x, sa), (w, _), out = _call()
    w2d = w.reshape(-1, w.shape[-1])
    for sdt, layout in ((torch.float8_e8m0fnu, "w2-e8m0-block"), (torch.float32, "w2-fp32-block")):
        sw2d = torch.zeros(w2d.shape[0] // 128, w2d.shape[1] // 128, dtype=sdt)
        assert weight_layout(w2d, sw2d, 4, 256) == layout
        route, reason = einsum_route(TRITON, (12, 1), "bhr,hdr->bhd", (x, sa), (w2d, sw2d), out, (1, 1, 128))
        assert (route, reason) == ("triton", "ok (2-D wo_a viewed as [G, D, R])")
        a2, (w3, sw3), rec = triton_operands((x, sa), (w2d, sw2d), out)
        assert tuple(w3.shape) == (4, 256, 512) and w3.data_ptr() == w2d.data_ptr()
        assert tuple(sw3.shape) == (4, 2, 4) and sw3.data_ptr() == sw2d.data_ptr() and rec == RECIPE_SM90
    bad_out = torch.zeros(3, 4, 128, dtype=torch.bfloat16)
    (x, sa), (w, sw), _ = _call()
    route, reason = einsum_route(TRITON, (12, 1), "bhr,hdr->bhd", (x, sa), (w, sw), bad_out, (1, 1, 128))
    assert route == "deepgemm" and "disagree" in reason


def _mn_major(t, g, inner, dtype=torch.int32):
    t4 = (t + 3) // 4 * 4
    flat = torch.zeros(g * inner * t4, dtype=dtype)
    return flat.as_strided((g, t, inner), (inner * t4, 1, t4)).transpose(0, 1)


def test_deepgemm_rejects_what_its_host_checks_reject_and_takes_what_vllm_hands_it():
    t, g, d, r = 3, 4, 256, 1024
    x = torch.zeros(g, t, r, dtype=torch.float8_e4m3fn).transpose(0, 1)
    out = torch.zeros(t, g, d, dtype=torch.bfloat16)
    w = torch.zeros(g, d, r, dtype=torch.float8_e4m3fn)
    sa_i = _mn_major(t, g, r // 512)
    sw_row = torch.zeros(g, r // 512, d, dtype=torch.int32).transpose(1, 2)  # MN-major per row
    sw_block = torch.zeros(g, d // 128, r // 128)
    sa_f = _mn_major(t, g, r // 128, torch.float32)
    # the two (recipe, layout) pairs the matrix serves with DeepGEMM
    assert deepgemm_rejects((x, sa_i), (w, sw_row), out, (1, 1, 128)) is None
    assert deepgemm_rejects((x, sa_f), (w, sw_block), out, (1, 128, 128)) is None
    # issue 30's first case: recipe (1,128,128) with the per-row int32 scales vLLM makes on arch 12
    why = deepgemm_rejects((x, sa_f), (w, sw_row), out, (1, 128, 128))
    assert why is not None and "sf.size(-2) == ceil_div(256, 128) = 2" in why
    why = deepgemm_rejects((x, sa_i), (w, sw_block), out, (1, 1, 128))
    assert why is not None and "sf.size(-2) == ceil_div(256, 1)" in why
    # the second: a 2-D wo_a
    why = deepgemm_rejects((x, sa_i), (w.reshape(g * d, r), sw_row), out, (1, 1, 128))
    assert why is not None and "3-D" in why
    # int32 scales that are not MN-major
    why = deepgemm_rejects((x, sa_i), (w, sw_row.contiguous()), out, (1, 1, 128))
    assert why is not None and "MN-major" in why


def test_pick_stable_keeps_near_ties_and_follows_a_clear_win():
    pref = ["a", "b", "c"]
    assert pick_stable([(10.0, "a"), (9.9, "b")], pref)[0] == "a"  # within the margin: preference order
    assert pick_stable([(10.0, "a"), (9.0, "b")], pref)[0] == "b"  # 10 % faster: the clock
    assert pick_stable([(10.0, "a"), (9.9, "b")], pref, previous="b")[0] == "b"  # the previous one is kept
    name, why = pick_stable([(10.0, "a"), (9.0, "b")], pref, previous="a")
    assert name == "b" and why == "fastest"
    assert 0 < DECISION_MARGIN < 0.2
    with pytest.raises(ValueError):
        pick_stable([], pref)


E8M0_OFF = Switches(use_deep_gemm_e8m0=False)
TRITON_2D = Switches(linear_backend="triton")


def test_o_proj_rows_on_another_layout_are_refused_and_the_served_layout_decides():
    # DeepGEMM measured fastest, but on the 3-D layout; --linear-backend triton serves the 2-D one
    rows = [_o("deepgemm", RECIPE_SM100, t, us=5) for t in (1, 32)] + [
        _o("triton", RECIPE_SM100, t, us=9, weight="w2-e8m0-block") for t in (1, 32)]
    probe = _probe(o_proj=rows)
    d = decide_o_proj((12, 1), probe=probe, switches=TRITON_2D)
    want = ("triton", RECIPE_SM100, "w2-e8m0-block", "probe")
    assert (d.backend, d.recipe, d.weight_layout, d.source) == want
    assert "rows on w3-ue8m0-row ignored" not in d.reason  # the chosen reason names the layout it used
    d3 = decide_o_proj((12, 1), probe=probe)
    assert (d3.backend, d3.weight_layout) == ("deepgemm", "w3-ue8m0-row")


def test_o_proj_deepgemm_is_never_chosen_where_the_matrix_refuses_it():
    # DeepGEMM (1,128,128) "correct and fastest" on the per-row int32 layout: DeepGEMM rejects it
    rows = [_o("deepgemm", RECIPE_SM90, t, us=2) for t in (1, 32)] + [
        _o("triton", RECIPE_SM100, t, us=9) for t in (1, 32)]
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows))
    assert (d.backend, d.recipe) == ("triton", RECIPE_SM100)
    # forced DeepGEMM with VLLM_USE_DEEP_GEMM_E8M0=0 (fp32 block scales) takes the recipe it serves
    d = decide_o_proj((12, 1), mode="deepgemm", switches=E8M0_OFF)
    assert (d.backend, d.recipe, d.weight_layout) == ("deepgemm", RECIPE_SM90, "w3-fp32-block")
    d = decide_o_proj((12, 1), mode="deepgemm")
    assert (d.backend, d.recipe) == ("deepgemm", RECIPE_SM100)


def test_o_proj_near_tie_keeps_the_preferred_candidate_and_the_persisted_decision_is_adopted():
    rows = [_o("deepgemm", RECIPE_SM100, t, us=9.8) for t in (1, 32)] + [
        _o("triton", RECIPE_SM100, t, us=10.0) for t in (1, 32)]
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows))
    assert d.backend == "triton" and "preference order" in d.reason
    swapped = [dict(r, us=19.8 - r["us"]) for r in rows]  # triton 9.8 (fastest), deepgemm 10.0
    d = decide_o_proj((12, 1), probe=_probe(o_proj=swapped), previous=("deepgemm", RECIPE_SM100))
    assert d.backend == "deepgemm" and "kept from the previous probe" in d.reason
    dec = {"backend": "deepgemm", "recipe": [1, 1, 128], "weight_layout": "w3-ue8m0-row", "reason": "kept"}
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows, decision=dec))
    assert d.backend == "deepgemm" and d.reason == "probe decision: kept"
    # a persisted decision for another layout is not adopted
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows, decision=dict(dec, weight_layout="w2-e8m0-block")))
    assert d.backend == "triton"


def test_o_proj_rows_taken_under_other_deepgemm_switches_are_ignored():
    rows = [_o("deepgemm", RECIPE_SM100, t, us=2) for t in (1, 32)]
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows, switches=E8M0_OFF))
    assert d.backend == "triton" and "VLLM_USE_DEEP_GEMM_E8M0 0 in the probe, 1 here" in d.reason
    d = decide_o_proj((12, 1), probe=_probe(o_proj=rows, switches=None))
    assert d.backend == "triton" and "records no switches" in d.reason


def test_router_rows_on_another_layout_are_ignored():
    probe = _probe([_r("triton-bf16-lowM", 1, ok=False, layout="x-fp16/w-bf16"), _r("cublas", 1)])
    assert decide_router((12, 1), "bfloat16", probe=probe).path == "triton-bf16-lowM"
