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


def check_plan_json(data: object, source: str) -> dict:
    """Check the layout :meth:`sparkpair_overlay.plan.KernelPlan.to_json` writes.

    Raises:
        ValueError: not an object, another schema tag, or a field with the wrong type; the
            message names ``source``, the field, the value seen and the value wanted.
    """
    from sparkpair_overlay.plan import PLAN_SCHEMA

    if not isinstance(data, dict):
        raise ValueError(
            f"{source}: top level is a {type(data).__name__}; wanted a JSON object (schema {PLAN_SCHEMA!r})"
        )
    if data.get("schema") != PLAN_SCHEMA:
        raise ValueError(
            f"{source}: schema={data.get('schema')!r}; wanted {PLAN_SCHEMA!r} "
            "(a kernel plan JSON written by the overlay to SPARKPAIR_PLAN_PATH)"
        )
    cap = data.get("capability")
    if cap is not None and not (
        isinstance(cap, list) and len(cap) == 2 and all(isinstance(v, int) for v in cap)
    ):
        raise ValueError(f"{source}: capability={cap!r}; wanted null or [MAJOR, MINOR]")
    router = data.get("router")
    if not isinstance(router, dict):
        raise ValueError(f"{source}: router={router!r}; wanted an object of weight dtype -> decision")
    for dtype, d in router.items():
        if not (
            isinstance(d, dict)
            and isinstance(d.get("path"), str)
            and isinstance(d.get("reason"), str)
            and (d.get("max_m") is None or isinstance(d.get("max_m"), int))
        ):
            raise ValueError(
                f"{source}: router.{dtype}={d!r}; wanted {{path: str, max_m: int|null, reason: str}}"
            )
    o = data.get("o_proj")
    if not (isinstance(o, dict) and isinstance(o.get("label"), str) and isinstance(o.get("reason"), str)):
        raise ValueError(f"{source}: o_proj={o!r}; wanted {{label: str, reason: str, ...}}")
    return data


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
            try:
                check_plan_json(data, f"plan JSON {file}")
            except ValueError as exc:
                console.print(f"[red]{exc}[/red]", soft_wrap=True)
                raise typer.Exit(2) from None
        else:
            from sparkpair_overlay import envs
            from sparkpair_overlay.envs import EnvError
            from sparkpair_overlay.plugin import _load_probe, make_plan

            try:
                probe_path = envs.read("SPARKPAIR_PROBE_PLAN")
                # The plugin degrades to built-in defaults on a bad probe file (it must not
                # stop vLLM); this command exists to show such problems, so it refuses the file.
                problems = _load_probe(probe_path)[1] if probe_path else []
                if problems:
                    for note in problems:
                        console.print(f"[red]SPARKPAIR_PROBE_PLAN: {note}[/red]", soft_wrap=True)
                    raise typer.Exit(2)
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
        for note in data.get("notes") or []:
            console.print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)
        if not data.get("version_verified", True):
            console.print(f"[red]vLLM {data.get('vllm_version')} is not a verified version[/red]")
