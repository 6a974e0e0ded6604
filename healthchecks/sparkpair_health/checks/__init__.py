"""The functional checks of the health suite, one framework (:mod:`.base`), by concern:
API basics (:mod:`.api`), tool calls (:mod:`.tools`), long prompts and context
(:mod:`.long_context`), thinking (:mod:`.thinking`), greedy sanity and determinism
(:mod:`.greedy`), the soak (:mod:`.soak`); :func:`check_list` (:mod:`.registry`) is the one list.
"""

from __future__ import annotations

from .base import (
    DSML_MARKERS,
    LEAK_PATTERNS,
    NO_THINKING,
    CheckContext,
    CheckSpec,
    Fail,
    Passed,
    Skip,
    base_chat,
    find_leaks,
    post_chat,
    stream_chat,
)
from .registry import CHECKS, MODEL_CHECKS, SWEEP_CHECKS, check_list
from .thinking import (
    THINKING_TABLE,
    THINKING_VARIANTS,
    ThinkingVariant,
    judge_thinking,
    resolve_thinking,
    thinking_modes,
)
from .tools import TOOLS, judge_tool_call, judge_tool_calls

__all__ = [
    "CHECKS",
    "DSML_MARKERS",
    "LEAK_PATTERNS",
    "MODEL_CHECKS",
    "SWEEP_CHECKS",
    "NO_THINKING",
    "THINKING_TABLE",
    "THINKING_VARIANTS",
    "TOOLS",
    "CheckContext",
    "CheckSpec",
    "Fail",
    "Passed",
    "Skip",
    "ThinkingVariant",
    "base_chat",
    "check_list",
    "find_leaks",
    "judge_thinking",
    "resolve_thinking",
    "judge_tool_call",
    "judge_tool_calls",
    "post_chat",
    "stream_chat",
    "thinking_modes",
]
