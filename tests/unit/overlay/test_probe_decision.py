"""The probe file's decision: taken on the served layouts, chosen with the linear backend, persisted, and
kept across starts while the new times stay within the margin (``run_probe`` with injected candidates
and o_proj rows: the CPU has no GPU to time; the rows' layouts and the choice logic are what is tested)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkpair_overlay.plan import DECISION_MARGIN, ProbeResults, build_plan
from sparkpair_overlay.probe import run_probe
from sparkpair_overlay.probe.choice import Candidate, ServePath, Shape, Switch, Trial
from sparkpair_overlay.serve_matrix import act_layout

SHAPES = (Shape("decode", 1), Shape("prefill", 2048))


@pytest.fixture(autouse=True)
def _vendored_deepgemm(monkeypatch):
    """The image's vLLM vendors DeepGEMM; this venv's vLLM (0.32, CPU) has none."""
    import sparkpair_overlay.deepgemm as dg

    found = ("vendored", "vllm.third_party.deep_gemm 2.8.1")
    monkeypatch.setattr(dg, "deepgemm_found", lambda *a, **k: found)


def _tagged(name: str, calls: list[str]):
    """A candidate run whose call records its name (the injected timer reads it)."""

    def run(shape: Shape) -> Trial:
        def call() -> None:
            calls.append(name)

        return Trial(call, lambda: 0.0)

    return run


def _probe(tmp_path: Path, lin_us: dict[str, float], o_us: dict[tuple[str, str], float]) -> dict:
    """One probe run: the linear candidates cost ``lin_us`` per shape; o_proj (backend, layout) rows cost
    ``o_us`` at each T; the o_proj runner records which layouts it was asked for."""
    asked: list[tuple[str, ...]] = []

    def o_proj_runner(tp: int, layouts, deepgemm: str) -> list[dict]:
        asked.append(tuple(layouts))
        return [
            {
                "backend": b,
                "recipe": [1, 1, 128],
                "t": t,
                "ok": True,
                "us": us,
                "weight_layout": w,
                "act_layout": act_layout((1, 1, 128)),
                "err": 1e-3,
            }
            for (b, w), us in o_us.items()
            if w in layouts
            for t in (1, 36)
        ]

    calls: list[str] = []

    def timer(call) -> float:  # noqa: ANN001 - the time of the candidate whose call ran last
        call()
        return lin_us[calls[-1]]

    linear = ServePath(
        "linear-fp8-block",
        "FP8 linears",
        SHAPES,
        5e-3,
        "another --linear-backend",
        tuple(
            Candidate(
                "linear-fp8-block", n, lambda: None, _tagged(n, calls), Switch(args=("--linear-backend", n))
            )
            for n in ("deep_gemm", "triton")
        ),
    )
    data = run_probe(
        tmp_path / "probe.json",
        2,
        kernels=False,
        registry=(linear,),
        timer=timer,
        environ={"SPARKPAIR_FAKE_CAPABILITY": "12.1"},
        o_proj_runner=o_proj_runner,
    )
    data["_asked"] = asked
    return data


def test_the_o_proj_is_measured_on_every_layout_the_linear_backends_make_and_rows_say_which(tmp_path):
    data = _probe(
        tmp_path,
        {"deep_gemm": 10.0, "triton": 10.0},
        {("triton", "w3-ue8m0-row"): 8.0, ("triton", "w2-e8m0-block"): 8.0},
    )
    assert data["_asked"] == [("w3-ue8m0-row", "w2-e8m0-block", "w2-fp32-block")]
    assert {r["weight_layout"] for r in data["o_proj"]} == {"w3-ue8m0-row", "w2-e8m0-block"}
    assert data["schema"] == "sparkpair-probe/2" and data["margin"] == DECISION_MARGIN
    probe = ProbeResults.from_json(data)
    # a tie: vLLM's own preference order
    assert probe.switches is not None and probe.switches.linear_backend == "deep_gemm"
    assert probe.o_proj_decision is not None and probe.o_proj_decision.weight_layout == "w3-ue8m0-row"


def test_the_linear_backend_is_chosen_with_the_o_proj_and_the_decision_is_persisted(tmp_path):
    # DeepGEMM's linear is 10 % faster alone, but the o_proj on the 2-D wo_a triton leaves is far faster
    data = _probe(
        tmp_path,
        {"deep_gemm": 9.0, "triton": 10.0},
        {("triton", "w3-ue8m0-row"): 20.0, ("triton", "w2-e8m0-block"): 6.0},
    )
    lin = data["serve_choice"]["choices"][0]
    assert lin["candidate"] == "triton" and data["serve_choice"]["args"] == ["--linear-backend", "triton"]
    assert data["switches"]["linear_backend"] == "triton"
    assert data["o_proj_decision"]["weight_layout"] == "w2-e8m0-block"
    probe = ProbeResults.from_json(data)
    from sparkpair_overlay.serve_matrix import Switches

    plan = build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        probe=probe,
        switches=Switches(linear_backend="triton"),
    )
    assert plan.o_proj.source == "probe" and plan.o_proj.reason.startswith("probe decision:")


def test_a_near_tie_keeps_the_previous_files_choice_and_a_clear_win_changes_it(tmp_path):
    o = {("triton", "w3-ue8m0-row"): 8.0, ("triton", "w2-e8m0-block"): 8.0}
    first = _probe(tmp_path, {"deep_gemm": 10.0, "triton": 8.0}, o)  # triton by 12 % (linear + o_proj)
    assert first["serve_choice"]["choices"][0]["candidate"] == "triton"
    second = _probe(tmp_path, {"deep_gemm": 9.7, "triton": 10.0}, o)  # deep_gemm by 3 %: kept
    c = second["serve_choice"]["choices"][0]
    assert c["candidate"] == "triton" and "kept from the previous probe" in c["reason"], c["reason"]
    assert second["previous"].startswith("previous choices from")
    third = _probe(tmp_path, {"deep_gemm": 8.0, "triton": 10.0}, o)  # deep_gemm by 25 %: changes
    assert third["serve_choice"]["choices"][0]["candidate"] == "deep_gemm"


def test_a_previous_file_from_another_schema_is_not_used(tmp_path):
    (tmp_path / "probe.json").write_text(json.dumps({"schema": "sparkpair-probe/1", "capability": [12, 1]}))
    data = _probe(tmp_path, {"deep_gemm": 10.0, "triton": 9.0}, {("triton", "w2-e8m0-block"): 8.0})
    assert (
        data["previous"].startswith("previous probe file not used")
        and "record no operand layout" in data["previous"]
    )


def test_a_deepgemm_switch_vllm_cannot_parse_is_refused_naming_it(tmp_path):
    from sparkpair_overlay.probe.choice import ServePathError

    with pytest.raises(ServePathError, match=r"VLLM_USE_DEEP_GEMM_E8M0='x' is not an integer"):
        run_probe(
            tmp_path / "p.json",
            2,
            kernels=False,
            registry=(),
            timer=lambda c: 1.0,
            environ={"VLLM_USE_DEEP_GEMM_E8M0": "x"},
        )
    # vLLM reads bool(int(value)): 2 is on, as for vLLM
    data = run_probe(
        tmp_path / "p.json",
        2,
        kernels=False,
        registry=(),
        timer=lambda c: 1.0,
        environ={"VLLM_USE_DEEP_GEMM_E8M0": "2"},
    )
    assert data["switches"]["VLLM_USE_DEEP_GEMM_E8M0"] is True
