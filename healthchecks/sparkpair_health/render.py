"""Terminal output of the health suite (rich): live progress and the result table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .report import Report

STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow", "error": "bold magenta"}

WAIT_LINE_S = 15.0
"""Seconds between "still waiting" lines when the output is not a terminal (as the demo does)."""


@contextmanager
def live_progress(console: Console) -> Iterator[Callable[[str, str], None]]:
    """A progress callback (``on_progress(event, detail)``) that shows a spinner line on ``console``.

    Shows the readiness stage while waiting and the running check during the suite; prints
    one line per finished check, and the abort reason when the engine dies.
    """
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("health: waiting for readiness", total=None)
        said_at = [time.monotonic()]

        def on_progress(event: str, detail: str) -> None:
            # Details come from the server and the network: never read as Rich markup.
            if event == "ready-wait":
                progress.update(task, description=f"health: waiting for readiness: {escape(detail)}")
                # Without a terminal the spinner shows nothing: a line every WAIT_LINE_S instead.
                if not console.is_terminal and time.monotonic() - said_at[0] >= WAIT_LINE_S:
                    said_at[0] = time.monotonic()
                    console.print(f"health: still waiting for readiness: {escape(detail)}", highlight=False)
            elif event == "ready":
                console.print(f"[green]ready[/]: {escape(detail)}")
            elif event == "check-start":
                progress.update(task, description=f"health: running check {escape(detail)}")
            elif event == "check-done":
                cid, status, *rest = detail.split(" ")
                console.print(
                    f"  [{STYLE.get(status, '')}]{escape(status):5}[/] {escape(cid)} {escape(' '.join(rest))}"
                )
            elif event == "aborted":
                console.print(f"[bold red]suite aborted: {escape(detail)}[/]")

        yield on_progress


def render_report(report: Report, console: Console) -> None:
    """Print the verdict table (one row per check: status, latency ms, message) and the summary."""
    t = Table(title=f"sparkpair health: {report.profile} @ {report.base_url} ({report.served_model_name})")
    t.add_column("check")
    t.add_column("status")
    t.add_column("ms", justify="right")
    t.add_column("evidence / reason", overflow="fold")
    if report.ready is not None:
        st = "pass" if report.ready.ready else "error"
        t.add_row(
            "readiness",
            f"[{STYLE[st]}]{st}[/]",
            f"{report.ready.waited_s * 1000:.0f}",
            escape(report.ready.detail),
        )
    for c in report.checks:
        t.add_row(escape(c.id), f"[{STYLE[c.status]}]{c.status}[/]", f"{c.latency_ms:.0f}", escape(c.message))
    console.print(t)
    if report.overlay_plan is not None:
        plan = report.overlay_plan
        line = plan.get("line") if isinstance(plan, dict) else None
        shown = line if isinstance(line, str) else json.dumps(plan)[:2000]
        console.print(f"overlay plan ({escape(report.overlay_plan_note)}; full JSON in the report):")
        console.print(f"  {escape(shown)}", soft_wrap=True)
    elif report.overlay_plan_note:
        console.print(f"overlay plan: {escape(report.overlay_plan_note)}")
    n = report.counts()
    summary = "checks: " + ", ".join(f"{v} {k}" for k, v in n.items() if v)
    if report.ready is not None and report.ready.ready:
        summary = "readiness pass; " + summary  # the table's readiness row is not a suite check
    if report.aborted:
        console.print(f"[bold red]FAILED: {escape(report.aborted)}[/]")
    elif report.ready is not None and not report.ready.ready:
        console.print(f"[bold red]FAILED: server not ready: {escape(report.ready.detail)}[/]")
    elif report.passed:
        console.print(f"[bold green]PASSED[/] ({summary}) in {report.duration_s:.1f} s")
    else:
        console.print(f"[bold red]FAILED[/] ({summary}) in {report.duration_s:.1f} s")
