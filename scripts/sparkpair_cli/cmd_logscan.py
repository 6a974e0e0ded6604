# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair logscan FILE|-``: match vLLM / NCCL / Ray / kernel logs against the field-bug catalogue.

Exit codes: 0 no fatal finding; 1 a fatal finding; 3 a file cannot be read, is not a
regular file (a FIFO, a device such as ``/dev/zero``: pipe it into ``-`` instead), is empty,
is not text (binary or compressed), or ``--json`` cannot be written.

Every line is scanned up to ``LINE_LIMIT_BYTES`` (64 KiB); a note says how many were cut.
Log text and file names are printed as plain text, never as Rich markup.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

SNIFF_BYTES = 8192
"""Bytes at the start of an input checked for binary content (a NUL byte, gzip/zstd magic)."""

_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ": "xz"}


class NotText(ValueError):
    """An input to scan is empty, compressed or binary; the message says which and what was wanted."""


def text_lines(raw: Iterable[bytes], label: str, stats: dict[str, int]) -> Iterator[str]:
    """Decode ``raw`` (binary lines) as UTF-8 (undecodable bytes replaced), refusing binary data.

    ``stats["bytes"]`` counts the bytes read.

    Raises:
        NotText: compressed data (gzip, zstd, bzip2, xz magic at offset 0) or a NUL byte in
            the first :data:`SNIFF_BYTES` bytes.
    """
    stats["bytes"] = 0
    for bline in raw:
        start = stats["bytes"]
        if start < SNIFF_BYTES:
            if start == 0:
                for magic, kind in _MAGIC.items():
                    if bline.startswith(magic):
                        raise NotText(
                            f"{label}: {kind}-compressed data; wanted a text log "
                            f"(decompress it first, e.g. `zcat FILE | sparkpair logscan -`)"
                        )
            nul = bline.find(b"\0", 0, SNIFF_BYTES - start)
            if nul >= 0:
                raise NotText(f"{label}: binary data (a NUL byte at offset {start + nul}); wanted a text log")
        stats["bytes"] = start + len(bline)
        text = bline.decode("utf-8", errors="replace")
        if "\r" in text:  # universal newlines, as a text-mode open() reads them (progress bars)
            yield from text.replace("\r\n", "\n").replace("\r", "\n").splitlines(keepends=True)
        else:
            yield text


def json_targets(json_out: Path, labels: list[str]) -> list[Path]:
    """Where ``--json`` writes each input's findings: ``json_out`` for one input, else
    ``<stem>-<name>.json`` per input, numbered where two inputs share a name (no overwrite).
    """
    if len(labels) == 1:
        return [json_out]
    names = [Path(label).name for label in labels]
    out = []
    for i, name in enumerate(names):
        tag = name if names.count(name) == 1 else f"{i + 1}-{name}"
        out.append(json_out.with_name(f"{json_out.stem}-{tag}.json"))
    return out


def register(app: typer.Typer) -> None:
    """Add ``sparkpair logscan`` to ``app``."""

    @app.command()
    def logscan(
        files: list[str] = typer.Argument(None, help="log files to scan; '-' reads standard input"),
        json_out: Path = typer.Option(None, "--json", help="also write the findings as JSON here"),
        catalogue: bool = typer.Option(False, help="print the pattern catalogue and exit"),
    ) -> None:
        """Scan logs for known failure signatures; exit 1 on a fatal finding."""
        from sparkpair_health.logscan import CATALOGUE, bounded_lines, scan_lines, truncation_note

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
        from sparkpair_serving.inputs import check_output_file, open_regular_file

        if not files:
            console.print(
                "sparkpair logscan: no FILE given; wanted log files, '-' for standard input, or --catalogue"
            )
            raise typer.Exit(2)
        labels = ["stdin" if name == "-" else name for name in files]
        if files.count("-") > 1:
            console.print(
                "[red]logscan: '-' (standard input) given more than once; wanted it at most once[/]"
            )
            raise typer.Exit(3)
        targets: list[Path] = []
        if json_out:
            targets = json_targets(json_out, labels)
            try:
                for t in targets:
                    check_output_file(t, "--json")
            except ValueError as e:
                console.print(f"[red]logscan: {escape(str(e))}[/]", soft_wrap=True)
                raise typer.Exit(3) from None
        fatal = False
        for i, name in enumerate(files):
            label = labels[i]
            stats: dict[str, int] = {}
            try:
                if name == "-":
                    stream: BinaryIO = sys.stdin.buffer
                    result = scan_lines(text_lines(bounded_lines(stream, stats), label, stats))
                else:
                    try:
                        fh = open_regular_file(name)
                    except ValueError:
                        raise NotText(
                            f"{name}: not a regular file (a folder, device, FIFO or socket); wanted a "
                            f"log file, or '-' with the data piped in (e.g. `cat FIFO | sparkpair logscan -`)"
                        ) from None
                    with fh:
                        result = scan_lines(text_lines(bounded_lines(fh, stats), label, stats))
            except OSError as e:
                console.print(
                    f"[red]logscan: cannot read {escape(name)}: {escape(str(e.strerror or e))}[/]",
                    soft_wrap=True,
                )
                raise typer.Exit(3) from None
            except NotText as e:
                console.print(f"[red]logscan: {escape(str(e))}[/]", soft_wrap=True)
                raise typer.Exit(3) from None
            if note := truncation_note(stats):
                result.notes.append(f"{label}: {note}")
            if stats.get("bytes", 0) == 0:
                console.print(
                    f"[red]logscan: {escape(label)}: empty (0 bytes), nothing scanned; wanted a log "
                    "(did the command feeding it fail?)[/]",
                    soft_wrap=True,
                )
                raise typer.Exit(3)
            fatal = fatal or result.fatal
            if not result.findings:
                console.print(Text(f"{label}: {result.lines} lines, no known failure signature"))
            else:
                t = Table(title=Text(f"{label}: {result.lines} lines"))
                for col in ("severity", "id", "bug", "count", "first line", "meaning / fix"):
                    t.add_column(col, overflow="fold")
                for f in result.findings:
                    style = "bold red" if f.severity == "fatal" else "yellow"
                    t.add_row(
                        Text(f.severity, style=style),
                        f.pattern.id,
                        f.pattern.bug,
                        str(f.count),
                        Text(f"{f.first_line_no}: {f.samples[0][:160]}"),
                        Text(f"{f.pattern.meaning}. Fix: {f.pattern.fix}"),
                    )
                console.print(t)
            for note in result.notes:
                console.print(f"[yellow]note:[/] {escape(note)}")
            if json_out:
                out = targets[i]
                try:
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text(result.to_json())
                except OSError as e:
                    why = escape(str(e.strerror or e))
                    console.print(f"[red]logscan: cannot write --json {escape(str(out))}: {why}[/]")
                    raise typer.Exit(3) from None
        console.print("[bold red]FATAL findings[/]" if fatal else "[green]no fatal finding[/]")
        raise typer.Exit(1 if fatal else 0)
