"""The serve-path choice (pure): the o_proj evidence rule, switch conflicts, overrides, launch flags."""

from __future__ import annotations

import pytest
from sparkpair_overlay.plan import ProbeResults
from sparkpair_overlay.probe.choice import (
    Candidate,
    ServeChoice,
    ServePath,
    ServePathError,
    ServeRow,
    Shape,
    Switch,
    choose,
    launch_switches,
    parse_overrides,
)
from sparkpair_overlay.probe.joint import choose_with_o_proj

DG_ON = (("VLLM_USE_DEEP_GEMM", "1"),)
SHAPES = (Shape("decode", 1), Shape("prefill", 2048))


def _never(_shape: Shape):  # the choice never runs candidates
    raise AssertionError("choose() must not run a candidate")


def cand(path: str, name: str, switch: Switch) -> Candidate:
    return Candidate(path, name, lambda: None, _never, switch)


LINEAR = ServePath(
    "linear",
    "FP8 linears",
    SHAPES,
    5e-3,
    "pick another --linear-backend",
    (
        cand("linear", "deep_gemm", Switch(args=("--linear-backend", "deep_gemm"), needs_env=DG_ON)),
        cand("linear", "triton", Switch(args=("--linear-backend", "triton"))),
    ),
)
MHC = ServePath(
    "mhc",
    "mHC prenorm",
    SHAPES,
    2e-3,
    "VLLM_USE_DEEP_GEMM=0",
    (
        cand("mhc", "deep_gemm", Switch(needs_env=DG_ON)),
        cand("mhc", "tilelang", Switch(env=(("VLLM_USE_DEEP_GEMM", "0"),))),
    ),
)
INDEXER = ServePath(
    "indexer",
    "MQA logits",
    SHAPES,
    5e-3,
    "install a GB10-capable DeepGEMM",
    (cand("indexer", "deep_gemm", Switch()),),
)


def rows(
    path: str, name: str, us: float | None = 10.0, ok: bool = True, error: str | None = None
) -> list[ServeRow]:
    return [
        ServeRow(
            path, name, s.label, s.tokens, ok, us if ok else None, 1e-4 if ok else None, None if ok else error
        )
        for s in SHAPES
    ]


def test_the_fastest_correct_candidate_wins_and_its_flag_goes_to_vllm() -> None:
    got = choose([LINEAR], rows("linear", "deep_gemm", 5.0) + rows("linear", "triton", 9.0))
    assert got.choices[0].candidate == "deep_gemm" and not got.stop
    assert got.args == ("--linear-backend", "deep_gemm")
    assert "fastest of 2 correct" in got.choices[0].reason


def test_a_wrong_or_crashing_deepgemm_is_never_chosen_and_the_plan_says_why() -> None:
    wrong = rows("linear", "deep_gemm", ok=False, error="wrong numbers: error 0.7 > tolerance 0.005")
    got = choose([LINEAR], wrong + rows("linear", "triton", 50.0))
    c = got.choices[0]
    assert c.candidate == "triton" and got.args == ("--linear-backend", "triton")
    assert any("deep_gemm: wrong numbers" in e for e in c.evidence)


def test_a_candidate_missing_one_shape_does_not_qualify() -> None:
    partial = rows("linear", "deep_gemm", 1.0)[:1]
    got = choose([LINEAR], partial + rows("linear", "triton", 50.0))
    assert got.choices[0].candidate == "triton"
    assert any("probed at 1 of 2 shapes" in e for e in got.choices[0].evidence)


def test_no_correct_candidate_stops_with_a_verdict_naming_path_errors_and_way_around() -> None:
    err = "RuntimeError: Assertion error (csrc/apis/layout.hpp:118): Unknown SF transformation"
    got = choose(
        [LINEAR, INDEXER], rows("linear", "triton") + rows("indexer", "deep_gemm", ok=False, error=err)
    )
    assert got.stop and got.choices[1].candidate is None
    assert "serve path indexer (MQA logits)" in got.verdict and "Unknown SF transformation" in got.verdict
    assert "install a GB10-capable DeepGEMM" in got.verdict
    with pytest.raises(ServePathError, match="stop"):
        launch_switches(got, [], {})


def test_turning_deepgemm_off_for_one_path_takes_it_off_the_others() -> None:
    # mHC: only TileLang is correct, and it needs VLLM_USE_DEEP_GEMM=0, which also turns off
    # DeepGEMM's linears; so the linear path falls to Triton although DeepGEMM was faster.
    r = (
        rows("linear", "deep_gemm", 1.0)
        + rows("linear", "triton", 9.0)
        + rows("mhc", "deep_gemm", ok=False, error="wrong numbers")
        + rows("mhc", "tilelang", 3.0)
    )
    got = choose([LINEAR, MHC], r)
    assert [c.candidate for c in got.choices] == ["triton", "tilelang"]
    assert dict(got.env) == {"VLLM_USE_DEEP_GEMM": "0"}
    assert any("excluded" in e for e in got.choices[0].evidence)


def test_an_override_forces_a_candidate_and_says_so() -> None:
    over = parse_overrides("indexer=deep_gemm", [LINEAR, INDEXER])
    got = choose([INDEXER], rows("indexer", "deep_gemm", ok=False, error="boom"), over)
    assert not got.stop and got.choices[0].forced and "SPARKPAIR_SERVE_PATHS" in got.choices[0].reason


@pytest.mark.parametrize("bad", ["linear", "linear=cublas", "nope=triton", "linear=triton,=x"])
def test_a_bad_override_names_the_value_and_the_choices(bad: str) -> None:
    with pytest.raises(ServePathError, match="SPARKPAIR_SERVE_PATHS item .*wanted path=candidate") as e:
        parse_overrides(bad, [LINEAR, INDEXER])
    assert "linear=deep_gemm|triton" in str(e.value)


def test_the_profiles_own_flag_wins_over_the_probe_and_a_note_says_so() -> None:
    got = choose([LINEAR, MHC], rows("linear", "triton") + rows("mhc", "tilelang"))
    env, extra, notes = launch_switches(got, ["--linear-backend", "cutlass"], {"A": "1"})
    assert extra == [] and env == {"A": "1", "VLLM_USE_DEEP_GEMM": "0"}
    assert notes == [
        "profile sets --linear-backend cutlass; the probe's choice --linear-backend triton is not applied"
    ]
    _, extra, notes = launch_switches(got, ["--max-num-seqs", "6"], {})
    assert extra == ["--linear-backend", "triton"] and notes == []


def test_the_choice_round_trips_through_json() -> None:
    got = choose([LINEAR, MHC], rows("linear", "triton") + rows("mhc", "tilelang"))
    assert ServeChoice.from_json(got.to_json()) == got
    with pytest.raises(ServePathError, match="schema"):
        ServeChoice.from_json({**got.to_json(), "schema": "x"})


@pytest.mark.parametrize("raw", ["moe-mxfp4", "moe-mxfp4=", "=marlin", "a=b=c"])
def test_the_override_variable_refuses_a_malformed_value_naming_it(raw: str) -> None:
    from sparkpair_overlay import envs

    with pytest.raises(envs.EnvError, match=r"SPARKPAIR_SERVE_PATHS=.*wanted empty or path=candidate"):
        envs.read("SPARKPAIR_SERVE_PATHS", {"SPARKPAIR_SERVE_PATHS": raw})
    assert (
        envs.read("SPARKPAIR_SERVE_PATHS", {"SPARKPAIR_SERVE_PATHS": " moe-mxfp4=marlin , "})
        == "moe-mxfp4=marlin"
    )


def test_a_huge_bad_override_is_cut_in_the_message() -> None:
    with pytest.raises(ServePathError) as e:
        parse_overrides("x" * 10_000, [LINEAR, INDEXER])
    assert len(str(e.value)) < 400 and "'" + "x" * 64 + "'..." in str(e.value)


MOE = ServePath("moe", "MXFP4 MoE", SHAPES, 5e-3, "marlin",
                (cand("moe", "deep_gemm", Switch(args=("--moe-backend", "deep_gemm"), needs_env=DG_ON)),
                 cand("moe", "marlin", Switch(args=("--moe-backend", "marlin")))))
LIN = ServePath(
    "linear-fp8-block", "FP8 linears", SHAPES, 5e-3, "another --linear-backend",
    (cand("linear-fp8-block", "deep_gemm", Switch(args=("--linear-backend", "deep_gemm"), needs_env=DG_ON)),
     cand("linear-fp8-block", "triton", Switch(args=("--linear-backend", "triton")))),
)
WOA = ServePath("wo_a-scale", "wo_a transform", (Shape("load", 0),), 0.0, "install DeepGEMM",
                (cand("wo_a-scale", "deep_gemm", Switch(needs_env=DG_ON)),),
                needed_with=("linear-fp8-block", "deep_gemm"))


def test_a_setter_that_would_leave_another_path_without_a_candidate_is_dropped_instead() -> None:
    # TileLang is faster for mHC, but VLLM_USE_DEEP_GEMM=0 would take DeepGEMM from the MoE, whose
    # other candidate was not shown correct: keep DeepGEMM for mHC rather than stop the node.
    r = (rows("mhc", "deep_gemm", 5.0) + rows("mhc", "tilelang", 1.0) + rows("moe", "deep_gemm", 5.0)
         + rows("moe", "marlin", ok=False, error="no runner"))
    got = choose([MHC, MOE], r)
    assert [c.candidate for c in got.choices] == ["deep_gemm", "deep_gemm"] and not got.stop
    assert any("leaves moe without a correct candidate" in e for e in got.choices[0].evidence)


def test_a_path_needed_only_with_deepgemms_linear_is_not_needed_with_another() -> None:
    broken = [ServeRow("wo_a-scale", "deep_gemm", "load", 0, False, error="RuntimeError: boom")]
    lin_rows = rows("linear-fp8-block", "deep_gemm", 1.0) + rows("linear-fp8-block", "triton", 9.0)
    got = choose([LIN, WOA], lin_rows
                 + broken)
    lin, woa = got.choices
    # DeepGEMM's linear needs the wo_a transform, which is broken: it goes; triton needs no transform
    assert lin.candidate == "triton" and not got.stop
    assert any("needs wo_a-scale, which has no correct candidate" in e for e in lin.evidence)
    assert woa.candidate is None and not woa.needed and woa.reason.startswith("not needed")
    ok = [ServeRow("wo_a-scale", "deep_gemm", "load", 0, True, None, 0.0)]
    lin_rows = rows("linear-fp8-block", "deep_gemm", 1.0) + rows("linear-fp8-block", "triton", 9.0)
    got = choose([LIN, WOA], lin_rows
                 + ok)
    assert [c.candidate for c in got.choices] == ["deep_gemm", "deep_gemm"]


def test_switches_that_leave_no_servable_wo_a_are_dropped() -> None:
    # VLLM_USE_DEEP_GEMM=0 with no linear path chosen (vLLM's automatic FP8 kernel): the matrix refuses
    got = choose([MHC], rows("mhc", "deep_gemm", 5.0) + rows("mhc", "tilelang", 1.0))
    assert got.choices[0].candidate == "deep_gemm"
    assert any("VLLM_USE_DEEP_GEMM=0 with --linear-backend auto" in e for e in got.choices[0].evidence)


def test_a_near_tie_keeps_the_previous_choice() -> None:
    r = rows("linear", "deep_gemm", 10.0) + rows("linear", "triton", 9.6)  # 4 %: within the margin
    got = choose([LINEAR], r)
    assert got.choices[0].candidate == "deep_gemm" and "preference order" in got.choices[0].reason
    got = choose([LINEAR], r, previous={"linear": "triton"})
    assert got.choices[0].candidate == "triton" and "as last time" in got.choices[0].reason
    r = rows("linear", "deep_gemm", 10.0) + rows("linear", "triton", 9.0)  # 10 %: the clock decides
    assert choose([LINEAR], r, previous={"linear": "deep_gemm"}).choices[0].candidate == "triton"


def _o(backend, recipe, weight, us):
    from sparkpair_overlay.serve_matrix import act_layout

    return [{"backend": backend, "recipe": list(recipe), "t": t, "ok": True, "us": us,
             "weight_layout": weight, "act_layout": act_layout(recipe)} for t in (1, 32)]


def test_the_linear_backend_is_chosen_with_the_o_proj_it_hands_wo_a_to() -> None:
    from sparkpair_overlay.serve_matrix import Switches

    probe = ProbeResults.from_json({
        "schema": "sparkpair-probe/2", "capability": [12, 1], "switches": Switches().to_json(),
        "o_proj": _o("triton", (1, 1, 128), "w3-ue8m0-row", 20.0)
        + _o("triton", (1, 1, 128), "w2-e8m0-block", 6.0)})
    r = (rows("linear-fp8-block", "deep_gemm", 10.0) + rows("linear-fp8-block", "triton", 11.0)
         + [ServeRow("wo_a-scale", "deep_gemm", "load", 0, True, None, 0.0)])
    # alone, DeepGEMM's linear is faster; with the o_proj each one's wo_a layout gets, Triton's wins
    assert choose([LIN, WOA], r).choices[0].candidate == "deep_gemm"
    got, d = choose_with_o_proj([LIN, WOA], r, probe)
    assert got.choices[0].candidate == "triton"
    assert "with the o_proj it hands wo_a to" in got.choices[0].reason
    assert d is not None and (d.backend, d.weight_layout) == ("triton", "w2-e8m0-block")
    assert not got.choices[1].needed


def _stopping_choice() -> ServeChoice:
    err = "RuntimeError: Unknown SF transformation"
    bad = rows("indexer", "deep_gemm", ok=False, error=err)
    return choose([LINEAR, INDEXER], rows("linear", "triton") + bad)


def test_the_probe_file_without_a_capability_still_gives_the_node_its_serve_choice(tmp_path) -> None:
    import json

    from sparkpair_overlay.probe_results import ProbeFile

    got = _stopping_choice()
    p = tmp_path / "probe.json"
    p.write_text(json.dumps({"schema": "sparkpair-probe/2", "capability": None, "vllm": "0.33.0",
                             "serve_choice": got.to_json()}))
    read = ProbeFile.load(p)
    assert read.serve_choice == got and read.serve_choice.stop
    assert read.results is None and read.vllm_version == "0.33.0"
    # with a capability the same file is the plan's ProbeResults, read once
    p.write_text(json.dumps({"schema": "sparkpair-probe/2", "capability": [12, 1], "vllm": "0.33.0",
                             "serve_choice": got.to_json()}))
    read = ProbeFile.load(p)
    assert read.results == ProbeResults.load(p) and read.serve_choice == got


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ('{"schema": "sparkpair-probe/1", "capability": null}', "run sparkpair probe again"),
        ('{"schema": "x", "capability": null}', "'sparkpair-probe/2'"),
        ('{"schema": "sparkpair-probe/2", "capability": null, "serve_choice": {"a": 1}}', "serve_choice"),
        ('{"schema": "sparkpair-probe/2", "capability": null, "vllm": 3}', "vllm"),
        ('{"schema": "sparkpair-probe/2", "capa', "not readable JSON"),
    ],
)
def test_a_bad_probe_file_is_refused_naming_file_and_value_wanted(tmp_path, text: str, wanted: str) -> None:
    from sparkpair_overlay.jsonio import PlanError
    from sparkpair_overlay.probe_results import ProbeFile

    p = tmp_path / "probe.json"
    p.write_text(text)
    with pytest.raises(PlanError) as e:
        ProbeFile.load(p)
    assert f"probe JSON={p}" in str(e.value) and wanted in str(e.value), str(e.value)
