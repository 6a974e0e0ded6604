"""``sparkpair bench compare``, the result table, /metrics parsing and the plots, on crafted results."""
# ruff: noqa: E501

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from sparkpair_cli.bench import reference
from sparkpair_cli.bench.aggregate import summarize_cell
from sparkpair_cli.bench.report import ResultFileError, compare_table, load_result, result_table
from sparkpair_cli.bench.runner import RESULT_SCHEMA
from sparkpair_cli.bench.server_metrics import parse_metrics, summarize_samples
from typer.testing import CliRunner

PROM = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.5
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 50.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 20.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="m"} 1.0
"""


def test_prometheus_text_is_parsed_and_summed_over_label_sets() -> None:
    v = parse_metrics(PROM)
    assert v["kv_cache_usage"] == pytest.approx(0.75)
    assert v["preemptions"] == 3.0
    assert v["generation_tokens"] == 1000.0
    assert v["spec_draft_tokens"] == 50.0
    assert "requests_running" not in v  # not exported: absent, not 0


def test_metric_samples_summarize_to_maxima_and_counter_deltas() -> None:
    samples = [
        {"t_s": 0.0, "values": {"kv_cache_usage": 0.1, "preemptions": 3, "generation_tokens": 1000,
                                "spec_drafts": 10, "spec_draft_tokens": 50, "spec_accepted_tokens": 20}},
        {"t_s": 0.5, "error": "ConnectError: refused"},
        {"t_s": 1.0, "values": {"kv_cache_usage": 0.6, "preemptions": 5, "generation_tokens": 1400,
                                "spec_drafts": 30, "spec_draft_tokens": 150, "spec_accepted_tokens": 95}},
        {"t_s": 2.0, "values": {"kv_cache_usage": 0.2, "preemptions": 5, "generation_tokens": 1500,
                                "spec_drafts": 50, "spec_draft_tokens": 250, "spec_accepted_tokens": 170}},
    ]  # fmt: skip
    s = summarize_samples(samples)
    assert s["available"] is True and s["samples"] == 3
    assert s["kv_cache_usage_max"] == pytest.approx(0.6)
    assert s["preemptions"] == 2
    assert s["server_generation_tokens"] == 500
    assert s["spec_acceptance_rate"] == pytest.approx(150 / 200)
    assert s["spec_acceptance_length"] == pytest.approx(1 + 150 / 40)
    assert s["requests_running_max"] is None


def test_no_metrics_endpoint_is_recorded_as_unavailable() -> None:
    s = summarize_samples([{"t_s": 0.0, "error": "HTTPStatusError: 404"}])
    assert s["available"] is False and s["preemptions"] is None and s["spec_acceptance_rate"] is None


def _result(tmp: Path, name: str, ttft: float, decode_s: float, cells: list[int], **prov: object) -> Path:
    out_cells = []
    for conc in cells:
        recs = [
            {"cell_id": "x", "phase": "measured", "success": True, "cancelled": False, "start_s": 0.0,
             "ttft_s": ttft, "latency_s": ttft + decode_s, "output_tokens": 11, "prompt_tokens": 100, "itl_s": []}
            for _ in range(conc)
        ]  # fmt: skip
        out_cells.append(
            {"id": f"ctx100-out11-c{conc}-off", "context_tokens": 100, "output_tokens": 11, "concurrency": conc,
             "thinking": "off", "num_requests": conc, "status": "complete", "summary": summarize_cell(recs),
             "server_metrics": {"summary": {"kv_cache_usage_max": 0.5, "preemptions": 0}}}
        )  # fmt: skip
    data = {
        "schema": RESULT_SCHEMA,
        "status": "complete",
        "workload": {"name": "w"},
        "provenance": {"endpoint": {"served_model_name": "m", "base_url": "http://127.0.0.1:1", **prov}},
        "cells": out_cells,
        "requests": [],
    }
    p = tmp / f"{name}.json"
    p.write_text(json.dumps(data))
    return p


def test_compare_prints_b_over_a_per_matched_cell(tmp_path: Path) -> None:
    from sparkpair_cli.cmd_bench import register

    a = _result(tmp_path, "a", ttft=1.0, decode_s=1.0, cells=[1, 2], vllm_version="0.32.0")
    b = _result(tmp_path, "b", ttft=0.5, decode_s=0.5, cells=[2, 4], vllm_version="0.33.0")
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["bench", "compare", str(a), str(b)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    out = res.output
    # cell c2 in both: decode 10 tok / 1.0 s vs 10 tok / 0.5 s -> B/A 2.000; TTFT 1000 ms vs 500 ms -> 0.500
    assert "ctx100-out11-c2-off" in out
    assert "2.000" in out and "0.500" in out
    assert "only in A: ctx100-out11-c1-off" in out
    assert "only in B: ctx100-out11-c4-off" in out
    assert "vllm_version: A='0.32.0' B='0.33.0'" in out


def test_compare_ratios_are_right_for_each_metric(tmp_path: Path) -> None:
    a = load_result(_result(tmp_path, "a", ttft=1.0, decode_s=1.0, cells=[1]))
    b = load_result(_result(tmp_path, "b", ttft=0.25, decode_s=2.0, cells=[1]))
    table, only = compare_table(a, b, "a", "b")
    assert only == []
    rows = {table.columns[1]._cells[i]: table.columns[5]._cells[i] for i in range(table.row_count)}
    assert "0.250" in rows["TTFT p50"]  # 250 / 1000
    assert "0.500" in rows["per-user decode p50"]  # 5 / 10 tok/s
    assert "4.000" in rows["prefill p50"]  # 400 / 100 tok/s


def test_compare_with_nothing_in_common_fails(tmp_path: Path) -> None:
    from sparkpair_cli.cmd_bench import register

    a = _result(tmp_path, "a", 1.0, 1.0, [1])
    b = _result(tmp_path, "b", 1.0, 1.0, [2])
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["bench", "compare", str(a), str(b)])
    assert res.exit_code == 1


def test_a_file_that_is_not_a_result_is_rejected_with_the_schema_wanted(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other/2"}))
    with pytest.raises(ResultFileError, match=r"schema is 'other/2'; want 'sparkpair.bench/1'"):
        load_result(p)
    p.write_text("{not json")
    with pytest.raises(ResultFileError, match="not JSON"):
        load_result(p)
    with pytest.raises(ResultFileError, match="cannot read"):
        load_result(tmp_path / "missing.json")


def test_result_table_has_a_row_per_cell(tmp_path: Path) -> None:
    r = load_result(_result(tmp_path, "a", 1.0, 1.0, [1, 2, 4]))
    t = result_table(r)
    assert t.row_count == 3
    assert t.columns[0]._cells == ["ctx100-out11-c1-off", "ctx100-out11-c2-off", "ctx100-out11-c4-off"]


def test_reference_figures_name_their_source_and_ranges_are_ordered() -> None:
    assert reference.FIELD_NOTES.startswith("docs/reference/spark-deployments.md")
    for f in reference.FIGURES:
        assert f.source and f.stack
        assert 0 < f.low <= f.high
    # the headline numbers are present
    assert any(f.metric == "aggregate_output_tok_s" and f.high == 340.5 for f in reference.FIGURES)
    assert any(
        f.metric == "per_user_decode_tok_s" and f.low == 62 and f.high == 83 for f in reference.FIGURES
    )
    assert any(f.metric == "prefill_tok_s" and (f.low, f.high) == (1400, 2600) for f in reference.FIGURES)


def test_plots_are_written_as_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from sparkpair_cli.bench.plots import write_plots

    r = load_result(_result(tmp_path, "a", 1.0, 1.0, [1, 2, 4]))
    paths = write_plots(r, tmp_path)
    assert [p.name for p in paths] == ["tokps_vs_concurrency.png", "ttft_vs_context.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert p.stat().st_size > 20_000


def test_show_prints_the_table_and_redraws_the_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from sparkpair_cli.cmd_bench import register

    a = _result(tmp_path, "a", 1.0, 1.0, [1, 2])
    app = typer.Typer()
    register(app)
    res = CliRunner().invoke(app, ["bench", "show", str(a), "--plots"])
    assert res.exit_code == 0, res.output
    assert "ctx100-out11-c1-off" in res.output and "ctx100-out11-c2-off" in res.output
    assert (tmp_path / "tokps_vs_concurrency.png").is_file() and (tmp_path / "ttft_vs_context.png").is_file()
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert CliRunner().invoke(app, ["bench", "show", str(bad)]).exit_code == 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--concurrency", "1,x"], "--concurrency is '1,x'; want comma-separated integers"),
        (
            ["--concurrency", "0"],
            "quick (with command-line overrides): grid.concurrency: values [0] are outside",
        ),
        (["--thinking", "on"], "grid.thinking names ['on'], which are not keys of thinking_modes"),
        (["--workload", "nope"], "workload 'nope': no file"),
        ([], "GET /v1/models failed"),  # nothing listens on the discard port
    ],
)
def test_bench_run_refuses_bad_arguments_before_sending_a_request(args: list[str], fragment: str) -> None:
    from sparkpair_cli.cmd_bench import register

    app = typer.Typer()
    register(app)
    base = ["bench", "--base-url", "http://127.0.0.1:9"]
    if "--workload" not in args:
        base.append("--quick")
    res = CliRunner().invoke(app, base + args, env={"COLUMNS": "300"})
    assert res.exit_code == 2, res.output
    assert fragment in " ".join(res.output.split())
