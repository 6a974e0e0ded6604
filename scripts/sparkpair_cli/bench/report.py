"""Rich tables of a result, and ``compare`` of two result files.

``compare`` matches cells by id (context, output, concurrency, thinking) and prints, for
each headline metric, A, B and the ratio B/A; a cell present in only one file is listed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sparkpair_cli.bench.aggregate import is_bunched
from sparkpair_cli.bench.runner import RESULT_SCHEMA

# (label, unit, path into a cell summary, higher_is_better)
METRICS: tuple[tuple[str, str, tuple[str, ...], bool], ...] = (
    ("aggregate out", "tok/s", ("aggregate_output_tok_s",), True),
    ("per-user decode p50", "tok/s", ("per_user_decode_tok_s", "p50"), True),
    ("prefill p50", "tok/s", ("prefill_tok_s", "p50"), True),
    ("TTFT p50", "ms", ("ttft_ms", "p50"), False),
    ("TTFT p99", "ms", ("ttft_ms", "p99"), False),
    ("TPOT p50", "ms", ("tpot_ms", "p50"), False),
    ("ITL p99", "ms", ("itl_ms", "p99"), False),
    ("latency p50", "s", ("e2el_s", "p50"), False),
    ("latency p99", "s", ("e2el_s", "p99"), False),
)


class ResultFileError(ValueError):
    """A file is not a sparkpair bench result."""


def load_result(path: Path) -> dict[str, Any]:
    """Read a result JSON.

    Raises:
        ResultFileError: missing, not JSON, or ``schema`` is not :data:`RESULT_SCHEMA`.
    """
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ResultFileError(f"{path}: cannot read ({e.strerror})") from None
    except ValueError as e:
        raise ResultFileError(f"{path}: not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ResultFileError(
            f"{path}: top level is a JSON {type(data).__name__}; wanted an object with schema "
            f"{RESULT_SCHEMA!r} (a sparkpair bench result.json)"
        )
    if data.get("schema") != RESULT_SCHEMA:
        seen = data.get("schema")
        raise ResultFileError(
            f"{path}: schema is {seen!r}; want {RESULT_SCHEMA!r} (a sparkpair bench result.json)"
        )
    return data


def metric_value(summary: dict[str, Any] | None, path: tuple[str, ...]) -> float | None:
    """The value at ``path`` in a cell summary, or ``None``."""
    cur: Any = summary
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return float(cur) if isinstance(cur, (int, float)) else None


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def result_table(result: dict[str, Any]) -> Table:
    """One row per cell: status, requests, errors, and the headline metrics."""
    ep = result.get("provenance", {}).get("endpoint", {})
    t = Table(
        title=f"sparkpair bench — {result.get('workload', {}).get('name')} on {ep.get('served_model_name')} "
        f"({ep.get('base_url')}, vLLM {ep.get('vllm_version')}) — {result.get('status')}",
        title_justify="left",
    )
    ids = [c["id"] for c in result.get("cells", [])]
    t.add_column("cell", no_wrap=True, min_width=max((len(i) for i in ids), default=4))
    t.add_column("status")
    t.add_column("ok/req", justify="right")
    t.add_column("err", justify="right")
    for label, unit, _, _ in METRICS:
        t.add_column(f"{label}\n{unit}", justify="right")
    t.add_column("KV max\n%", justify="right")
    t.add_column("preempt", justify="right")
    t.add_column("spec acc\n%", justify="right")
    t.add_column("acc len\ntok", justify="right")
    for c in result.get("cells", []):
        s = c.get("summary") or {}
        sm = (c.get("server_metrics") or {}).get("summary") or {}
        status = c.get("status", "?")
        style = {"complete": "green", "interrupted": "yellow", "failed": "red"}.get(status, "dim")
        kv = sm.get("kv_cache_usage_max")
        acc = sm.get("spec_acceptance_rate")
        t.add_row(
            c["id"],
            f"[{style}]{status}[/{style}]",
            f"{s.get('completed', 0)}/{c.get('num_requests')}",
            f"[red]{s['errors']}[/red]" if s.get("errors") else str(s.get("errors", "-")),
            *[_fmt(metric_value(s, path)) for _, _, path, _ in METRICS],
            _fmt(kv * 100 if kv is not None else None),
            _fmt(sm.get("preemptions")),
            _fmt(acc * 100 if acc is not None else None),
            _fmt(sm.get("spec_acceptance_length")),
        )
    return t


def print_result(result: dict[str, Any], console: Console) -> None:
    """Print the result table and any failed cell's error."""
    console.print(result_table(result))
    for c in result.get("cells", []):
        if c.get("status") == "failed":
            console.print(f"[red]{c['id']} failed:[/red] {c.get('error')}")
    bunched = [c["id"] for c in result.get("cells", []) if c.get("summary") and is_bunched(c["summary"])]
    if bunched:
        console.print(
            f"[yellow]streams arrived in bursts (most token gaps < 1 ms) in {', '.join(bunched)}: "
            "ITL and per-user decode tok/s there describe the bursts, not the model "
            "(an overloaded API server); TTFT and aggregate tok/s are still right.[/yellow]"
        )


def compare_table(a: dict[str, Any], b: dict[str, Any], a_name: str, b_name: str) -> tuple[Table, list[str]]:
    """Table of A, B and B/A per matched cell and metric; also the ids found in only one file.

    A ratio is marked green when B is better (higher tok/s, lower latency), red when worse by
    more than 5 %.
    """
    cells_a = {c["id"]: c for c in a.get("cells", [])}
    cells_b = {c["id"]: c for c in b.get("cells", [])}
    t = Table(title=f"A = {a_name}\nB = {b_name}", title_justify="left")
    t.add_column("cell", no_wrap=True, min_width=max((len(i) for i in cells_a), default=4))
    t.add_column("metric")
    t.add_column("unit")
    t.add_column("A", justify="right")
    t.add_column("B", justify="right")
    t.add_column("B/A", justify="right")
    common = [cid for cid in cells_a if cid in cells_b]
    for cid in common:
        sa, sb = cells_a[cid].get("summary"), cells_b[cid].get("summary")
        for i, (label, unit, path, higher_better) in enumerate(METRICS):
            va, vb = metric_value(sa, path), metric_value(sb, path)
            ratio = vb / va if va not in (None, 0.0) and vb is not None else None
            if ratio is None:
                r = "-"
            else:
                better = ratio > 1.0 if higher_better else ratio < 1.0
                worse = ratio < 0.95 if higher_better else ratio > 1.05
                style = "green" if better else ("red" if worse else "")
                r = f"[{style}]{ratio:.3f}[/{style}]" if style else f"{ratio:.3f}"
            t.add_row(
                cid if i == 0 else "", label, unit, _fmt(va), _fmt(vb), r, end_section=i == len(METRICS) - 1
            )
    only = [f"only in A: {cid}" for cid in cells_a if cid not in cells_b]
    only += [f"only in B: {cid}" for cid in cells_b if cid not in cells_a]
    return t, only


def provenance_diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, A, B) for the provenance fields that differ between two results."""

    def pick(r: dict[str, Any]) -> dict[str, Any]:
        p = r.get("provenance", {})
        plan = (p.get("overlay_plan") or {}).get("plan")
        return {
            "workload": r.get("workload", {}).get("name"),
            "status": r.get("status"),
            "model": p.get("endpoint", {}).get("served_model_name"),
            "vllm_version": p.get("endpoint", {}).get("vllm_version"),
            "image": (p.get("image") or {}).get("value"),
            "overlay_plan": json.dumps(plan, sort_keys=True)[:80] if plan is not None else None,
            "profile": (p.get("profile") or {}).get("name"),
            "driver": (p.get("server_host") or {}).get("driver_version"),
            "sparkpair_git": (p.get("sparkpair") or {}).get("git_sha"),
        }

    pa, pb = pick(a), pick(b)
    return [(k, pa[k], pb[k]) for k in pa if pa[k] != pb[k]]
