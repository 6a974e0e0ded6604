"""The probe's kernel-path step: the served profile's token counts, the rows taken on the o_proj
decision's layout, the per-range choice persisted in the probe file and kept across starts within the
margin, and the plan adopting it (``run_probe`` with injected runners: the CPU has no GPU to time; the
rows' device side runs in the stack tier under Triton's interpreter and in tests/gpu)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sparkpair_overlay.kernels.fp8_einsum_plan import UNBOUNDED
from sparkpair_overlay.plan import ProbeResults, build_plan
from sparkpair_overlay.probe import ServedTokens, run_probe, served_tokens
from sparkpair_overlay.serve_matrix import Switches, act_layout
from sparkpair_serving.profile import load_profile


@pytest.fixture(autouse=True)
def _vendored_deepgemm(monkeypatch):
    """The image's vLLM vendors DeepGEMM; this venv's vLLM (0.32, CPU) has none."""
    import sparkpair_overlay.deepgemm as dg

    monkeypatch.setattr(
        dg, "deepgemm_found", lambda *a, **k: ("vendored", "vllm.third_party.deep_gemm 2.8.1")
    )


def test_the_token_counts_are_the_profiles_capture_sizes_and_prefill_chunk():
    prof = load_profile("deepseek-v4-flash")
    tok = served_tokens(prof.server.args, "profile deepseek-v4-flash")
    assert tok.decode == (1, 2, 4, 6, 8, 12, 16, 18, 24, 30, 32, 36)
    assert tok.prefill_chunk == 2048 and "vLLM 0.33's GB10 default" in tok.source
    assert tok.o_proj_ts() == (*tok.decode, 2048)
    assert tok.kernel_path_ts() == (*tok.decode, 64, 128, 256, 512, 1024, 2048)
    # the profile without speculation lists no sizes: vLLM's 1, 2, 4, multiples of 8 up to its maximum
    nospec = served_tokens(load_profile("deepseek-v4-flash-nospec").server.args, "nospec")
    assert nospec.decode == (1, 2, 4, 8) and "from the maximum" in nospec.source
    big = served_tokens(["--max-cudagraph-capture-size", "16", "--max-num-batched-tokens=8192"], "x")
    assert big.decode == (1, 2, 4, 8, 16) and big.prefill_chunk == 8192
    assert big.kernel_path_ts() == (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--compilation-config", "{not json"], "--compilation-config '{not json'; wanted a JSON object"),
        (
            ["--compilation-config", '{"cudagraph_capture_sizes": [1, 0]}'],
            "wanted a non-empty list of positive",
        ),
        (["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'], "neither cudagraph_capture_sizes"),
        (
            ["--max-cudagraph-capture-size", "-3"],
            "--max-cudagraph-capture-size '-3'; wanted a positive integer",
        ),
        (
            ["--max-cudagraph-capture-size", "8", "--max-num-batched-tokens", "lots"],
            "'lots'; wanted a positive",
        ),
    ],
)
def test_token_counts_a_profile_cannot_give_are_refused_naming_the_flag(args, why):
    with pytest.raises(ValueError, match="profile p: .*" + why.replace("[", r"\[").replace("{", r"\{")):
        served_tokens(args, "profile p")


def _o_rows(backend_us: dict[str, float]) -> Any:
    def runner(tp: int, layouts, deepgemm: str) -> list[dict[str, Any]]:
        return [
            {
                "backend": b,
                "recipe": [1, 1, 128],
                "t": t,
                "ok": True,
                "us": us,
                "weight_layout": "w3-ue8m0-row",
                "act_layout": act_layout((1, 1, 128)),
                "err": 1e-3,
            }
            for b, us in backend_us.items()
            for t in (1, 36)
        ]

    return runner


def _path_runner(
    times: dict[str, dict[int, float]], asked: list[tuple[Any, ...]], bad: dict[str, int] | None = None
):
    def runner(tp: int, weight: str, recipe, ts) -> list[dict[str, Any]]:
        asked.append((tp, weight, tuple(recipe), tuple(ts)))
        rows = []
        for cfg, per_t in times.items():
            for t in ts:
                if t not in per_t:
                    continue
                wrong = (bad or {}).get(cfg) == t
                path = (
                    ("mx-tile-acc" if cfg.endswith("_acc") else "mx-tile")
                    if cfg.startswith("mx_")
                    else "tile"
                )
                rows.append(
                    {
                        "kernel": "fp8_einsum",
                        "path": path,
                        "config": cfg,
                        "tokens": t,
                        "t_range": [1, UNBOUNDED],
                        "layout": f"{weight}/{act_layout(recipe)}",
                        "ok": not wrong,
                        "us": None if wrong else per_t[t],
                        "err": 0.04 if wrong else 2e-3,
                        "triton": "3.8.0",
                        "instructions": ["mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"],
                    }
                )
        return rows

    return runner


TOKENS = ServedTokens((1, 36), 2048, "test profile")


def _run(
    tmp_path: Path,
    times: dict[str, dict[int, float]],
    *,
    o_us: dict[str, float] | None = None,
    bad: dict[str, int] | None = None,
) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    asked: list[tuple[Any, ...]] = []
    data = run_probe(
        tmp_path / "probe.json",
        2,
        kernels=False,
        registry=(),
        timer=lambda c: 1.0,
        environ={"SPARKPAIR_FAKE_CAPABILITY": "12.1"},
        o_proj_runner=_o_rows(o_us or {"triton": 5.0}),
        tokens=TOKENS,
        kernel_path_runner=_path_runner(times, asked, bad),
    )
    return data, asked


def test_kernel_paths_are_rated_on_the_decisions_layout_at_the_profiles_counts_and_the_choice_persisted(
    tmp_path,
):
    times = {
        "dec_t16_d64_k4_w4": {1: 10.0, 36: 30.0, 64: 60.0},
        "t64_d64_r2_s4": {1: 14.0, 36: 15.0, 64: 40.0},
        "mx_t128_d64_k128_w8_s4": {64: 30.0, 2048: 500.0},
        "mx_t128_d128_k128_w8_s3_acc": {64: 25.0, 2048: 400.0},
    }
    data, asked = _run(tmp_path, times, bad={"mx_t128_d128_k128_w8_s3_acc": 2048})
    assert asked == [(2, "w3-ue8m0-row", (1, 1, 128), TOKENS.kernel_path_ts())]
    assert data["token_counts"]["kernel_paths"] == [1, 36, 64, 128, 256, 512, 1024, 2048]
    assert data["mx_accumulation"] == {"k": 4096, "mx-tile": 2e-3, "mx-tile-acc": 0.04}
    dec = data["kernel_path_decision"]
    assert dec["layout"] == "w3-ue8m0-row/a-ue8m0-tma" and dec["source"] == "probe"
    # the MMA-accumulated tile is faster at 2048 but wrong there: the promoted one takes the prefill
    assert [(r["t_max"], r["config"]) for r in dec["ranges"]] == [
        (1, "dec_t16_d64_k4_w4"),
        (36, "t64_d64_r2_s4"),
        (64, "mx_t128_d128_k128_w8_s3_acc"),
        (UNBOUNDED, "mx_t128_d64_k128_w8_s4"),
    ]
    probe = ProbeResults.from_json(data)
    assert len(probe.kernel_paths) == 10 and probe.kernel_paths[0].triton == "3.8.0"
    plan = build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        probe=probe,
        switches=Switches(linear_backend=probe.switches.linear_backend),
    )
    assert plan.o_proj_configs is not None and plan.o_proj_configs.reason.startswith("probe decision:")
    assert plan.o_proj_configs.config_at(2048) == "mx_t128_d64_k128_w8_s4"


def test_a_near_tie_keeps_the_previous_files_configs_and_a_clear_win_changes_them(tmp_path):
    first, _ = _run(tmp_path, {"dec_t16_d64_k4_w4": {1: 10.0}, "t64_d64_r2_s4": {1: 11.5}})
    assert first["kernel_path_decision"]["ranges"][0]["config"] == "dec_t16_d64_k4_w4"
    second, _ = _run(tmp_path, {"dec_t16_d64_k4_w4": {1: 10.5}, "t64_d64_r2_s4": {1: 10.0}})  # 5 %: kept
    r = second["kernel_path_decision"]["ranges"][0]
    assert r["config"] == "dec_t16_d64_k4_w4" and "kept from the previous probe" in r["reason"], r
    third, _ = _run(tmp_path, {"dec_t16_d64_k4_w4": {1: 13.0}, "t64_d64_r2_s4": {1: 10.0}})  # 30 %: changes
    assert third["kernel_path_decision"]["ranges"][0]["config"] == "t64_d64_r2_s4"


def test_no_kernel_paths_when_deepgemm_serves_the_o_proj(tmp_path):
    data, asked = _run(tmp_path, {"dec_t16_d64_k4_w4": {1: 10.0}}, o_us={"triton": 9.0, "deepgemm": 5.0})
    assert data["o_proj_decision"]["backend"] == "deepgemm"
    assert asked == [] and data["kernel_paths"] == [] and data["kernel_path_decision"] is None


def test_sparkpair_probe_prints_the_failures_and_the_config_per_range(tmp_path):
    from rich.console import Console
    from sparkpair_cli import cmd_probe

    times = {"dec_t16_d64_k4_w4": {1: 10.0, 36: 30.0}, "t64_d64_r2_s4": {1: 14.0, 36: 15.0}}
    data, _ = _run(tmp_path, times, bad={"dec_t16_d64_k4_w4": 36})
    data.update(device="test", router=[])
    console = Console(record=True, width=250)
    saved, cmd_probe.console = cmd_probe.console, console
    try:
        cmd_probe._print(data)
    finally:
        cmd_probe.console = saved
    text = console.export_text()
    assert "o_proj kernel paths: 4 rows, 3 correct (Triton 3.8.0)" in text, text
    assert "dec_t16_d64_k4_w4 not correct at T=[36]" in text
    assert "o_proj configs on w3-ue8m0-row/a-ue8m0-tma (probe)" in text
    assert ">= 2" in text and "t64_d64_r2_s4" in text and "T=36: fastest of 1 correct" in text
