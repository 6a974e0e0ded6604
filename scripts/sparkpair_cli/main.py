"""Entry point of the ``sparkpair`` CLI (typer).

Each command lives in its own module that exposes ``register(app)``; the list below is
the whole command set, so ``sparkpair --help`` lists every command.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="sparkpair",
    help="Serve DeepSeek-V4-Flash with vLLM on a pair of DGX Sparks, and know that it works.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMAND_MODULES = (
    "sparkpair_cli.cmd_demo",
    "sparkpair_cli.cmd_health",
    "sparkpair_cli.cmd_logscan",
    "sparkpair_cli.cmd_bench",
    "sparkpair_cli.cmd_gateway",
    "sparkpair_cli.cmd_kernels",
    "sparkpair_cli.cmd_probe",
    "sparkpair_cli.cmd_plan",
    "sparkpair_cli.cmd_preflight",
    "sparkpair_cli.cmd_node",
    "sparkpair_cli.cmd_inspect",
)


def _load() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_load()


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
