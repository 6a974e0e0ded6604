"""PNG plots of a result, with the field's reference figures drawn alongside.

- ``tokps_vs_concurrency.png``: aggregate output tok/s and per-user decode tok/s (p50)
  against concurrency, one line per (context, output, thinking) group of the run;
- ``ttft_vs_context.png``: TTFT (p50, seconds) and prefill tok/s (p50) against context
  length, one line per (concurrency, output, thinking) group;
- ``acceptance_vs_concurrency.png`` (only when the server counted speculative drafts): the
  acceptance rate per cell from the server's counters, beside the field's DSpark figures.

Reference figures (:mod:`.reference`) are grey-scale-free coloured markers with range bars;
prefill ranges are also drawn on the TTFT panel as bands ``TTFT = context / rate``. Both
axes are logarithmic: a CPU test server and a GB10 pair differ by orders of magnitude.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from sparkpair_cli.bench import reference
from sparkpair_cli.bench.aggregate import is_bunched

_REF_MARKERS = "osD^vP*Xhp<>"


def _mpl() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cells_with_summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in result.get("cells", []) if c.get("summary") and c["summary"].get("completed")]


def _title(result: dict[str, Any], what: str) -> str:
    ep = result.get("provenance", {}).get("endpoint", {})
    wl = result.get("workload", {}).get("name", "?")
    status = result.get("status")
    partial = " [PARTIAL: run interrupted]" if status == "interrupted" else ""
    return (
        f"{what} — workload {wl!r}, model {ep.get('served_model_name')!r} at {ep.get('base_url')} "
        f"(vLLM {ep.get('vllm_version')}){partial}\n"
        f"field figures: DeepSeek-V4-Flash on 2x GB10, TP=2 (source: {reference.FIELD_NOTES})"
    )


def _ref_styles() -> dict[str, tuple[str, Any]]:
    """One (marker, colour) per reference stack, stable across plots."""
    plt = _mpl()
    cmap = plt.get_cmap("tab20b")
    stacks = sorted({f.stack for f in reference.FIGURES})
    return {
        s: (_REF_MARKERS[i % len(_REF_MARKERS)], cmap(i / max(1, len(stacks) - 1)))
        for i, s in enumerate(stacks)
    }


def _draw_refs_vs_concurrency(ax: Any, metric: str, styles: dict[str, tuple[str, Any]]) -> None:
    figs = [f for f in reference.figures(metric) if f.concurrency is not None]
    count: dict[int, int] = defaultdict(int)
    for f in figs:
        count[f.concurrency] += 1  # type: ignore[index]
    seen: dict[int, int] = defaultdict(int)
    for f in figs:
        conc = f.concurrency or 1
        k = seen[conc]
        seen[conc] += 1
        x = conc * 2 ** (0.04 * (k - (count[conc] - 1) / 2))  # spread figures at one concurrency, centred
        mid = (f.low + f.high) / 2
        marker, color = styles[f.stack]
        ax.errorbar(
            [x], [mid], yerr=[[mid - f.low], [f.high - mid]], fmt=marker, color=color, ecolor=color,
            markersize=7, capsize=3, alpha=0.85, label=f"[field] {f.label} ({f.source})",
        )  # fmt: skip


def _run_line(ax: Any, xs: list[float], ys: list[float], label: str, i: int, partial: bool) -> None:
    ax.plot(
        xs, ys, "-", marker="o" if not partial else "x", linewidth=2.2, markersize=8,
        color=f"C{i % 10}", label=f"this run: {label}" + (" (partial)" if partial else ""),
    )  # fmt: skip
    for x, y in zip(xs, ys, strict=True):
        ax.annotate(
            f"{y:.3g}", (x, y), textcoords="offset points", xytext=(4, 6), fontsize=7, color=f"C{i % 10}"
        )


def plot_tokps_vs_concurrency(result: dict[str, Any], path: Path) -> Path:
    """Write the tok/s-vs-concurrency figure (two panels) to ``path``; return it."""
    plt = _mpl()
    styles = _ref_styles()
    fig, axes = plt.subplots(2, 1, figsize=(15, 12))
    groups: dict[tuple[int, int, str], list[dict[str, Any]]] = defaultdict(list)
    for c in _cells_with_summary(result):
        groups[(c["context_tokens"], c["output_tokens"], c["thinking"])].append(c)
    panels = (
        (
            axes[0],
            "aggregate_output_tok_s",
            "aggregate output tok/s (all users)",
            lambda s: s["aggregate_output_tok_s"],
        ),
        (
            axes[1],
            "per_user_decode_tok_s",
            "per-user decode tok/s (p50)",
            lambda s: s["per_user_decode_tok_s"]["p50"],
        ),
    )
    for ax, metric, ylabel, get in panels:
        for i, ((ctx, out, thinking), cells) in enumerate(sorted(groups.items())):
            pts = sorted((c["concurrency"], get(c["summary"]), c["status"]) for c in cells)
            pts = [p for p in pts if p[1] is not None]
            if pts:
                _run_line(
                    ax, [p[0] for p in pts], [p[1] for p in pts],
                    f"ctx {ctx}, out {out}, thinking {thinking}", i, any(p[2] != "complete" for p in pts),
                )  # fmt: skip
        if metric == "per_user_decode_tok_s":
            flagged = [
                (c["concurrency"], c["summary"]["per_user_decode_tok_s"]["p50"])
                for c in _cells_with_summary(result)
                if is_bunched(c["summary"]) and c["summary"]["per_user_decode_tok_s"]["p50"] is not None
            ]
            if flagged:
                why = "this run: stream came in bursts (most token gaps < 1 ms): decode tok/s not meaningful"
                xs, ys = [f[0] for f in flagged], [f[1] for f in flagged]
                ax.plot(xs, ys, "o", markersize=16, markerfacecolor="none", markeredgecolor="red",
                        markeredgewidth=1.8, label=why)  # fmt: skip
        _draw_refs_vs_concurrency(ax, metric, styles)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("concurrency (users in flight)")
        ax.set_ylabel(ylabel)
        ticks = sorted({c["concurrency"] for c in result.get("cells", [])} | {1, 2, 4, 6, 8, 16, 32})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax.set_title(ylabel, fontsize=10)
    fig.suptitle(_title(result, "tok/s vs concurrency"), fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_ttft_vs_context(result: dict[str, Any], path: Path) -> Path:
    """Write the TTFT/prefill-vs-context figure (two panels) to ``path``; return it."""
    plt = _mpl()
    styles = _ref_styles()
    fig, axes = plt.subplots(2, 1, figsize=(15, 12))
    groups: dict[tuple[int, int, str], list[dict[str, Any]]] = defaultdict(list)
    for c in _cells_with_summary(result):
        groups[(c["concurrency"], c["output_tokens"], c["thinking"])].append(c)
    span = (1024, 1_048_576)
    panels = (
        (axes[0], "ttft_s", "time to first token, p50 (s)", lambda s: _div(s["ttft_ms"]["p50"], 1000.0)),
        (
            axes[1],
            "prefill_tok_s",
            "prefill tok/s, p50 (prompt tokens / TTFT)",
            lambda s: s["prefill_tok_s"]["p50"],
        ),
    )
    for ax, metric, ylabel, get in panels:
        for i, ((conc, out, thinking), cells) in enumerate(sorted(groups.items())):
            pts = sorted(
                (
                    c["summary"]["prompt_tokens_total"] / max(1, c["summary"]["completed"]),
                    get(c["summary"]),
                    c["status"],
                )
                for c in cells
            )
            pts = [p for p in pts if p[1] is not None]
            if pts:
                label = f"concurrency {conc}, out {out}, thinking {thinking}"
                partial = any(p[2] != "complete" for p in pts)
                _run_line(ax, [p[0] for p in pts], [p[1] for p in pts], label, i, partial)
        for f in reference.figures("prefill_tok_s"):
            marker, color = styles[f.stack]
            lo_x, hi_x = f.context_tokens or span
            if metric == "ttft_s":
                if lo_x == hi_x:
                    continue  # single-context prefill figures are drawn as TTFT points below
                xs = [lo_x, hi_x]
                ax.fill_between(
                    xs, [x / f.high for x in xs], [x / f.low for x in xs], color=color, alpha=0.18,
                    label=f"[field] TTFT at {f.low:g}-{f.high:g} prefill tok/s: {f.stack} ({f.source}"
                    + ("" if f.context_tokens else "; context not stated, drawn 1K-1M") + ")",
                )  # fmt: skip
            elif lo_x == hi_x:
                mid = (f.low + f.high) / 2
                ax.errorbar([lo_x], [mid], yerr=[[mid - f.low], [f.high - mid]], fmt=marker, color=color,
                            markersize=7, capsize=3, label=f"[field] {f.label} ({f.source})")  # fmt: skip
            else:
                where = "" if f.context_tokens else "; context not stated, drawn 1K-1M"
                ax.fill_between([lo_x, hi_x], [f.low] * 2, [f.high] * 2, color=color, alpha=0.25,
                                label=f"[field] {f.label} ({f.source}{where})")  # fmt: skip
        if metric == "ttft_s":
            for f in reference.figures("ttft_s"):
                marker, color = styles[f.stack]
                x = f.context_tokens[0] if f.context_tokens else span[1]
                ax.plot(
                    [x],
                    [f.low],
                    marker,
                    color=color,
                    markersize=8,
                    label=f"[field] TTFT {f.label} ({f.source})",
                )
            has_ttft = {(f.stack, f.context_tokens) for f in reference.figures("ttft_s")}
            for f in reference.figures("prefill_tok_s"):
                if (f.stack, f.context_tokens) in has_ttft:
                    continue  # the same measurement, already drawn as a TTFT point
                if f.context_tokens and f.context_tokens[0] == f.context_tokens[1]:
                    marker, color = styles[f.stack]
                    x = f.context_tokens[0]
                    ax.plot([x], [x / f.low], marker, color=color, markersize=8,
                            label=f"[field] TTFT from {f.label} ({f.source})")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("prompt tokens (mean per request, as the server counted them)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        ax.set_title(ylabel, fontsize=10)
    fig.suptitle(_title(result, "TTFT and prefill vs context"), fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _div(x: float | None, d: float) -> float | None:
    return None if x is None else x / d


def _acceptance(c: dict[str, Any]) -> float | None:
    return ((c.get("server_metrics") or {}).get("summary") or {}).get("spec_acceptance_rate")


def plot_acceptance_vs_concurrency(result: dict[str, Any], path: Path) -> Path:
    """Write the acceptance-rate-vs-concurrency figure (server counters per cell) to ``path``."""
    plt = _mpl()
    styles = _ref_styles()
    fig, ax = plt.subplots(1, 1, figsize=(15, 6))
    groups: dict[tuple[int, int, str], list[dict[str, Any]]] = defaultdict(list)
    for c in result.get("cells", []):
        if _acceptance(c) is not None:
            groups[(c["context_tokens"], c["output_tokens"], c["thinking"])].append(c)
    for i, ((ctx, out, thinking), cells) in enumerate(sorted(groups.items())):
        pts = sorted((c["concurrency"], _acceptance(c), c.get("status")) for c in cells)
        _run_line(
            ax, [p[0] for p in pts], [p[1] for p in pts],  # type: ignore[misc]
            f"ctx {ctx}, out {out}, thinking {thinking}", i, any(p[2] != "complete" for p in pts),
        )  # fmt: skip
    _draw_refs_vs_concurrency(ax, "spec_acceptance_rate", styles)
    ax.set_xscale("log", base=2)
    ax.set_ylim(0.0, 1.05)
    ax.set_xlabel("concurrency (users in flight)")
    ax.set_ylabel("acceptance rate (accepted / drafted tokens)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(_title(result, "speculative acceptance vs concurrency"), fontsize=9.5)
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def write_plots(result: dict[str, Any], out_dir: Path) -> list[Path]:
    """Write the figures into ``out_dir`` (the acceptance one only when a cell has a rate);
    return their paths."""
    paths = [
        plot_tokps_vs_concurrency(result, out_dir / "tokps_vs_concurrency.png"),
        plot_ttft_vs_context(result, out_dir / "ttft_vs_context.png"),
    ]
    if any(_acceptance(c) is not None for c in result.get("cells", [])):
        paths.append(plot_acceptance_vs_concurrency(result, out_dir / "acceptance_vs_concurrency.png"))
    return paths
