"""The bench draws the measured acceptance rate per cell beside the field's DSpark figures."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from sparkpair_cli.bench import reference
from sparkpair_cli.bench.plots import plot_acceptance_vs_concurrency
from sparkpair_cli.bench.report import result_table


def _cell(conc: int, rate: float | None, length: float | None) -> dict:
    return {
        "id": f"c{conc}",
        "context_tokens": 256,
        "output_tokens": 64,
        "thinking": "off",
        "concurrency": conc,
        "status": "complete",
        "num_requests": 2,
        "summary": {"completed": 2, "errors": 0},
        "server_metrics": {"summary": {"spec_acceptance_rate": rate, "spec_acceptance_length": length}},
    }


def test_the_field_dspark_acceptance_figures_are_in_the_reference_set() -> None:
    got = {(f.low, f.high, f.note) for f in reference.figures("spec_acceptance_rate")}
    assert (0.73, 0.73, "DSpark k=5, chat") in got and (0.15, 0.22, "DSpark k=5, tool calls") in got


def test_the_acceptance_plot_and_table_show_each_cells_rate_and_mean_accepted_length(tmp_path: Path) -> None:
    result = {"cells": [_cell(1, 0.71, 4.55), _cell(4, 0.62, 4.1)], "status": "complete"}
    p = plot_acceptance_vs_concurrency(result, tmp_path / "a.png")
    assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    console = Console(width=400, record=True)
    console.print(result_table(result))
    text = console.export_text()
    assert "acc len" in text and "4.55" in text and "71" in text, text
