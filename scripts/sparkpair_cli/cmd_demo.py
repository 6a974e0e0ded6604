"""``sparkpair demo``: the main job on an embedded default, end to end on this machine.

Generates the tiny model, serves it with the real vLLM CPU build (the sparkpair overlay
plugin loads in every vLLM process), waits for readiness with progress, runs the health
suite after readiness, prints the report (with the overlay's kernel plan), and stops the
server — on success, on failure and on Ctrl-C/SIGTERM, leaving no process behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from sparkpair_serving.profile import ProfileError, load_profile

from .server import ServerStartError, VllmServer

console = Console()

PLAN_LINE_MARK = "sparkpair overlay plan:"
"""Prefix of the one line the overlay logs per vLLM process (see overlay/PATCHES.md)."""


def default_workdir() -> Path:
    """``$SPARKPAIR_HOME`` or ``$XDG_CACHE_HOME/sparkpair`` (``~/.cache/sparkpair``)."""
    if os.environ.get("SPARKPAIR_HOME"):
        return Path(os.environ["SPARKPAIR_HOME"])
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "sparkpair"


def plan_lines(log_text: str) -> list[str]:
    """Lines of a vLLM server log that carry the overlay's kernel-plan line, one per process."""
    return [line.strip() for line in log_text.splitlines() if PLAN_LINE_MARK in line]


class DemoInputError(ValueError):
    """A demo option (``--workdir``, ``--ready-timeout``) is unusable; the message names it."""


def _raise_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_demo(
    profile_name: str = "tiny-demo",
    workdir: Path | None = None,
    ready_timeout_s: float = 420.0,
    keep_running: bool = False,
) -> int:
    """Run the demo; return the process exit code (0 only when every applicable check passed).

    Raises:
        ProfileError: the profile does not exist or does not validate.
        DemoInputError: ``workdir`` cannot be a writable folder or ``ready_timeout_s`` is
            not a positive number of seconds (checked before anything starts).
    """
    import math

    from sparkpair_health.checks import check_list
    from sparkpair_health.suite import SuiteSettings, run_suite
    from sparkpair_serving.inputs import check_output_dir

    if not (
        isinstance(ready_timeout_s, (int, float)) and math.isfinite(ready_timeout_s) and ready_timeout_s > 0
    ):
        raise DemoInputError(f"--ready-timeout={ready_timeout_s!r}; wanted a positive number of seconds")
    profile = load_profile(profile_name)
    if profile.server.model != "generated:tiny":
        raise ProfileError(
            f"demo: profile {profile.name!r} serves {profile.server.model!r}; the demo serves a "
            "generated model (server.model: 'generated:tiny'). Use `sparkpair health` against "
            "a running server for other profiles."
        )
    workdir = workdir or default_workdir()
    setting = (
        "--workdir"
        if workdir != default_workdir()
        else "--workdir (default: $SPARKPAIR_HOME or ~/.cache/sparkpair)"
    )
    try:
        check_output_dir(workdir, setting)
        for sub in ("runs", "models"):
            check_output_dir(workdir / sub, setting)
    except ValueError as e:
        raise DemoInputError(str(e)) from None
    run_dir = workdir / "runs" / time.strftime("%Y%m%d-%H%M%S")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DemoInputError(
            f"{setting}={str(workdir)!r}: cannot create {run_dir} ({e.strerror or e}); "
            "wanted a writable folder"
        ) from None
    # numpy and tokenizers (the `model` extra) load here, not at CLI start: the slim
    # install runs `sparkpair --help` without them.
    from .tinymodel import generate_tiny_model  # noqa: PLC0415

    model_dir = generate_tiny_model(workdir / "models" / "tiny")
    console.print(f"[bold]sparkpair demo[/] profile={profile.name} model={model_dir} run={run_dir}")

    plan_path = run_dir / "kernel-plan.json"
    server = VllmServer.from_profile(
        profile,
        model_dir,
        log_path=run_dir / "vllm-server.log",
        env={"SPARKPAIR_PLAN_PATH": str(plan_path)},
    )
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        console.print(f"starting vLLM: {' '.join(server.command())}", soft_wrap=True)
        server.start()
        with Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            task = progress.add_task("waiting for the vLLM server to listen", total=None)

            last_line = [0.0]

            def tick(waited: float, state: str) -> None:
                progress.update(task, description=f"waiting for the vLLM server: {state}")
                if not console.is_terminal and waited - last_line[0] >= 15.0:
                    last_line[0] = waited
                    console.print(f"  still waiting for the vLLM server ({waited:.0f} s): {state}")

            waited = server.wait_ready(timeout_s=ready_timeout_s, on_tick=tick)
        console.print(f"vLLM server listening at {server.base_url} after {waited:.0f} s")

        settings = SuiteSettings(
            base_url=server.base_url,
            profile=profile,
            report_json=run_dir / "health-report.json",
            junit_xml=run_dir / "health-report.xml",
            plan_file=plan_path,
        )
        checks = check_list(settings.resolved_profile(), only=settings.only)
        report = run_suite(settings, console=console, checks=checks)

        lines = plan_lines(server.log_path.read_text(errors="replace"))
        processes = [
            ln.split(")", 1)[0].lstrip("(").split(" pid=")[0] if ln.startswith("(") else "?" for ln in lines
        ]
        texts = {ln[ln.index(PLAN_LINE_MARK) :] for ln in lines}
        same = "the same plan" if len(texts) == 1 else f"{len(texts)} DIFFERENT plans"
        console.print(
            f"overlay plan line logged once by each of {len(lines)} vLLM processes "
            f"({', '.join(processes)}): {same}",
            soft_wrap=True,
        )
        if len(texts) > 1:
            for ln in lines:
                console.print(f"  {ln}", soft_wrap=True)
        for label, path in (
            ("report", settings.report_json),
            ("junit", settings.junit_xml),
            ("server log", server.log_path),
        ):
            console.print(f"{label}: {path}", soft_wrap=True)
        if keep_running and report.passed:
            console.print(f"server stays up at {server.base_url}; Ctrl-C to stop")
            while server.alive():
                time.sleep(1.0)
        return 0 if report.passed else 1
    except ServerStartError as e:
        console.print(f"[red]demo failed: {e}[/]")
        return 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: stopping the vLLM server[/]")
        return 130
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        left = server.pids()
        if left:
            console.print(f"[red]processes left behind: {left}[/]")


def register(app: typer.Typer) -> None:
    """Add ``sparkpair demo`` to ``app``."""

    @app.command()
    def demo(
        profile: str = typer.Option("tiny-demo", help="model profile (configs/profiles/NAME.yaml)"),
        workdir: Path = typer.Option(None, help="model cache and run folder [default: ~/.cache/sparkpair]"),
        ready_timeout: float = typer.Option(420.0, help="seconds to wait for the server to listen"),
        keep_running: bool = typer.Option(False, help="leave the server up after a passing suite"),
    ) -> None:
        """Serve a generated tiny model through the real vLLM + overlay stack and run the health suite."""
        try:
            code = run_demo(profile, workdir, ready_timeout, keep_running)
        except (ProfileError, DemoInputError) as e:
            console.print(f"[red]{e}[/]", soft_wrap=True)
            raise typer.Exit(2) from None
        raise typer.Exit(code)
