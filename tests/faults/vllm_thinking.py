"""Whether vLLM's DeepSeek-V4 prompt encoder thinks for a chat request: the fault servers' copy
of what the real server does, so that a fault server without faults answers every thinking mode
as vLLM 0.33 would.

Transcribed from vLLM 0.33.0 (and 0.32.0, identical here): the request merge
``ChatCompletionRequest.build_chat_params`` (``entrypoints/openai/chat_completion/protocol.py``:
``reasoning_effort`` adds ``enable_thinking`` unless the request's ``chat_template_kwargs``
holds that key), the server defaults ``ChatParams.with_defaults`` and ``merge_kwargs``
(``renderers/params.py``: request values that are ``None`` leave the default) and the encoder
``tokenizers/deepseek_v4.py`` (with neither thinking key, thinking is on; ``reasoning_effort``
``"none"`` turns it off). The health checks carry their own statement of the rule
(``sparkpair_health.checks.thinking.resolve_thinking``), checked against those vLLM functions
in tests/vllm_real/test_dsv4_parser.py.
"""

from __future__ import annotations

from typing import Any


def vllm_thinks(body: dict[str, Any], server_default: dict[str, Any] | None = None) -> bool:
    """Whether the prompt vLLM renders for ``body`` opens a think block."""
    user = body.get("chat_template_kwargs") or {}
    effort = body.get("reasoning_effort")
    merged = dict(user)
    if effort is not None:
        merged["reasoning_effort"] = effort
        if "enable_thinking" not in user:
            merged["enable_thinking"] = effort != "none"
    kwargs = dict(server_default or {})
    kwargs.update({k: v for k, v in merged.items() if v is not None})
    on = bool(kwargs.get("thinking")) or bool(kwargs.get("enable_thinking"))
    if "thinking" not in kwargs and "enable_thinking" not in kwargs:
        on = True
    return on and kwargs.get("reasoning_effort") != "none"
