# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair gateway``: serve ``/livez``, ``/readyz``, ``/report`` and ``/metrics`` for a vLLM server.

Every option is also read from ``SPARKPAIR_<OPTION>`` (e.g. ``--canary-interval-s`` from
``SPARKPAIR_CANARY_INTERVAL_S``): one schema, :class:`sparkpair_health.gateway.GatewaySettings`;
an option given on the command line wins over the environment. The API key is read from
a file (``--api-key-file`` / ``SPARKPAIR_API_KEY_FILE``) or ``SPARKPAIR_API_KEY``, never
from the command line.

Exit codes: 2 the gateway gave up (the server never became ready within the ready timeout,
or it refuses the API key): compose's ``restart: on-failure`` restarts it; 3 bad settings.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``sparkpair gateway`` to ``app``."""

    @app.command()
    def gateway(
        base_url: str = typer.Option(None, help="the vLLM server, http://host:port [env SPARKPAIR_BASE_URL]"),
        profile: str = typer.Option(
            None, help="the served model's profile, name or path [env SPARKPAIR_PROFILE; required]"
        ),
        served_model_name: str = typer.Option(None, help="model name to request [default: the profile's]"),
        api_key_file: Path = typer.Option(
            None,
            help="file holding the server's API key, one line (or env SPARKPAIR_API_KEY_FILE / "
            "SPARKPAIR_API_KEY); a key is never passed on the command line",
        ),
        host: str = typer.Option(None, help="gateway bind address [127.0.0.1]"),
        port: int = typer.Option(None, help="gateway port [8080]"),
        ready_timeout_s: float = typer.Option(
            None,
            help="seconds to wait for a real decode, then exit 2 [SPARKPAIR_JOIN_TIMEOUT_S + the head's "
            "45 min start period]",
        ),
        request_timeout_s: float = typer.Option(None, help="seconds per ordinary suite request [60]"),
        canary_interval_s: float = typer.Option(None, help="seconds between canary completions [15]"),
        canary_timeout_s: float = typer.Option(
            None, help="overall deadline of one canary request, seconds [10]"
        ),
        dsv4_checks: bool = typer.Option(
            None,
            "--dsv4-checks/--no-dsv4-checks",
            help="add (or skip) the DeepSeek-V4 checks [default: when the profile serves DeepSeek-V4]",
        ),
        report_json: Path = typer.Option(None, help="also write each report here"),
        junit_xml: Path = typer.Option(None, help="also write JUnit XML here"),
        check_settings: bool = typer.Option(False, "--check-settings", help="print the settings and exit"),
    ) -> None:
        """Gate traffic on a real verdict: readiness, the suite, then a periodic canary completion."""
        from sparkpair_health.gateway import GatewayGaveUp, GatewaySettings, GatewaySettingsError, serve
        from sparkpair_serving.apikey import ApiKeyError
        from sparkpair_serving.profile import ProfileError, require_profile

        given = dict(locals())
        try:  # no default: the pair's gateway must not judge it with the tiny model's checks
            require_profile(profile)
        except ProfileError as e:
            typer.echo(f"sparkpair gateway: {e}", err=True)
            raise typer.Exit(3) from None
        overrides = {
            k: v
            for k, v in given.items()
            if k in GatewaySettings.model_fields and k != "dsv4" and v is not None
        }
        try:
            settings = GatewaySettings.from_env(overrides=overrides)
            settings.resolved_api_key()
        except (GatewaySettingsError, ApiKeyError) as e:
            typer.echo(f"sparkpair gateway: {e}", err=True)
            raise typer.Exit(3) from None
        from .deploy.nodeenv_keys import unknown_key_problems

        # pydantic-settings reads names in any case; a typo is read by nothing
        for line in unknown_key_problems(os.environ, "the gateway's environment", case_sensitive=False):
            typer.echo(f"sparkpair gateway: warning: {line}", err=True)
        if check_settings:
            typer.echo(settings.model_dump_json(indent=2))
            return
        typer.echo(
            f"sparkpair gateway: http://{settings.host}:{settings.port} -> {settings.base_url}", err=True
        )
        try:
            serve(settings)
        except GatewaySettingsError as e:
            typer.echo(f"sparkpair gateway: {e}", err=True)
            raise typer.Exit(3) from None
        except GatewayGaveUp as e:
            typer.echo(f"sparkpair gateway: gave up: {e}", err=True)
            raise typer.Exit(2) from None
