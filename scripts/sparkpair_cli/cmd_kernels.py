"""``sparkpair kernels build``: AOT-compile every sparkpair Triton kernel config, no GPU needed.

Compiles each config of each kernel (``sparkpair_overlay.kernels.aot.all_variants()``) for each
target with the installed Triton (which must be the release series of the ``kernels`` extra's pin,
the image's Triton: it says so first and exits 1 otherwise), prints config -> registers, spill
bytes, shared memory, MMA instructions, and exits non-zero naming the kernel, config, arch and
what is wrong when a config does not compile, spills, needs more than GB10's 101,376 B of shared
memory per block on sm_12x, or runs an MMA on fp8 operands there that is not a native fp8 one.

The compiled artifacts are written to ``--cache-dir`` (a Triton cache directory). Ship it in the
image and set ``TRITON_CACHE_DIR`` to it at run time: Triton's runtime computes the same cache
key (same source, specialisation, options, target) and loads the cubin instead of compiling.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()

kernels_app = typer.Typer(
    help="sparkpair's own Triton kernels: AOT build and shared-memory gate.", no_args_is_help=True
)


def _parse_archs(arch: str) -> list[str]:
    from sparkpair_overlay.kernels.aot import AOT_TARGETS

    archs = list(dict.fromkeys(a.strip() for a in arch.split(",") if a.strip()))  # once each
    bad = [a for a in archs if a not in AOT_TARGETS]
    if not archs or bad:
        raise typer.BadParameter(
            f"--arch {arch!r}: unknown arch {', '.join(bad) or arch!r}; choose from {', '.join(AOT_TARGETS)}"
        )
    return archs


def _check_cache_dir(cache_dir: Path | None) -> Path | None:
    """The cache directory, created now, so a bad path fails before minutes of compiling."""
    if cache_dir is None:
        return None
    if str(cache_dir).strip() in ("", "."):
        raise typer.BadParameter(
            f"--cache-dir {str(cache_dir)!r}: give a directory for the Triton cache (empty or '.' would "
            "write it into the current directory)"
        )
    if cache_dir.exists() and not cache_dir.is_dir():
        raise typer.BadParameter(f"--cache-dir {str(cache_dir)!r} exists and is not a directory")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise typer.BadParameter(f"--cache-dir {str(cache_dir)!r} cannot be created: {why}") from None
    return cache_dir


def run_build(archs: list[str], cache_dir: Path | None, quiet: bool = False) -> int:
    """Compile everything for ``archs``; print the table; return 0 when every config passes, else 1."""
    import triton
    from sparkpair_overlay.kernels import aot
    from sparkpair_overlay.kernels._common import triton_problem, triton_requirement

    t0 = time.monotonic()
    console.print(f"Triton {triton.__version__} (sparkpair's kernels pin: {triton_requirement() or '?'})")
    wrong = triton_problem()
    if wrong:
        console.print(f"[red]FAIL[/red] {wrong}")
        return 1
    variants = aot.all_variants()
    total = len(variants) * len(archs)
    done = 0

    def progress(r: aot.AotResult) -> None:
        nonlocal done
        done += 1
        if not quiet and (done % 20 == 0 or done == total):
            console.print(f"[dim]compiled {done}/{total} ({time.monotonic() - t0:.0f} s)[/dim]")

    results = aot.build(archs, str(cache_dir) if cache_dir else None, variants, progress)
    n_configs = len({(v.kernel, v.config.name) for v in variants})
    table = Table(
        title=f"sparkpair kernels: {len(variants)} variants of {n_configs} configs x {len(archs)} targets"
    )
    cols = ("kernel", "config", "variant", "arch", "regs", "spill B", "shared B", "limit B", "MMAs", "status")
    for col in cols:
        right = col.endswith("B") or col in ("regs", "MMAs")
        table.add_column(col, justify="right" if right else "left", overflow="fold")
    for r in results:
        status = "[green]ok[/green]" if r.fits else f"[red]{r.status}[/red]"
        table.add_row(
            r.kernel,
            r.config,
            r.variant,
            r.arch,
            str(r.n_regs if r.n_regs is not None else "?"),
            str(r.spills if r.spills is not None else "?"),
            str(r.shared if r.shared is not None else "-"),
            str(r.limit or "-"),
            str(sum(r.mma.values())),
            status,
        )
    if not quiet:
        # Piped or logged output is not cut to 80 columns: every config name stays whole.
        (console if console.is_terminal else Console(width=200)).print(table)
    failures = [r.problem() for r in results if not r.fits]
    for f in failures:
        console.print(f"[red]FAIL[/red] {f}")
    if cache_dir:
        console.print(f"Triton cache written to {cache_dir} (set TRITON_CACHE_DIR={cache_dir} at run time)")
    else:
        console.print(
            "Triton cache: Triton's default (TRITON_CACHE_DIR, else ~/.triton/cache); kernels already "
            "there were loaded, not recompiled. Pass --cache-dir DIR for a cache to ship."
        )
    console.print(f"{len(results) - len(failures)}/{len(results)} passed in {time.monotonic() - t0:.0f} s")
    return 1 if failures else 0


_ArchOpt = Annotated[str, typer.Option("--arch", help="comma-separated: sm_121a,sm_120a,sm_90a")]
_CacheOpt = Annotated[Path | None, typer.Option("--cache-dir", help="Triton cache dir to write")]
_QuietOpt = Annotated[bool, typer.Option("--quiet", help="print only failures and the summary")]


@kernels_app.command("build")
def build_cmd(arch: _ArchOpt = "sm_121a", cache_dir: _CacheOpt = None, quiet: _QuietOpt = False) -> None:
    """AOT-compile every kernel config for each target; fail on compile errors, spills, shared memory
    over GB10's or upcast fp8 MMAs on sm_12x."""
    raise typer.Exit(run_build(_parse_archs(arch), _check_cache_dir(cache_dir), quiet))


def register(app: typer.Typer) -> None:
    """Add the ``kernels`` sub-app to the sparkpair CLI."""
    app.add_typer(kernels_app, name="kernels")
