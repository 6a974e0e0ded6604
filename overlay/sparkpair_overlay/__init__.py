"""sparkpair overlay: a vLLM general plugin that fixes sm_12x (GB10) kernel dispatch.

Loaded by vLLM (entry-point group ``vllm.general_plugins``) in every vLLM process.
"""

__version__ = "0.1.0"


def register() -> None:
    """vLLM plugin entry point (idempotent). Filled in by the overlay issue."""
    from . import plugin

    plugin.register()
