"""The o_proj kernel's config per token-count range, chosen from the probe's ``kernel_paths`` rows.

The rows here are written as the probe writes them (what was measured is injected: a CPU has no GPU to
time); the rule under test is the choice: the fastest correct config at each probed T, ranges merged,
rows on another layout than the served one refused, #30's margin (the previous choice and the built-in
default's config kept within it), the persisted decision adopted while its rows hold, the plan carrying
it, the pair comparing it, and the kernel taking it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from sparkpair_overlay.decision import DECISION_MARGIN
from sparkpair_overlay.kernel_path_row import KernelPathRow
from sparkpair_overlay.kernels.fp8_einsum_plan import (
    FP8_EINSUM_PLAN_FP32,
    FP8_EINSUM_PLAN_UE8M0,
    UNBOUNDED,
    plan_config_name,
)
from sparkpair_overlay.o_proj_configs import (
    ConfigPlan,
    choose_config_ranges,
    decide_o_proj_configs,
    layout_key,
    scales_fp32,
)
from sparkpair_overlay.pair import differences, serve_identity
from sparkpair_overlay.plan import KernelPlan, PlanError, ProbeResults, build_plan
from sparkpair_overlay.serve_matrix import Switches

SERVED = "w3-ue8m0-row/a-ue8m0-tma"  # vLLM's defaults on GB10: DeepGEMM's linear, recipe (1,1,128)


def _row(
    config: str, t: int, us: float | None, *, ok: bool = True, layout: str = SERVED, err: float = 2e-3
) -> KernelPathRow:
    return KernelPathRow(
        "fp8_einsum",
        "tile",
        config,
        t,
        1,
        UNBOUNDED,
        layout,
        ok,
        us if ok else None,
        err,
        "3.8.0",
        ("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",),
    )


def _rows(times: dict[str, dict[int, float]], layout: str = SERVED) -> list[KernelPathRow]:
    return [_row(c, t, us, layout=layout) for c, per_t in times.items() for t, us in per_t.items()]


def test_the_fastest_correct_config_per_probed_t_with_ranges_up_to_the_next_probed_t():
    rows = _rows(
        {
            "dec_t16_d64_k4_w4": {1: 10.0, 8: 10.0, 36: 30.0},
            "t64_d64_r2_s4": {1: 14.0, 8: 14.0, 36: 15.0, 2048: 900.0},
            "mx_t128_d64_k128_w8_s4": {36: 40.0, 2048: 500.0},
        }
    )
    plan = choose_config_ranges(rows, SERVED)
    assert plan.source == "probe" and plan.layout == SERVED
    # T 1 and 8 one range (merged), 9..36 the split tile, from 37 on the block-scaled tile loop
    assert plan.ranges == (
        (8, "dec_t16_d64_k4_w4"),
        (36, "t64_d64_r2_s4"),
        (UNBOUNDED, "mx_t128_d64_k128_w8_s4"),
    )
    assert [plan.config_at(t) for t in (1, 5, 8, 9, 36, 37, 2048, 10**6)] == [
        "dec_t16_d64_k4_w4",
        "dec_t16_d64_k4_w4",
        "dec_t16_d64_k4_w4",
        "t64_d64_r2_s4",
        "t64_d64_r2_s4",
        "mx_t128_d64_k128_w8_s4",
        "mx_t128_d64_k128_w8_s4",
        "mx_t128_d64_k128_w8_s4",
    ]
    assert plan.reasons[0] == "T=1: fastest of 2 correct; T=8: fastest of 2 correct"
    assert plan.label() == "T 1-8 dec_t16_d64_k4_w4, 9-36 t64_d64_r2_s4, >=37 mx_t128_d64_k128_w8_s4"


def test_a_wrong_config_is_never_chosen_however_fast():
    rows = _rows({"t64_d64_r2_s4": {1: 14.0, 36: 15.0}})
    rows += [
        _row("mx_t64_d64_k128_w4_s4_acc", 36, 1.0, ok=False, err=0.05),
        _row("dec_t16_d64_k4_w4", 1, 1.0, ok=False, err=float("inf")),
    ]
    plan = choose_config_ranges(rows, SERVED)
    assert plan.ranges == ((UNBOUNDED, "t64_d64_r2_s4"),)


def test_rows_on_another_layout_are_refused_naming_both_layouts():
    other = "w2-e8m0-block/a-ue8m0-tma"
    rows = _rows({"dec_t16_d64_k4_w4": {1: 1.0, 36: 1.0}}, layout=other)
    plan = choose_config_ranges(rows, SERVED)
    assert plan.source == "default" and plan.ranges == FP8_EINSUM_PLAN_UE8M0
    assert f"no kernel-path rows on {SERVED}" in plan.reason and f"rows on {other} ignored" in plan.reason
    assert "not measured on GB10" in plan.reason
    # mixed: the served layout's rows decide, the others' times (however fast) do not
    rows += _rows({"t64_d64_r2_s4": {1: 14.0, 36: 15.0}})
    plan = choose_config_ranges(rows, SERVED)
    assert plan.ranges == ((UNBOUNDED, "t64_d64_r2_s4"),) and f"rows on {other} ignored" in plan.reason


def test_a_probed_t_without_a_correct_config_keeps_the_built_in_table_and_names_it():
    rows = _rows({"t64_d64_r2_s4": {1: 14.0}}) + [_row("t64_d64_r2_s4", 36, None, ok=False, err=0.5)]
    plan = choose_config_ranges(rows, SERVED)
    assert plan.source == "default" and "no correct config at T=[36]" in plan.reason


def test_near_ties_go_to_the_built_in_default_then_to_the_previous_choice_and_a_clear_win_changes_it():
    default_1 = plan_config_name(FP8_EINSUM_PLAN_UE8M0, 1)  # dec_t16_d128_k4_w8
    near = 10.0 * (1 + DECISION_MARGIN) - 0.05  # within the margin of the fastest
    rows = _rows({default_1: {1: near}, "dec_t16_d64_k4_w4": {1: 10.0}})
    plan = choose_config_ranges(rows, SERVED)
    assert plan.config_at(1) == default_1 and "first in the preference order" in plan.reasons[0]
    # the previous choice wins a near-tie over the default's
    prev = ((UNBOUNDED, "dec_t16_d64_k4_w4"),)
    rows = _rows({default_1: {1: 10.0}, "dec_t16_d64_k4_w4": {1: near}})
    plan = choose_config_ranges(rows, SERVED, previous=prev)
    assert plan.config_at(1) == "dec_t16_d64_k4_w4" and "kept from the previous probe" in plan.reasons[0]
    # outside the margin the fastest wins whatever came before
    far = 10.0 * (1 + DECISION_MARGIN) + 0.5
    rows = _rows({default_1: {1: 10.0}, "dec_t16_d64_k4_w4": {1: far}})
    assert choose_config_ranges(rows, SERVED, previous=prev).config_at(1) == default_1


def test_the_persisted_decision_is_adopted_while_its_rows_hold_it():
    rows = _rows({"dec_t16_d64_k4_w4": {1: 10.0, 36: 30.0}, "t64_d64_r2_s4": {1: 14.0, 36: 15.0}})
    persisted = ConfigPlan(
        SERVED,
        ((1, "dec_t16_d64_k4_w4"), (UNBOUNDED, "t64_d64_r2_s4")),
        ("T=1: fastest", "T=36: fastest"),
        "probe",
        "probe on ...",
    )
    got = decide_o_proj_configs("triton", "w3-ue8m0-row", (1, 1, 128), rows, persisted)
    assert got is not None and got.ranges == persisted.ranges and got.reason.startswith("probe decision:")
    # a config of it that no longer holds (wrong at T=36 now): made again from the rows
    rows = [r for r in rows if not (r.config == "t64_d64_r2_s4" and r.tokens == 36)]
    rows.append(_row("t64_d64_r2_s4", 36, None, ok=False, err=0.3))
    got = decide_o_proj_configs("triton", "w3-ue8m0-row", (1, 1, 128), rows, persisted)
    assert got is not None and got.config_at(36) == "dec_t16_d64_k4_w4"
    # for another layout than the served one: not adopted, said so
    other = ConfigPlan("w2-e8m0-block/a-ue8m0-tma", persisted.ranges, persisted.reasons, "probe", "x")
    got = decide_o_proj_configs("triton", "w3-ue8m0-row", (1, 1, 128), rows, other)
    assert got is not None and "not used" in got.reason
    # DeepGEMM serves the o_proj: no table
    assert decide_o_proj_configs("deepgemm", "w3-ue8m0-row", (1, 1, 128), rows, persisted) is None


def test_layout_keys_and_which_kernel_table_they_take():
    assert layout_key("w3-ue8m0-row", (1, 1, 128)) == SERVED
    assert layout_key("w3-fp32-block", (1, 128, 128)) == "w3-fp32-block/a-fp32-tma"
    assert scales_fp32("w3-fp32-block/a-fp32-tma") and scales_fp32("w2-fp32-block/a-fp32-tma")
    assert not scales_fp32(SERVED) and not scales_fp32("w2-fp32-block/a-ue8m0-tma")
    d = choose_config_ranges([], "w3-fp32-block/a-fp32-tma")
    assert d.ranges == FP8_EINSUM_PLAN_FP32 and d.fp32_scales


def _probe(
    rows: list[KernelPathRow],
    *,
    cap=(12, 1),
    decision: ConfigPlan | None = None,
    switches: Switches | None = None,
) -> ProbeResults:
    return ProbeResults(
        capability=cap,
        switches=switches or Switches(),
        kernel_paths=tuple(rows),
        kernel_path_decision=decision,
        vllm_version="0.33.0",
    )


def _plan(probe: ProbeResults | None, **kw: Any) -> KernelPlan:
    return build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        probe=probe,
        **kw,
    )


def test_the_plan_carries_the_per_range_choice_and_refuses_rows_taken_elsewhere():
    rows = _rows({"dec_t16_d64_k4_w4": {1: 10.0, 36: 30.0}, "t64_d64_r2_s4": {1: 14.0, 36: 15.0}})
    plan = _plan(_probe(rows))
    assert plan.o_proj.label == "triton(1,1,128)" and plan.o_proj.weight_layout == "w3-ue8m0-row"
    assert plan.o_proj_configs is not None and plan.o_proj_configs.source == "probe"
    assert plan.o_proj_configs.ranges == ((1, "dec_t16_d64_k4_w4"), (UNBOUNDED, "t64_d64_r2_s4"))
    assert "o_proj configs (probe): T 1 dec_t16_d64_k4_w4, >=2 t64_d64_r2_s4" in plan.line()
    # the plan JSON holds it and reads back equal
    assert KernelPlan.from_json(json.loads(plan.dumps())) == plan
    # rows from another device, or under other DeepGEMM switches: the built-in table, with the reason
    other_cap = _plan(_probe(rows, cap=(12, 0)))
    assert other_cap.o_proj_configs is not None and other_cap.o_proj_configs.source == "default"
    assert "probe results are for cap 12.0" in other_cap.o_proj_configs.reason
    other_sw = _plan(_probe(rows, switches=Switches(use_deep_gemm_e8m0=False)))
    assert other_sw.o_proj_configs is not None and other_sw.o_proj_configs.source == "default"
    assert "other switches" in other_sw.o_proj_configs.reason
    # no probe: the defaults, saying they are not GB10 measurements
    bare = _plan(None)
    assert bare.o_proj_configs is not None and bare.o_proj_configs.ranges == FP8_EINSUM_PLAN_UE8M0
    assert "not measured on GB10" in bare.o_proj_configs.reason
    # DeepGEMM or upstream: none
    assert _plan(None, o_proj_mode="deepgemm").o_proj_configs is None
    assert _plan(None, o_proj_mode="upstream").o_proj_configs is None


def test_two_nodes_with_different_per_range_choices_differ_in_their_serve_identity():
    a = _plan(_probe(_rows({"dec_t16_d64_k4_w4": {1: 10.0}})))
    b = _plan(_probe(_rows({"t64_d64_r2_s4": {1: 10.0}})))
    diffs = differences([serve_identity(a, a.switches), serve_identity(b, b.switches)])
    assert len(diffs) == 1 and diffs[0].startswith("o_proj_configs: rank 0 T >=1 dec_t16_d64_k4_w4"), diffs
    assert differences([serve_identity(a, a.switches), serve_identity(a, a.switches)]) == []


def test_a_malformed_decision_in_the_probe_file_is_refused_naming_the_field():
    data = _probe(
        [], decision=ConfigPlan(SERVED, ((16, "a"), (UNBOUNDED, "b")), ("x", "y"), "probe", "r")
    ).to_json()
    ProbeResults.from_json(data)
    data["kernel_path_decision"]["ranges"] = [{"t_max": 16, "config": "a", "reason": "x"}]
    with pytest.raises(PlanError, match=r"kernel_path_decision.ranges=\[16\]; wanted a kernel plan table"):
        ProbeResults.from_json(data)
    row = _row("a", 1, 1.0).to_json()
    dup = _probe([]).to_json()
    dup["kernel_paths"] = [row, row]
    with pytest.raises(PlanError, match='kernel_paths="two rows for'):
        ProbeResults.from_json(dup)


def test_every_default_config_is_a_candidate_the_probe_times_where_the_default_serves_it():
    """The built-in table breaks the probe's near-ties, so the probe must time each of its configs at
    every T the table gives it."""
    fe = pytest.importorskip("sparkpair_overlay.kernels.fp8_einsum")
    for table in (FP8_EINSUM_PLAN_UE8M0, FP8_EINSUM_PLAN_FP32):
        lo = 1
        for hi, name in table:
            span = fe.candidate_range(fe.config_by_name(name))
            assert span is not None and span[0] <= lo and min(hi, 2048) <= span[1], (name, lo, hi, span)
            lo = hi + 1


def test_the_kernel_takes_an_installed_table_and_refuses_a_bad_one():
    fe = pytest.importorskip("sparkpair_overlay.kernels.fp8_einsum")
    table = ((36, "dec_t16_d64_k4_w4"), (UNBOUNDED, "t64_d64_s4"))
    old = fe.use_plan(table, False)
    try:
        assert old == FP8_EINSUM_PLAN_UE8M0
        assert fe.select_fp8_einsum_config(36).name == "dec_t16_d64_k4_w4"
        assert fe.select_fp8_einsum_config(37).name == "t64_d64_s4"
        assert fe.select_fp8_einsum_config(36, fp32_scales=True).name == plan_config_name(
            FP8_EINSUM_PLAN_FP32, 36
        )
        for bad, why in (
            (((36, "nope"), (UNBOUNDED, "t64_d64_s4")), "unknown config name"),
            (((36, "t64_d64_s4"),), "the last max_T is 36"),
            (((36, "t64_d64_s4"), (8, "t64_d64_s4"), (UNBOUNDED, "t64_d64_s4")), "not strictly"),
        ):
            with pytest.raises(ValueError, match=why):
                fe.use_plan(bad, False)
        assert fe.active_plan(False) == table  # a refused table changes nothing
    finally:
        fe.use_plan(None, False)
    assert fe.active_plan(False) == FP8_EINSUM_PLAN_UE8M0
