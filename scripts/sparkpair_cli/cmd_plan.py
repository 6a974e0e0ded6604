# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair plan``: show the overlay's kernel plan for this machine, or a plan JSON file, and the
vLLM release it is for with how far that release is proven (verified to patch, verified to serve on
family 120: ``sparkpair_overlay.versions``).

Without ``--file``, it makes the plan exactly as the plugin would in a vLLM process here
(same ``SPARKPAIR_*`` settings, probe results, version guard and kernel imports), but
patches nothing. With ``--file``, it reads a plan JSON written by the plugin
(``SPARKPAIR_PLAN_PATH``).

Exit codes: 0 ok; 2 a setting or file is invalid.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``sparkpair plan`` to ``app``."""

    @app.command()
    def plan(
        file: Path = typer.Option(None, "--file", help="show this plan JSON instead of computing one"),
        as_json: bool = typer.Option(False, "--json", help="print the plan as JSON"),
    ) -> None:
        """Show which path each patched kernel takes (router GEMM, o_proj fp8_einsum and its config per
        token-count range) and why."""
        from rich.console import Console
        from rich.table import Table

        console = Console()
        from sparkpair_overlay.kernels.fp8_einsum_plan import UNBOUNDED
        from sparkpair_overlay.plan import KernelPlan, PlanError

        if file is not None:
            try:
                kplan = KernelPlan.load(file)
            except PlanError as exc:
                console.print(f"[red]{exc}[/red]", soft_wrap=True)
                raise typer.Exit(2) from None
        else:
            from sparkpair_overlay import envs
            from sparkpair_overlay.envs import EnvError
            from sparkpair_overlay.plugin import load_probe_results, make_plan

            try:
                probe_path = envs.read("SPARKPAIR_PROBE_RESULTS")
                # The plugin degrades to built-in defaults on a bad probe file (it must not
                # stop vLLM); this command exists to show such problems, so it refuses the file.
                problems = load_probe_results(probe_path)[1] if probe_path else []
                if problems:
                    for note in problems:
                        console.print(f"[red]SPARKPAIR_PROBE_RESULTS: {note}[/red]", soft_wrap=True)
                    raise typer.Exit(2)
                kplan = make_plan()
            except EnvError as exc:
                console.print(f"[red]{exc}[/red]")
                raise typer.Exit(2) from None
        if as_json:
            print(kplan.dumps(), end="")
            return
        cap = ".".join(str(v) for v in kplan.capability) if kplan.capability else "cpu"
        t = Table(title=f"sparkpair kernel plan (vLLM {kplan.vllm_version}, cap {cap})")
        for col in ("kernel", "path", "reason"):
            t.add_column(col, overflow="fold")
        for dtype, d in (("bfloat16", kplan.router_bf16), ("float32", kplan.router_fp32)):
            label = d.path + (f" (M<={d.max_m})" if d.max_m else "")
            t.add_row(f"router ({dtype} weight)", label, d.reason)
        on = f" on {kplan.o_proj.weight_layout}" if kplan.o_proj.weight_layout else ""
        t.add_row("o_proj fp8_einsum", kplan.o_proj.label + on, kplan.o_proj.reason)
        cfg = kplan.o_proj_configs
        if cfg is not None:
            t.add_row("  configs", f"{cfg.source} on {cfg.layout}", cfg.reason)
            for lo, hi, name, why in cfg.spans():
                span = f"T {lo}-{hi}" if lo != hi else f"T {lo}"
                t.add_row(f"  {span if hi < UNBOUNDED else f'T >= {lo}'}", name, why)
        console.print(t)
        if kplan.switches is not None:
            console.print(f"vLLM switches assumed: {kplan.switches.describe()} (checked again when vLLM "
                          "builds DeepSeek-V4's attention)", soft_wrap=True)
        from sparkpair_overlay.versions import proof_line

        proof = proof_line(kplan.vllm_version)
        for note in kplan.notes:
            if note != proof:
                console.print(f"[yellow]note:[/yellow] {note}", soft_wrap=True)
        # Which vLLM release the patches were proven on, and how far (sparkpair_overlay.versions.RELEASES).
        console.print(f"proven: {proof}", soft_wrap=True)
        if not kplan.version_verified:
            console.print(f"[red]vLLM {kplan.vllm_version} is not a verified version[/red]")
