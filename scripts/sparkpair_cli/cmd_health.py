# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair health``: gate on a real decode, run the functional suite (with ``--sweep``, the
longer sweep after it), write the reports.

Exit codes: 0 every applicable check passed; 1 a check failed or errored; 2 the server
never became ready, refused the API key, or went away under the suite (engine died);
3 bad arguments or profile.

The server's API key is read from ``--api-key-file`` / ``SPARKPAIR_API_KEY_FILE`` or from
``SPARKPAIR_API_KEY``, never from the command line; everything printed or written is redacted.
"""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

_OPTION_NAMES = {
    "base_url": "--base-url",
    "report_json": "--report-json",
    "junit_xml": "--junit",
    "plan_file": "--plan-file",
    "only": "--only",
    "served_model_name": "--served-model-name",
    "ready_s": "--ready-timeout",
    "request_s": "--request-timeout",
}
"""Field of the settings schema -> the option the user typed, for error messages."""


def register(app: typer.Typer) -> None:
    """Add ``sparkpair health`` to ``app``."""

    @app.command()
    def health(
        base_url: str = typer.Option(..., help="the vLLM server, http://host:port"),
        profile: str = typer.Option(
            None,
            envvar="SPARKPAIR_PROFILE",
            help="the served model's profile: configs/profiles/NAME.yaml or a path (required; no default)",
        ),
        served_model_name: str = typer.Option(None, help="model name to request [default: the profile's]"),
        report_json: Path = typer.Option(None, help="write the JSON report here"),
        junit: Path = typer.Option(None, help="write JUnit XML here"),
        plan_file: Path = typer.Option(
            None,
            help="the overlay's kernel-plan JSON (the server's SPARKPAIR_PLAN_PATH), shown in the report",
        ),
        ready_timeout: float = typer.Option(600.0, help="seconds to wait for a real decode to succeed"),
        request_timeout: float = typer.Option(60.0, help="seconds per ordinary request"),
        only: list[str] = typer.Option(None, help="run only this check id (repeatable)"),
        sweep: bool = typer.Option(
            False,
            "--sweep",
            help="after the readiness suite, the longer sweep: every row of the thinking table and every "
            "needle length at every depth (run it against a ready pair; docs/health-verdict.md)",
        ),
        api_key_file: Path = typer.Option(
            None,
            help="file holding the server's API key [or SPARKPAIR_API_KEY_FILE; or the key in "
            "SPARKPAIR_API_KEY]",
        ),
        api_key: str = typer.Option(None, hidden=True, help="refused: put the key in a file"),
    ) -> None:
        """Wait for a real decode, run the functional health suite, print the verdict table."""
        from sparkpair_health.checks import check_list
        from sparkpair_health.report import ReportWriteError
        from sparkpair_health.suite import (
            SuiteSettings,
            Timeouts,
            run_suite,
            suite_exit_code,
        )
        from sparkpair_serving.apikey import ApiKeyError, api_key_source, resolve_api_key
        from sparkpair_serving.inputs import format_validation_error
        from sparkpair_serving.profile import ProfileError, require_profile

        console = Console()
        try:
            profile = require_profile(profile)
        except ProfileError as e:
            console.print(
                f"[red]sparkpair health: {escape(str(e))}[/]", soft_wrap=True, markup=True, highlight=False
            )
            raise typer.Exit(3) from None
        if api_key is not None:
            # The value is not echoed: it is the key.
            console.print(
                "[red]sparkpair health: --api-key is refused: a key on the command line is visible to every "
                "user of this machine (ps, shell history); wanted --api-key-file PATH, or "
                "SPARKPAIR_API_KEY_FILE / SPARKPAIR_API_KEY in the environment[/]",
                soft_wrap=True,
            )
            raise typer.Exit(3)
        try:
            key = resolve_api_key(None, api_key_file)
        except ApiKeyError as e:
            console.print(f"[red]sparkpair health: {e}[/]", soft_wrap=True)
            raise typer.Exit(3) from None
        try:
            settings = SuiteSettings(
                base_url=base_url,
                profile=profile,
                served_model_name=served_model_name,
                api_key=key,
                api_key_source=api_key_source(None, api_key_file),
                timeouts=Timeouts(ready_s=ready_timeout, request_s=request_timeout),
                report_json=report_json,
                junit_xml=junit,
                plan_file=plan_file,
                only=only or None,
            )
            settings.resolved_profile()
        except ValidationError as e:
            console.print(
                f"[red]sparkpair health: {format_validation_error(e, _OPTION_NAMES)}[/]", soft_wrap=True
            )
            raise typer.Exit(3) from None
        except ProfileError as e:
            console.print(f"[red]sparkpair health: --profile: {e}[/]", soft_wrap=True)
            raise typer.Exit(3) from None
        # The reports are written here, not inside the suite: a write that fails must not
        # lose the verdict (the table is printed first, then the error names the path).
        run = settings.model_copy(update={"report_json": None, "junit_xml": None})
        checks = check_list(run.resolved_profile(), only=run.only, sweep=sweep)
        report = run_suite(run, console=console, checks=checks)
        try:
            report.write(report_json, junit)
        except ReportWriteError as e:
            console.print(f"[red]sparkpair health: {e}[/]", soft_wrap=True)
            raise typer.Exit(3) from None
        for label, path in (("report", report_json), ("junit", junit)):
            if path:
                console.print(f"{label}: {path}")
        raise typer.Exit(suite_exit_code(report))
