"""sparkpair overlay: a vLLM general plugin that fixes sm_12x (GB10) kernel dispatch.

Loaded by vLLM (entry-point group ``vllm.general_plugins``, name ``sparkpair``) in every
vLLM process. Importing this package patches nothing: vLLM calls :func:`register`.
``VLLM_PLUGINS=''`` (or an allowlist without ``sparkpair``) means it never runs.
"""

__version__ = "0.1.0"


def register() -> None:
    """vLLM plugin entry point (idempotent); see :mod:`sparkpair_overlay.plugin`."""
    from . import plugin

    plugin.register()
