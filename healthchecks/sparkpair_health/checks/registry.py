"""The one check list: the protocol checks, then the model checks, in run order; with
``sweep``, the longer sweep after them.

``sparkpair health``, ``sparkpair demo`` and the gateway all run :func:`check_list`; the
readiness suite is bounded (docs/health-verdict.md, time budget), the sweep
(:data:`SWEEP_CHECKS`: every thinking mode of the one table, every needle length at every
depth) runs only when asked (``sparkpair health --sweep``), against a pair that is ready.
"""

from __future__ import annotations

from collections.abc import Collection

from sparkpair_serving.profile import Profile

from .api import check_chat, check_models, check_stream, check_stream_no_usage
from .base import CheckSpec
from .greedy import check_determinism, check_greedy_sanity, check_semantic, check_stream_equality
from .long_context import (
    check_long_context,
    check_long_context_sweep,
    check_long_prompt_accepted,
    check_long_prompt_rejected,
)
from .soak import check_soak
from .speculation import SPEC_FIRST, SPEC_LAST
from .thinking import check_thinking, check_thinking_modes, check_thinking_table
from .tools import check_tool_calls, check_tool_named, check_tool_required

CHECKS: list[CheckSpec] = [
    CheckSpec("models", "/v1/models lists the served name", "B15 (served id), sparkrun#9", check_models, 30),
    CheckSpec(
        "chat", "greedy chat completion with consistent usage", "HTTP-200-but-broken decode", check_chat, 60
    ),
    CheckSpec("stream", "stream: one [DONE], one usage chunk, text == non-streamed", "B11", check_stream, 90),
    CheckSpec(
        "stream_no_usage",
        "stream without include_usage carries no usage",
        "B11, vllm#36379",
        check_stream_no_usage,
        90,
    ),
    CheckSpec(
        "tool_required", "tool_choice=required, strict tool: valid arguments", "B10", check_tool_required, 120
    ),
    CheckSpec("tool_named", "named tool_choice, strict tool: valid arguments", "B10", check_tool_named, 120),
    CheckSpec(
        "long_prompt_accepted",
        "prompt near max_model_len served",
        "B13, vllm#44376",
        check_long_prompt_accepted,
        300,
    ),
    CheckSpec(
        "long_prompt_rejected",
        "prompt over max_model_len: HTTP 400, no hang",
        "hang on over-long prompt",
        check_long_prompt_rejected,
        120,
    ),
    CheckSpec("determinism", "two identical greedy requests, identical text", "B15", check_determinism, 90),
    CheckSpec("semantic", "greedy answers contain the expected text", "B15", check_semantic, 120),
    CheckSpec("thinking", "reasoning when thinking is on, none when off", "B11", check_thinking, 300),
    CheckSpec(
        "thinking_modes",
        "the thinking table's readiness rows (every pair of thinking / enable_thinking / "
        "reasoning_effort values, unset and null too), streamed and not: no leaks (split ones "
        "too), reasoning only when thinking, answer in content",
        "B11, thinking/reasoning_effort conflict, null thinking keys (leaks only in one mode)",
        check_thinking_modes,
        900,
    ),
]
"""The protocol checks, in run order (``only`` selects among these)."""

MODEL_CHECKS: list[CheckSpec] = [
    CheckSpec(
        "dsv4.greedy_sanity",
        "greedy known answers, finish_reason stop, twice: the same tokens or a near-tie",
        "B15",
        check_greedy_sanity,
        120,
    ),
    CheckSpec(
        "dsv4.tool_calls",
        "exact tool calls: auto/required, one and several tools, stream; no wrapper, no DSML",
        "B10",
        check_tool_calls,
        300,
    ),
    CheckSpec(
        "dsv4.stream_equality",
        "greedy streamed reasoning/content/tool args == non-streamed",
        "B11",
        check_stream_equality,
        300,
    ),
    CheckSpec(
        "dsv4.long_context",
        "needle returned exactly at the start, middle and end of prompts of exact lengths (every "
        "residue mod 4, either side of multiples of 64 and 128); usage.prompt_tokens exact",
        "B13 envelope, truncation, a dropped head/tail, an off-by-one at a KV block edge",
        check_long_context,
        900,
    ),
    CheckSpec(
        "dsv4.soak",
        "N sequential mixed-length requests (>= 1000-token outputs) within a latency budget",
        "B08",
        check_soak,
        3600,
    ),
]
"""The model checks (settings: the profile's ``checks.dsv4``); each skips with the profile's
reason where it does not apply."""

SWEEP_CHECKS: list[CheckSpec] = [
    CheckSpec(
        "thinking_table",
        "every row of the thinking table (64 ways to set or leave the mode), streamed and not",
        "B11, thinking/reasoning_effort conflicts, null thinking keys",
        check_thinking_table,
        3600,
    ),
    CheckSpec(
        "dsv4.long_context_sweep",
        "the needle at every depth in prompts of every probe length",
        "a dropped head/tail, an off-by-one at a KV block edge",
        check_long_context_sweep,
        3600,
    ),
]
"""The sweep (``sparkpair health --sweep``): the readiness suite's two covering checks run over
their whole space, after it. ``dsv4.long_context_sweep`` is a model check (``model_checks``)."""


def check_list(
    profile: Profile,
    *,
    only: Collection[str] | None = None,
    model_checks: bool = True,
    sweep: bool = False,
) -> list[CheckSpec]:
    """Every check one run of the suite makes for ``profile``, in run order.

    Args:
        profile: the model profile; each check reads its settings from it and skips with
            the profile's reason where it does not apply.
        only: protocol, speculation and sweep check ids to keep (``None``: all); the model
            checks are not filtered.
        model_checks: add :data:`MODEL_CHECKS` (the gateway's ``dsv4_checks``).
        sweep: add :data:`SWEEP_CHECKS` after the model checks (``sparkpair health --sweep``).

    Raises:
        ValueError: ``only`` names an id that is not a protocol, speculation or sweep check.
    """
    known = [c.id for c in [*SPEC_FIRST, *CHECKS, *SPEC_LAST, *SWEEP_CHECKS]]
    bad = sorted(set(only or ()) - set(known))
    if bad:
        raise ValueError(f"profile {profile.name!r}: no such check {bad}; wanted ids from {known}")

    def kept(checks: list[CheckSpec]) -> list[CheckSpec]:
        return [c for c in checks if only is None or c.id in only]

    # speculation checks skip unless the profile sets server.speculation: spec_active first
    # (before any request moves the counters), spec_acceptance last (over the whole suite)
    model = MODEL_CHECKS if model_checks else []
    swept = [c for c in SWEEP_CHECKS if sweep and (model_checks or not c.id.startswith("dsv4."))]
    return [*kept(SPEC_FIRST), *kept(CHECKS), *model, *kept(swept), *kept(SPEC_LAST)]
