"""The overlay's logger: a child of vLLM's ``vllm`` logger, so vLLM's handler prints it
with the process prefix (``(EngineCore pid=...)``; vllm/logger.py:28-32 in 0.32.0).

Outside vLLM (unit tests, the CLI) a plain ``logging`` logger of the same name is used.
"""

from __future__ import annotations

import logging


def get_logger(name: str) -> logging.Logger:
    """Logger ``vllm.sparkpair_overlay.<name>`` (vLLM's ``init_logger`` when vLLM is importable)."""
    full = f"vllm.sparkpair_overlay.{name}"
    try:
        from vllm.logger import init_logger
    except Exception:  # noqa: BLE001 - no vLLM here: plain logging
        return logging.getLogger(full)
    logger: logging.Logger = init_logger(full)  # vLLM's is a Logger subclass
    return logger
