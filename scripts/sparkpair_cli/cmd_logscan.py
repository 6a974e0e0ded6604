# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair logscan FILE|-``: match vLLM / NCCL / Ray / kernel logs against the field-bug catalogue.

Exit codes: 0 no fatal finding; 1 a fatal finding; 3 a file cannot be read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table


def register(app: typer.Typer) -> None:
    """Add ``sparkpair logscan`` to ``app``."""

    @app.command()
    def logscan(
        files: list[str] = typer.Argument(..., help="log files to scan; '-' reads standard input"),
        json_out: Path = typer.Option(None, "--json", help="also write the findings as JSON here"),
        catalogue: bool = typer.Option(False, help="print the pattern catalogue and exit"),
    ) -> None:
        """Scan logs for known failure signatures; exit 1 on a fatal finding."""
        from sparkpair_health.logscan import CATALOGUE, scan_lines

        console = Console()
        if catalogue:
            t = Table(title="sparkpair log-scan catalogue")
            for col in ("id", "severity", "bug", "meaning", "fix"):
                t.add_column(col, overflow="fold")
            for p in CATALOGUE:
                sev = p.severity + (f" (>= {p.threshold})" if p.severity == "fatal-if-repeated" else "")
                t.add_row(p.id, sev, p.bug, p.meaning, p.fix)
            console.print(t)
            raise typer.Exit(0)
        fatal = False
        for name in files:
            try:
                if name == "-":
                    result = scan_lines(sys.stdin)
                else:
                    with open(name, encoding="utf-8", errors="replace") as fh:
                        result = scan_lines(fh)
            except OSError as e:
                console.print(f"[red]logscan: cannot read {name}: {e.strerror}[/]")
                raise typer.Exit(3) from None
            fatal = fatal or result.fatal
            label = "stdin" if name == "-" else name
            if not result.findings:
                console.print(f"{label}: {result.lines} lines, no known failure signature")
            else:
                t = Table(title=f"{label}: {result.lines} lines")
                for col in ("severity", "id", "bug", "count", "first line", "meaning / fix"):
                    t.add_column(col, overflow="fold")
                for f in result.findings:
                    style = "bold red" if f.severity == "fatal" else "yellow"
                    t.add_row(
                        f"[{style}]{f.severity}[/]",
                        f.pattern.id,
                        f.pattern.bug,
                        str(f.count),
                        f"{f.first_line_no}: {f.samples[0][:160]}",
                        f"{f.pattern.meaning}. Fix: {f.pattern.fix}",
                    )
                console.print(t)
            for note in result.notes:
                console.print(f"[yellow]note:[/] {note}")
            if json_out:
                out = (
                    json_out
                    if len(files) == 1
                    else json_out.with_name(f"{json_out.stem}-{Path(label).name}.json")
                )
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(result.to_json())
        console.print("[bold red]FATAL findings[/]" if fatal else "[green]no fatal finding[/]")
        raise typer.Exit(1 if fatal else 0)
