"""Entry point of the ``sparkpair`` CLI (typer).

Each command lives in its own module that exposes ``register(app)``; the list below is
the whole command set, so ``sparkpair --help`` lists every command.
"""

from __future__ import annotations

import importlib
import sys

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
    "sparkpair_cli.cmd_cluster",
    "sparkpair_cli.cmd_model",
)


def _load() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


_load()


EXTRA_OF_MODULE = {
    "numpy": "model",
    "tokenizers": "model",
    "torch": "kernels",
    "triton": "kernels",
    "matplotlib": "bench",
    "vllm": "vllm-cpu",
}
"""Which extra of pyproject.toml ([project.optional-dependencies]) installs a module a command
imports when it runs: ``pip install .`` alone installs only the client commands' needs."""


def main() -> None:
    """Console-script entry point.

    A command whose heavy dependency is not installed (the slim ``pip install .``) ends with one
    line naming the package and the extra that installs it, exit 2, not a traceback.
    """
    try:
        app()
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if not top or top.startswith("sparkpair"):
            raise
        extra = EXTRA_OF_MODULE.get(top)
        how = f"pip install 'sparkpair[{extra}]'" if extra else f"install {top}"
        print(
            f"sparkpair: this command needs the Python package {top!r}, which is not installed here; "
            f"wanted: {how} (the image has every package)",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
