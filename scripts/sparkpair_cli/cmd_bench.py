"""``sparkpair bench``: serving benchmark against an OpenAI-compatible endpoint.

``sparkpair bench [--quick | --workload NAME|PATH] --base-url URL`` runs a workload
(``configs/bench/*.yaml``) and writes ``result.json`` plus two PNG plots;
``sparkpair bench compare A.json B.json`` lines two results up and prints ratios;
``sparkpair bench show result.json [--plots]`` prints a result again (and redraws its plots).

Exit codes: 0 all cells complete without request errors; 1 a cell failed or a request
errored (the results are still written); 2 bad arguments or workload; 130 interrupted
(partial results written).
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

bench_app = typer.Typer(
    name="bench",
    help="Serving benchmark (TTFT, TPOT, tok/s, prefill) against an OpenAI-compatible endpoint; "
    "`bench compare A.json B.json` prints ratios.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _stdout_console() -> Console:
    """Console on stdout; 240 columns when piped, so the wide table is not squeezed."""
    return Console(width=None if sys.stdout.isatty() else 240)


def _ints(option: str, text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"{option} is {text!r}; want comma-separated integers, e.g. 1,2,4") from None
    if not vals:
        raise typer.BadParameter(f"{option} is {text!r}; want at least one integer")
    return vals


@bench_app.callback(invoke_without_command=True)
def bench(
    ctx: typer.Context,
    base_url: Annotated[str, typer.Option(help="endpoint root (no /v1)")] = "http://127.0.0.1:8000",
    quick: Annotated[bool, typer.Option(help="the 'quick' workload: fits the tiny CPU demo server")] = False,
    workload: Annotated[
        str, typer.Option("--workload", "-w", help="name in configs/bench or a YAML path")
    ] = ("dsv4-pair"),
    out: Annotated[
        Path | None, typer.Option(help="result folder (default: reports/bench/<UTC>-<workload>)")
    ] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="tokenizer for the prompts (default: the model root)")
    ] = None,
    tokenizer_mode: Annotated[
        str, typer.Option(help="vLLM tokenizer mode (deepseek_v4 for DeepSeek-V4)")
    ] = "auto",
    image: Annotated[
        str | None, typer.Option(help="serving image, for provenance [$SPARKPAIR_IMAGE]")
    ] = None,
    plan_file: Annotated[
        Path | None, typer.Option(help="overlay kernel plan JSON [$SPARKPAIR_PLAN_PATH]")
    ] = None,
    profile: Annotated[str | None, typer.Option(help="model profile the server runs, for provenance")] = None,
    concurrency: Annotated[str | None, typer.Option(help="override grid.concurrency, e.g. 1,2,4,6")] = None,
    context: Annotated[str | None, typer.Option(help="override grid.context_tokens, e.g. 1024,8192")] = None,
    output_tokens: Annotated[str | None, typer.Option(help="override grid.output_tokens")] = None,
    thinking: Annotated[str | None, typer.Option(help="override grid.thinking, e.g. off,on")] = None,
    requests_per_user: Annotated[int | None, typer.Option(help="override requests_per_user")] = None,
    seed: Annotated[int | None, typer.Option(help="override the workload seed")] = None,
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="write the PNG plots")] = True,
) -> None:
    """Run a benchmark workload against BASE_URL (subcommand: compare)."""
    if ctx.invoked_subcommand is not None:
        return
    from sparkpair_cli.bench import provenance as prov
    from sparkpair_cli.bench.workload import QUICK_WORKLOAD, WorkloadError, load_workload, parse_workload

    err = Console(stderr=True)
    stdout = _stdout_console()
    try:
        wl = load_workload(QUICK_WORKLOAD if quick else workload)
        data = wl.model_dump(mode="json")
        for key, text in (
            ("concurrency", concurrency),
            ("context_tokens", context),
            ("output_tokens", output_tokens),
        ):
            vals = _ints(f"--{key.replace('_tokens', '').replace('_', '-')}", text)
            if vals is not None:
                data["grid"][key] = vals
        if thinking is not None:
            data["grid"]["thinking"] = [t.strip() for t in thinking.split(",") if t.strip()]
        if requests_per_user is not None:
            data["requests_per_user"] = requests_per_user
        if seed is not None:
            data["seed"] = seed
        wl = parse_workload(data, f"{wl.name} (with command-line overrides)")
    except WorkloadError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None

    try:
        endpoint = prov.endpoint_info(base_url)
    except RuntimeError as e:
        err.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    max_len = endpoint.get("max_model_len")
    if isinstance(max_len, int):
        try:
            for cell in wl.cells():
                cell.check_fits(max_len)
        except WorkloadError as e:
            err.print(f"[red]error:[/red] workload {wl.name}: {e}")
            raise typer.Exit(2) from None

    profile_data = None
    if profile is not None:
        from sparkpair_serving.profile import ProfileError, load_profile

        try:
            profile_data = load_profile(profile).model_dump(mode="json")
        except ProfileError as e:
            err.print(f"[red]error:[/red] --profile: {e}")
            raise typer.Exit(2) from None

    out_dir = out or Path("reports") / "bench" / (
        datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{wl.name}"
    )
    err.print(
        f"sparkpair bench: workload [bold]{wl.name}[/bold], {len(wl.cells())} cells, "
        f"endpoint {endpoint['base_url']} "
        f"(model {endpoint['served_model_name']}, vLLM {endpoint.get('vllm_version')}), results in {out_dir}"
    )
    err.print("loading vLLM's benchmark client ...")
    from sparkpair_cli.bench import plots as plots_mod
    from sparkpair_cli.bench import reference
    from sparkpair_cli.bench.report import print_result
    from sparkpair_cli.bench.runner import BenchInterrupted, BenchRun

    provenance = prov.collect(
        endpoint, image=image, plan_file=plan_file, profile=profile_data, command=sys.argv
    )
    run = BenchRun(
        wl, endpoint, provenance, out_dir, tokenizer=tokenizer, tokenizer_mode=tokenizer_mode, console=err
    )
    run.result["reference"] = reference.as_json()
    code = 0
    try:
        result = run.run()
    except BenchInterrupted as e:
        result = run.result
        err.print(f"[yellow]{e}[/yellow]")
        code = 130
    if plots:
        try:
            paths = plots_mod.write_plots(result, out_dir)
            result["plots"] = [p.name for p in paths]
            run.save()
        except Exception as e:  # noqa: BLE001 - the numbers are saved; a plot failure must not lose them
            err.print(f"[red]plots failed:[/red] {type(e).__name__}: {e}")
            code = code or 1
    print_result(result, stdout)
    errors = sum((c.get("summary") or {}).get("errors", 0) for c in result["cells"])
    failed = [c["id"] for c in result["cells"] if c["status"] == "failed"]
    stdout.print(
        f"results: {run.result_path}" + (f"; plots: {', '.join(result.get('plots', []))}" if plots else "")
    )
    if code == 0 and (errors or failed):
        err.print(f"[red]{errors} request errors, {len(failed)} failed cells {failed}[/red]")
        code = 1
    raise typer.Exit(code)


@bench_app.command("compare")
def compare(
    a: Annotated[Path, typer.Argument(help="baseline result.json (A)")],
    b: Annotated[Path, typer.Argument(help="candidate result.json (B)")],
) -> None:
    """Line up two result files cell by cell and print B/A ratios."""
    from sparkpair_cli.bench.report import ResultFileError, compare_table, load_result, provenance_diff

    console = _stdout_console()
    try:
        ra, rb = load_result(a), load_result(b)
    except ResultFileError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    table, only = compare_table(ra, rb, str(a), str(b))
    console.print(table)
    for line in only:
        console.print(line)
    diff = provenance_diff(ra, rb)
    if diff:
        console.print("provenance differences:")
        for key, va, vb in diff:
            console.print(f"  {key}: A={va!r} B={vb!r}")
    if not any(c["id"] in {x["id"] for x in rb.get("cells", [])} for c in ra.get("cells", [])):
        Console(stderr=True).print("[red]error:[/red] no cell id is in both files; nothing to compare")
        raise typer.Exit(1)


@bench_app.command("show")
def show(
    result: Annotated[Path, typer.Argument(help="a result.json")],
    plots: Annotated[bool, typer.Option("--plots/--no-plots", help="(re)draw the PNGs next to it")] = False,
) -> None:
    """Print a result's table; with --plots, redraw its PNG plots."""
    from sparkpair_cli.bench.report import ResultFileError, load_result, print_result

    try:
        data = load_result(result)
    except ResultFileError as e:
        Console(stderr=True).print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    print_result(data, _stdout_console())
    if plots:
        from sparkpair_cli.bench.plots import write_plots

        for p in write_plots(data, result.parent):
            _stdout_console().print(f"wrote {p}")


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command group (run + ``compare``) to the ``sparkpair`` app."""
    app.add_typer(bench_app, name="bench")


if __name__ == "__main__":  # ``python -m sparkpair_cli.cmd_bench ...`` == ``sparkpair bench ...``
    bench_app()
