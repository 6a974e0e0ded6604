"""Reading one flag's value from a ``vllm serve`` argument list (pure)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["serve_arg"]


def serve_arg(args: Sequence[str], flag: str) -> str | None:
    """The value ``args`` gives ``flag`` (``--flag X`` or ``--flag=X``; the last one wins, as argparse
    does), or ``None`` when it is not there."""
    value: str | None = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            value = args[i + 1]
        elif a.startswith(flag + "="):
            value = a.split("=", 1)[1]
    return value
