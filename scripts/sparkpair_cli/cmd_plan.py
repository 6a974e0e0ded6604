# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair plan``: show the overlay's kernel plan for this machine, or a plan JSON file.

Without ``--file``, it makes the plan exactly as the plugin would in a vLLM process here
(same ``SPARKPAIR_*`` settings, probe results, version guard and kernel imports), but
patches nothing. With ``--file``, it reads a plan JSON written by the plugin
(``SPARKPAIR_PLAN_PATH``).

Exit codes: 0 ok; 2 a setting or file is invalid.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``sparkpair plan`` to ``app``."""

    @app.command()
    def plan(
        file: Path = typer.Option(None, "--file", help="show this plan JSON instead of computing one"),
        as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    ) -> None:
        """Show which path each patched kernel takes (router GEMM, o_proj fp8_einsum) and why."""
        from rich.console import Console
        from rich.table import Table

        console = Console()
        if file is not None:
            try:
                data = json.loads(file.read_text())
            except (OSError, ValueError) as exc:
                console.print(f"[red]cannot read plan JSON {file}: {exc}[/red]")
                raise typer.Exit(2) from None
        else:
            from sparkpair_overlay.envs import EnvError
            from sparkpair_overlay.plugin import make_plan

            try:
                data = make_plan().to_json()
            except EnvError as exc:
                console.print(f"[red]{exc}[/red]")
                raise typer.Exit(2) from None
        if as_json:
            print(json.dumps(data, indent=2, sort_keys=True))
            return
        cap = ".".join(str(v) for v in data["capability"]) if data.get("capability") else "cpu"
        title = f"sparkpair kernel plan (vLLM {data.get('vllm_version')}, cap {cap})"
        t = Table(title=title)
        for col in ("kernel", "path", "reason"):
            t.add_column(col, overflow="fold")
        for dtype, d in data.get("router", {}).items():
            label = d["path"] + (f" (M<={d['max_m']})" if d.get("max_m") else "")
            t.add_row(f"router ({dtype} weight)", label, d["reason"])
        o = data.get("o_proj", {})
        t.add_row("o_proj fp8_einsum", o.get("label", ""), o.get("reason", ""))
        console.print(t)
        if not data.get("version_verified", True):
            console.print(f"[red]vLLM {data.get('vllm_version')} is not a verified version[/red]")
