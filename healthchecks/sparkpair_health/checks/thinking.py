"""Thinking: reasoning exactly when a mode thinks, in every way a client can ask, with no
think tag, special token or DSML leaking, streamed equal to non-streamed.

``thinking`` is the quick on/off check; ``thinking_modes`` is the one thorough thinking
check (every mode the profile allows, and with a model that answers every way DeepSeek-V4
clients ask: ``thinking`` / ``enable_thinking`` / ``reasoning_effort`` and their conflicts).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ..client import Deadline
from ..profile import Profile
from .base import (
    JSON,
    CheckContext,
    Fail,
    Passed,
    Skip,
    base_chat,
    content_of,
    find_leaks,
    message_of,
    model_checks_reason,
    post_chat,
    reasoning_of,
    server_default_chat_kwargs,
    short,
    stream_chat,
)


def check_thinking(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Thinking on gives reasoning and an answer; thinking off gives no reasoning
    (docs/reference/vllm-code-paths.md#thinking)."""
    spec = ctx.profile.checks.thinking
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables thinking checks")
    prompt = "What is 2 + 3? Answer with one number."
    on = base_chat(ctx, prompt=prompt, max_tokens=spec.max_tokens)
    on.update(copy.deepcopy(spec.on_kwargs))
    off = base_chat(ctx, prompt=prompt, max_tokens=spec.max_tokens)
    off.update(copy.deepcopy(spec.off_kwargs))
    m_on, fr_on = message_of(post_chat(ctx, on, deadline, "thinking on"))
    m_off, fr_off = message_of(post_chat(ctx, off, deadline, "thinking off"))
    r_on = reasoning_of(m_on)
    r_off = reasoning_of(m_off)
    ev = {
        "on": {"reasoning": r_on[:200], "content": (m_on.get("content") or "")[:200], "finish_reason": fr_on},
        "off": {
            "reasoning": r_off[:200],
            "content": (m_off.get("content") or "")[:200],
            "finish_reason": fr_off,
        },
    }
    problems = []
    if not r_on:
        problems.append("thinking on: no reasoning in the message")
    if not (m_on.get("content") or "").strip():
        problems.append(f"thinking on: empty content (finish_reason {fr_on!r})")
    if r_off:
        problems.append("thinking off: the message still carries reasoning")
    if "<think>" in (m_on.get("content") or "") or "</think>" in (m_off.get("content") or ""):
        problems.append("think markers leaked into content")
    if problems:
        raise Fail("; ".join(problems), ev)
    return Passed("reasoning present when on, absent when off", ev)


THINKING_KEYS = ("thinking", "enable_thinking")
"""``chat_template_kwargs`` keys that switch DeepSeek-V4-style thinking (docs/reference/vllm-0.33.md)."""


@dataclass(frozen=True)
class ThinkingVariant:
    """One way a client asks for (or against) thinking, and whether reasoning must come back.

    Attributes:
        label: how messages name it (``thinking unspecified``, ``thinking=false``, ...).
        fields: the request fields that ask for it.
        thinking: whether the answer must carry reasoning; ``None``: the server's default.
        streamed: also sent streamed (and compared with the non-streamed answer).
    """

    label: str
    fields: JSON
    thinking: bool | None
    streamed: bool = False


THINKING_VARIANTS: tuple[ThinkingVariant, ...] = (
    ThinkingVariant("no thinking kwargs", {}, None, True),
    ThinkingVariant("thinking=false", {"chat_template_kwargs": {"thinking": False}}, False, True),
    ThinkingVariant("enable_thinking=false", {"chat_template_kwargs": {"enable_thinking": False}}, False),
    ThinkingVariant("thinking=true", {"chat_template_kwargs": {"thinking": True}}, True, True),
    ThinkingVariant("enable_thinking=true", {"chat_template_kwargs": {"enable_thinking": True}}, True),
    ThinkingVariant("reasoning_effort=none", {"reasoning_effort": "none"}, False),
    # reasoning_effort != "none" makes vLLM inject enable_thinking=True unless the client set
    # it, and the tokenizer ORs it with 'thinking': this still thinks (docs/reference/vllm-0.33.md).
    ThinkingVariant(
        "thinking=false + reasoning_effort=high",
        {"chat_template_kwargs": {"thinking": False}, "reasoning_effort": "high"},
        True,
        True,
    ),
    ThinkingVariant(
        "enable_thinking=false + reasoning_effort=high",
        {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"},
        False,
    ),
)
"""Every way a DeepSeek-V4 client asks for thinking; sent when the profile's model thinks and
answers (``checks.thinking`` and ``checks.semantic`` enabled)."""

THINKING_PROMPT = "What is 17 + 25? Reply with the number only."
THINKING_ANSWER = "42"
ANSWER_MAX_TOKENS = 64
"""``max_tokens`` of a judged answer in a mode that does not think (room for "42" and an end)."""


def thinks_by_default(profile: Profile) -> bool:
    """Whether a request naming no thinking field thinks: the profile's
    ``--default-chat-template-kwargs`` when it sets a thinking key, else whether the model has
    a thinking mode (vLLM's DeepSeek-V4 tokenizer defaults to on)."""
    ck = server_default_chat_kwargs(list(profile.server.args))
    if ck is not None and any(k in ck for k in THINKING_KEYS):
        return any(bool(ck.get(k)) for k in THINKING_KEYS)
    return profile.checks.thinking.enabled


def thinking_modes(profile: Profile) -> list[ThinkingVariant]:
    """Every thinking mode the suite sends for ``profile``, in order.

    Always ``thinking unspecified`` (no thinking field: the server's default decides,
    :func:`thinks_by_default`); with ``checks.thinking.enabled`` also ``thinking on``
    (``on_kwargs``) and ``thinking off`` (``off_kwargs``), all streamed too; and when the
    model also answers (``checks.semantic.enabled``) every other :data:`THINKING_VARIANTS` entry.
    """
    t = profile.checks.thinking
    modes = [ThinkingVariant("thinking unspecified", {}, thinks_by_default(profile), True)]
    if t.enabled:
        modes += [
            ThinkingVariant("thinking on", copy.deepcopy(t.on_kwargs), True, True),
            ThinkingVariant("thinking off", copy.deepcopy(t.off_kwargs), False, True),
        ]
        if model_checks_reason(profile) is None:
            sent = [m.fields for m in modes]
            modes += [v for v in THINKING_VARIANTS if v.fields not in sent]
    default = modes[0].thinking
    return [
        m if m.thinking is not None else ThinkingVariant(m.label, m.fields, default, m.streamed)
        for m in modes
    ]


def _without_thinking_fields(body: JSON) -> JSON:
    out = dict(body)
    out.pop("reasoning_effort", None)
    ck = {k: v for k, v in (out.pop("chat_template_kwargs", None) or {}).items() if k not in THINKING_KEYS}
    if ck:
        out["chat_template_kwargs"] = ck
    return out


def judge_thinking(
    where: str,
    thinks: bool,
    reasoning: str,
    content: str,
    finish: str | None,
    *,
    judge_answer: bool,
    max_tokens: int,
) -> list[str]:
    """Problems with one answer in a thinking mode (empty: correct).

    Leaks (:func:`~sparkpair_health.checks.base.find_leaks`) in content or reasoning;
    reasoning in a mode that does not think; none in a mode that thinks (excused by
    ``finish_reason`` ``length`` unless ``judge_answer``); with ``judge_answer`` also
    ``finish_reason`` ``length`` and content without :data:`THINKING_ANSWER`.
    """
    probs: list[str] = []
    for fld, text in (("content", content), ("reasoning", reasoning)):
        probs += [f"{where} {leak} leaked into {fld}" for leak in find_leaks(text)]
    if reasoning and not thinks:
        probs.append(f"{where} reasoning came back in a mode that does not think: {short(reasoning, 80)!r}")
    if thinks and not reasoning and (judge_answer or finish != "length"):
        probs.append(f"{where} the mode thinks but no reasoning came back")
    if judge_answer:
        if finish == "length":
            probs.append(f"{where} finish_reason length: no answer within max_tokens={max_tokens}")
        elif THINKING_ANSWER not in content:
            hint = " (the answer is in reasoning)" if THINKING_ANSWER in reasoning else ""
            probs.append(f"{where} content {short(content, 80)!r} lacks the answer {THINKING_ANSWER!r}{hint}")
    return probs


def check_thinking_modes(ctx: CheckContext, deadline: Deadline) -> Passed:
    """In every thinking mode of :func:`thinking_modes`, non-streamed and (where marked)
    streamed: no think tag / special token / DSML in content or reasoning, reasoning exactly
    when the mode thinks, the stream equal to the non-streamed answer (greedy), and with a
    model that answers, the right answer in content."""
    c = ctx.profile.checks
    judge = c.thinking.enabled and model_checks_reason(ctx.profile) is None
    problems: list[str] = []
    ev: dict[str, Any] = {}
    t = ctx.long_prompt_timeout_s
    for mode in thinking_modes(ctx.profile):
        thinks = bool(mode.thinking)
        mt = c.thinking.max_tokens if thinks else (ANSWER_MAX_TOKENS if judge else c.max_tokens)
        prompt = THINKING_PROMPT if judge else None
        body = {**_without_thinking_fields(base_chat(ctx, prompt, max_tokens=mt)), **mode.fields}
        msg, fr = message_of(post_chat(ctx, body, deadline, f"chat, {mode.label}", timeout_s=t))
        content, reasoning = content_of(msg), reasoning_of(msg)
        name = mode.label.removeprefix("thinking ") if mode.label.startswith("thinking ") else mode.label
        seen: JSON = {
            "request": {k: body[k] for k in ("chat_template_kwargs", "reasoning_effort") if k in body},
            "thinks": thinks,
            "content": content[:200],
            "reasoning_chars": len(reasoning),
            "finish_reason": fr,
        }
        ev[name] = seen
        problems += judge_thinking(
            f"[{mode.label}, non-streamed]", thinks, reasoning, content, fr, judge_answer=judge, max_tokens=mt
        )
        if not mode.streamed:
            continue
        s = stream_chat(ctx, body, deadline, f"streamed chat, {mode.label}", timeout_s=t)
        s_fr = s.finish_reasons[-1] if s.finish_reasons else None
        seen.update(
            streamed_content=s.content[:200],
            streamed_reasoning_chars=len(s.reasoning),
            streamed_finish_reason=s_fr,
        )
        problems += judge_thinking(
            f"[{mode.label}, streamed]",
            thinks,
            s.reasoning,
            s.content,
            s_fr,
            judge_answer=judge,
            max_tokens=mt,
        )
        problems += [f"[{mode.label}, streamed] {p}" for p in s.framing_problems(want_usage=None)]
        if s.content != content:
            problems.append(
                f"[{mode.label}] streamed content {s.content[:60]!r} differs from non-streamed "
                f"{content[:60]!r} of the same greedy request"
            )
        if s.reasoning != reasoning:
            problems.append(f"[{mode.label}] streamed reasoning differs from non-streamed")
        if s_fr != fr:
            problems.append(f"[{mode.label}] finish_reason streamed {s_fr!r}, non-streamed {fr!r}")
    if problems:
        more = f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""
        raise Fail("; ".join(problems[:6]) + more, {"problems": problems, "modes": ev})
    return Passed(
        f"thinking modes {', '.join(ev)}: streamed == non-streamed, no leaks, reasoning as the mode",
        {"modes": ev},
    )
