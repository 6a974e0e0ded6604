"""``sparkpair bench`` end to end against the real vLLM CPU server (tiny model; numbers meaningless, mechanics real).

The summaries in ``result.json`` are recounted here from the raw per-request records with
``statistics`` (independently of ``sparkpair_cli.bench.aggregate``), and cross-checked with
vLLM's own ``bench serve`` numbers and the server's own ``/metrics`` token counters.
"""

# ruff: noqa: E501
from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from sparkpair_cli.bench.server_metrics import parse_metrics

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

QUICK_BUDGET_S = 300.0
"""The issue's bar: ``--quick`` against the CPU demo server in under 5 minutes."""


def _bench_cmd(server: Any, out: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "sparkpair_cli.cmd_bench",
        "--base-url",
        server.base_url,
        "--out",
        str(out),
        *args,
    ]


def _server_counts(server: Any) -> dict[str, float]:
    """Finished and running requests, from the server's own /metrics (vllm:request_success_total, summed)."""
    text = httpx.get(server.base_url + "/metrics", timeout=10).text
    success = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vllm:request_success_total")
    )
    return {"success": success, "running": parse_metrics(text).get("requests_running", 0.0)}


def _q(values: list[float], p: int) -> float:
    """Independent percentile: statistics.quantiles, 'inclusive' (= linear interpolation)."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def recount(requests: list[dict[str, Any]], cell_id: str) -> dict[str, float]:
    """The headline numbers of one cell, recomputed from the raw records."""
    measured = [
        r for r in requests if r["cell_id"] == cell_id and r["phase"] == "measured" and not r["cancelled"]
    ]
    ok = [r for r in measured if r["success"]]
    assert ok, f"{cell_id}: no successful measured request to recount"
    begin = min(r["start_s"] for r in measured)
    end = max(r["start_s"] + r["latency_s"] for r in measured)
    tokens = sum(r["output_tokens"] for r in ok)
    ttft_ms = [1000 * r["ttft_s"] for r in ok]
    tpot_ms = [
        1000 * (r["latency_s"] - r["ttft_s"]) / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] > 1
    ]
    prefill = [r["prompt_tokens"] / r["ttft_s"] for r in ok]
    e2el = [r["latency_s"] for r in ok]
    itl_ms = [1000 * x for r in ok for x in r["itl_s"]]
    return {
        "completed": len(ok),
        "errors": len(measured) - len(ok),
        "output_tokens_total": tokens,
        "aggregate_output_tok_s": tokens / (end - begin),
        "ttft_p50": statistics.median(ttft_ms),
        "ttft_p90": _q(ttft_ms, 90),
        "ttft_mean": statistics.fmean(ttft_ms),
        "tpot_p50": statistics.median(tpot_ms),
        "tpot_mean": statistics.fmean(tpot_ms),
        "prefill_p50": statistics.median(prefill),
        "e2el_p99": _q(e2el, 99),
        "itl_p99": _q(itl_ms, 99),
    }


def assert_summary_matches_recount(result: dict[str, Any], cell: dict[str, Any]) -> None:
    s, r = cell["summary"], recount(result["requests"], cell["id"])
    approx = lambda x: pytest.approx(x, rel=1e-9)  # noqa: E731
    assert s["completed"] == r["completed"]
    assert s["errors"] == r["errors"]
    assert s["output_tokens_total"] == r["output_tokens_total"]
    assert s["aggregate_output_tok_s"] == approx(r["aggregate_output_tok_s"])
    assert s["ttft_ms"]["p50"] == approx(r["ttft_p50"])
    assert s["ttft_ms"]["p90"] == approx(r["ttft_p90"])
    assert s["ttft_ms"]["mean"] == approx(r["ttft_mean"])
    assert s["tpot_ms"]["p50"] == approx(r["tpot_p50"])
    assert s["tpot_ms"]["mean"] == approx(r["tpot_mean"])
    assert s["prefill_tok_s"]["p50"] == approx(r["prefill_p50"])
    assert s["e2el_s"]["p99"] == approx(r["e2el_p99"])
    assert s["itl_ms"]["p99"] == approx(r["itl_p99"])


def test_quick_completes_in_budget_and_its_summaries_match_a_recount_of_the_raw_records(
    vllm_server: Any, tmp_path: Path
) -> None:
    out = tmp_path / "quick"
    plan = vllm_server.env.get("SPARKPAIR_PLAN_PATH")
    t0 = time.monotonic()
    proc = subprocess.run(
        _bench_cmd(vllm_server, out, "--quick", "--image", "test-image:1", "--profile", "tiny-demo",
                   *(["--plan-file", plan] if plan else [])),
        capture_output=True, text=True, timeout=QUICK_BUDGET_S + 60,
    )  # fmt: skip
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, (
        f"rc {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
    )
    assert elapsed < QUICK_BUDGET_S, f"--quick took {elapsed:.0f} s; the bar is {QUICK_BUDGET_S:.0f} s"

    result = json.loads((out / "result.json").read_text())
    assert result["schema"] == "sparkpair.bench/1"
    assert result["status"] == "complete"
    wl = result["workload"]
    assert wl["name"] == "quick"

    # provenance: the server's own version, the model, the profile and image given, this host
    prov = result["provenance"]
    assert prov["endpoint"]["vllm_version"] == "0.32.0"
    assert prov["endpoint"]["served_model_name"] == "tiny"
    assert prov["endpoint"]["max_model_len"] == 2048
    assert prov["image"]["value"] == "test-image:1"
    assert prov["profile"]["name"] == "tiny-demo"
    assert prov["client_host"]["cpu_count"] >= 1 and prov["client_host"]["mem_total_bytes"] > 0
    assert prov["server_host"] == prov["client_host"]  # loopback endpoint
    if plan:
        assert prov["overlay_plan"]["source"] == plan
    assert prov["bench_client"]["vllm_version"] == "0.32.0"
    assert result["reference"]["source"].startswith("docs/reference/spark-deployments.md")

    # the grid ran: every cell complete with the number of requests it asked for
    cells = result["cells"]
    expected_ids = {
        f"ctx{c}-out{o}-c{u}-{t}" for c in wl["grid"]["context_tokens"] for o in wl["grid"]["output_tokens"]
        for u in wl["grid"]["concurrency"] for t in wl["grid"]["thinking"]
    }  # fmt: skip
    assert {c["id"] for c in cells} == expected_ids
    requests = result["requests"]
    all_prompts: set[str] = set()
    for cell in cells:
        assert cell["status"] == "complete", cell.get("error")
        mine = [r for r in requests if r["cell_id"] == cell["id"]]
        measured = [r for r in mine if r["phase"] == "measured"]
        warmup = [r for r in mine if r["phase"] == "warmup"]
        assert len(measured) == cell["num_requests"] == cell["concurrency"] * wl["requests_per_user"]
        assert len(warmup) == wl["warmup_requests"]
        assert all(r["success"] for r in mine), [r["error"] for r in mine if not r["success"]]
        # ignore_eos: every request generated exactly the output length asked for
        assert {r["output_tokens"] for r in measured} == {cell["output_tokens"]}
        assert all(r["output_tokens_source"] == "usage" for r in measured)
        # the prompt is the context length plus the chat template's few tokens
        assert all(
            cell["context_tokens"] <= r["prompt_tokens"] <= cell["context_tokens"] + 64 for r in measured
        )
        # distinct prompts everywhere: no prefix-cache hit between requests, cells or the warm-up
        digests = [r["prompt_sha256"] for r in mine]
        assert len(set(digests)) == len(digests) and not (set(digests) & all_prompts)
        all_prompts |= set(digests)
        # the summary excludes warm-up and matches an independent recount of the raw records
        assert_summary_matches_recount(result, cell)
        # ... and vLLM's own bench serve, which saw the same requests
        v = cell["vllm_bench"]["summary"]
        s = cell["summary"]
        assert v["completed"] == s["completed"] and v["failed"] == s["errors"] == 0
        assert v["total_output_tokens"] == s["output_tokens_total"]
        assert v["total_input_tokens"] == s["prompt_tokens_total"]
        assert v["median_ttft_ms"] == pytest.approx(s["ttft_ms"]["p50"], rel=1e-9)
        assert v["mean_tpot_ms"] == pytest.approx(s["tpot_ms"]["mean"], rel=1e-9)
        assert v["p99_e2el_ms"] == pytest.approx(s["e2el_s"]["p99"] * 1000, rel=1e-9)
        # the server counted the same tokens (its /metrics sampled around the measured phase only)
        sm = cell["server_metrics"]["summary"]
        assert sm["available"] is True
        assert sm["server_generation_tokens"] == s["output_tokens_total"]
        assert sm["server_prompt_tokens"] == s["prompt_tokens_total"]
        assert sm["preemptions"] == 0
        argv = cell["vllm_bench"]["argv"]
        assert argv[:3] == ["vllm", "bench", "serve"]
        # the thinking mode's chat_template_kwargs went out with every request
        extra = json.loads(argv[argv.index("--extra-body") + 1])
        assert extra["chat_template_kwargs"] == wl["thinking_modes"][cell["thinking"]]["chat_template_kwargs"]
        assert (out / "vllm" / f"{cell['id']}.measured.json").is_file()

    # the plots and the table
    for name in ("tokps_vs_concurrency.png", "ttft_vs_context.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000, name
    assert result["plots"] == ["tokps_vs_concurrency.png", "ttft_vs_context.png"]
    assert "ctx128-out24-c1-off" in proc.stdout and "complete" in proc.stdout


def test_ctrl_c_leaves_partial_results_that_still_add_up(vllm_server: Any, tmp_path: Path) -> None:
    # cell 1 is short; cell 2 (80 requests x 256 tokens, 2 at a time) is still running when Ctrl-C
    # comes: the signal goes out 1.5 s after the server has finished 2 of its requests. (With 16
    # requests a fast machine was on the last two when the signal landed; with 32, a CI run
    # finished the whole cell before the signal.)
    wl = tmp_path / "interrupt.yaml"
    wl.write_text(
        "name: interrupt\nseed: 3\nrequests_per_user: 40\nwarmup_requests: 0\nmetrics_interval_s: 0.5\n"
        "grid: {context_tokens: [64], output_tokens: [16, 256], concurrency: [2]}\n"
    )
    out = tmp_path / "partial"
    proc = subprocess.Popen(
        _bench_cmd(vllm_server, out, "--workload", str(wl)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        result_path = out / "result.json"
        deadline = time.monotonic() + 240
        first_done = False
        while time.monotonic() < deadline and proc.poll() is None:
            if result_path.is_file():
                try:
                    cells = json.loads(result_path.read_text())["cells"]
                except ValueError:
                    cells = []
                if cells and cells[0]["status"] == "complete":
                    first_done = True
                    break
            time.sleep(0.3)
        assert first_done, (
            f"first cell did not complete in time (rc {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}"
        )
        # wait (on the server's own counters) until 2 of cell 2's requests have finished and more are running
        base = _server_counts(vllm_server)["success"]
        counts = {"success": base, "running": 0.0}
        while time.monotonic() < deadline and proc.poll() is None:
            counts = _server_counts(vllm_server)
            if counts["success"] >= base + 2 and counts["running"] >= 1:
                break
            time.sleep(0.2)
        time.sleep(1.5)  # the client records those completions too
        assert proc.poll() is None, (
            f"the run ended before it could be interrupted (server counts at cell 1's end {base}, "
            f"last seen {counts}); make cell 2 longer"
        )
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, f"rc {proc.returncode}\n{stderr[-3000:]}"
    assert "partial results saved to" in stderr

    result = json.loads(result_path.read_text())
    assert result["status"] == "interrupted"
    c1, c2 = result["cells"]
    assert (c1["id"], c2["id"]) == ("ctx64-out16-c2-off", "ctx64-out256-c2-off")
    assert c1["status"] == "complete" and c2["status"] == "interrupted"
    assert_summary_matches_recount(result, c1)
    recs2 = [r for r in result["requests"] if r["cell_id"] == c2["id"]]
    done2 = [r for r in recs2 if not r["cancelled"]]
    cancelled2 = [r for r in recs2 if r["cancelled"]]
    # the requests in flight at Ctrl-C are recorded as cancelled, not as errors, and not summarized
    assert 1 <= len(cancelled2) <= 2
    assert all(r["error"].startswith("cancelled") for r in cancelled2)
    assert len(recs2) <= c2["num_requests"] and len(done2) < c2["num_requests"]
    assert c2["summary"]["cancelled"] == len(cancelled2)
    assert c2["summary"]["errors"] == 0
    assert len(done2) >= 2 and all(r["success"] for r in done2)
    assert c2["summary"]["completed"] == len(done2)
    assert_summary_matches_recount(result, c2)
    assert c2["server_metrics"]["summary"]["available"] is True
    # plots are still drawn from what was measured, marked partial
    assert (out / "tokps_vs_concurrency.png").stat().st_size > 50_000
    assert (out / "ttft_vs_context.png").stat().st_size > 50_000
    # the server is still healthy for the next test
    assert httpx.get(vllm_server.base_url + "/health", timeout=10).status_code == 200
