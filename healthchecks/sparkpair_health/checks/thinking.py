"""Thinking: reasoning exactly when a mode thinks, in every way a client can ask, with no
think tag, special token or DSML leaking, streamed equal to non-streamed.

``thinking`` is the quick on/off check; ``thinking_modes`` is the one thorough thinking
check (every mode the profile allows, and with a model that answers every way DeepSeek-V4
clients ask: ``thinking`` / ``enable_thinking`` / ``reasoning_effort`` and their conflicts).
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from typing import Any

from sparkpair_serving.profile import Profile

from ..client import Deadline
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
from .compare import LOGPROB_FIELDS, compare_stream, prefix_problems


def check_thinking(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Thinking on gives reasoning and an answer; thinking off gives no reasoning; no think tag
    (whole, cut, or split between reasoning and content) either way
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
    for label, m in (("thinking on", m_on), ("thinking off", m_off)):
        r = reasoning_of(m)  # leaks only: whether reasoning came is judged above
        problems += judge_thinking(
            f"{label}:", bool(r), r, content_of(m), None, judge_answer=False, max_tokens=1
        )
    if problems:
        raise Fail("; ".join(problems), ev)
    return Passed("reasoning present when on, absent when off", ev)


THINKING_KEYS = ("thinking", "enable_thinking")
"""``chat_template_kwargs`` keys that switch DeepSeek-V4-style thinking (docs/reference/vllm-0.33.md)."""

UNSET = "unset"
"""A field the request leaves out (in :data:`THINKING_AXES`; JSON ``null`` is ``None``)."""

THINKING_AXES: dict[str, tuple[Any, ...]] = {
    "thinking": (UNSET, True, False, None),
    "enable_thinking": (UNSET, True, False, None),
    "reasoning_effort": (UNSET, None, "none", "high"),
}
"""Every way a request can set or leave the thinking mode: each of the two
``chat_template_kwargs`` keys left out, true, false or null, and ``reasoning_effort`` left out,
null, ``"none"`` or one that thinks (``"high"``; ``low``/``medium``/``max`` switch the mode the
same way and change only the effort; docs/reference/vllm-code-paths.md#thinking)."""


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
    streamed: bool = True


def _label(values: dict[str, Any]) -> str:
    said = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items() if v is not UNSET]
    return " + ".join(said) or "thinking unspecified"


def _fields(values: dict[str, Any]) -> JSON:
    ck = {k: values[k] for k in THINKING_KEYS if values[k] is not UNSET}
    out: JSON = {"chat_template_kwargs": ck} if ck else {}
    if values["reasoning_effort"] is not UNSET:
        out["reasoning_effort"] = values["reasoning_effort"]
    return out


def _row(t: Any, e: Any, r: Any) -> ThinkingVariant:
    values = {"thinking": t, "enable_thinking": e, "reasoning_effort": r}
    return ThinkingVariant(_label(values), _fields(values), None)


THINKING_TABLE: tuple[ThinkingVariant, ...] = tuple(
    _row(t, e, r) for t, e, r in itertools.product(*THINKING_AXES.values())
)
"""The one table: every combination of :data:`THINKING_AXES` (64 rows), each sent non-streamed
and streamed. What each row must do follows :func:`resolve_thinking` and the profile;
``sparkpair health --sweep`` sends all of it."""

_PAIRWISE = tuple(THINKING_TABLE[16 * i + 4 * j + (i + j) % 4] for i in range(4) for j in range(4))
"""16 rows of :data:`THINKING_TABLE` in which every pair of values of any two axes appears
(an orthogonal array: row (i, j, (i + j) mod 4) of the three 4-valued axes)."""

_SINGLED_OUT = ("thinking unspecified", "reasoning_effort=none", "reasoning_effort=high", "thinking=null")
"""Rows the readiness suite always sends besides the pairwise ones: the server's default, and
the ways to switch thinking with ``reasoning_effort`` alone or with a null."""

THINKING_VARIANTS: tuple[ThinkingVariant, ...] = tuple(
    v
    for v in THINKING_TABLE
    if v in _PAIRWISE
    or v.label in _SINGLED_OUT
    or v.label in ("thinking=false + reasoning_effort=high", "enable_thinking=false + reasoning_effort=high")
)
"""The rows of :data:`THINKING_TABLE` the readiness suite sends (22 of 64): every pair of
axis values (:data:`_PAIRWISE`), the default and ``reasoning_effort`` alone, a null, and the
two three-way conflicts of ``false`` with ``reasoning_effort=high`` (one thinks, one does not:
docs/reference/vllm-code-paths.md#thinking)."""

NO_MODE_VARIANTS = ("thinking unspecified", "thinking=true", "reasoning_effort=high")
"""Rows sent to a model without a thinking mode (``checks.thinking.enabled`` false): the
default and the two ways a client asks for thinking; none may bring reasoning or a think tag."""

THINKING_PROMPT = "What is 17 + 25? Reply with the number only."
THINKING_ANSWER = "42"
ANSWER_MAX_TOKENS = 64
"""``max_tokens`` of a judged answer in a mode that does not think (room for "42" and an end)."""


def resolve_thinking(fields: JSON, server_default: JSON | None) -> bool:
    """Whether DeepSeek-V4's prompt encoder thinks for a request with ``fields`` on a server
    started with ``--default-chat-template-kwargs server_default`` (vLLM 0.33,
    docs/reference/vllm-code-paths.md#thinking).

    The request's ``reasoning_effort`` other than ``"none"`` adds ``enable_thinking: true``
    unless the request's own ``chat_template_kwargs`` names ``enable_thinking`` (even as
    null); ``"none"`` adds ``enable_thinking: false``. The request's keys then override the
    server's defaults, except those that are null (which leave the default, or nothing). With
    neither thinking key left, thinking is on; otherwise it is either key true, unless
    ``reasoning_effort`` is ``"none"``. ``tests/vllm_real/test_dsv4_parser.py`` checks every
    row of :data:`THINKING_TABLE` against vLLM's own request merge and prompt encoder.
    """
    req = fields.get("chat_template_kwargs") or {}
    effort = fields.get("reasoning_effort")
    merged = dict(req)
    if effort is not None:
        merged["reasoning_effort"] = effort
        if "enable_thinking" not in req:
            merged["enable_thinking"] = effort != "none"
    ck = {**(server_default or {}), **{k: v for k, v in merged.items() if v is not None}}
    if ck.get("reasoning_effort") == "none":
        return False
    if not any(k in ck for k in THINKING_KEYS):
        return True
    return any(bool(ck.get(k)) for k in THINKING_KEYS)


def thinking_modes(profile: Profile, *, every: bool = False) -> list[ThinkingVariant]:
    """Every thinking mode the suite sends for ``profile``, in order, with whether it must think.

    A model with a thinking mode (``checks.thinking.enabled``): the readiness rows of the one
    table (:data:`THINKING_VARIANTS`; with ``every``, the whole :data:`THINKING_TABLE`), and the
    profile's ``on_kwargs`` (``thinking on``) and ``off_kwargs`` (``thinking off``) where the
    table does not already hold them; each must think as :func:`resolve_thinking` says for
    the profile's server defaults. A model without one: :data:`NO_MODE_VARIANTS` (with
    ``every``, the whole table), none of which may think. All are sent streamed too.
    """
    t = profile.checks.thinking
    if not t.enabled:
        rows = THINKING_TABLE if every else tuple(v for v in THINKING_TABLE if v.label in NO_MODE_VARIANTS)
        return [ThinkingVariant(v.label, v.fields, False) for v in rows]
    default = server_default_chat_kwargs(list(profile.server.args))
    named = {
        json.dumps(t.on_kwargs, sort_keys=True): "thinking on",
        json.dumps(t.off_kwargs, sort_keys=True): "thinking off",
    }
    modes = []
    for v in THINKING_TABLE if every else THINKING_VARIANTS:
        label = named.pop(json.dumps(v.fields, sort_keys=True), v.label)
        modes.append(ThinkingVariant(label, v.fields, resolve_thinking(v.fields, default)))
    for key, label in named.items():
        kw = json.loads(key)
        modes.append(ThinkingVariant(label, kw, resolve_thinking(kw, default)))
    return modes


def _without_thinking_fields(body: JSON) -> JSON:
    out = dict(body)
    out.pop("reasoning_effort", None)
    ck = {k: v for k, v in (out.pop("chat_template_kwargs", None) or {}).items() if k not in THINKING_KEYS}
    if ck:
        out["chat_template_kwargs"] = ck
    return out


SEAM_CHARS = 24
"""Characters of reasoning's end and content's start joined to find a tag split across them
(the longest tag looked for, a think tag with spaces, is far shorter)."""


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

    Leaks (:func:`~sparkpair_health.checks.base.find_leaks`) in content or reasoning (for a
    stream: as joined from its chunks, so a tag split across chunks is whole), and across the
    seam where reasoning ends and content begins (a tag the parser cut in two, part in each);
    reasoning in a mode that does not think; none in a mode that thinks (excused by
    ``finish_reason`` ``length`` unless ``judge_answer``); with ``judge_answer`` also
    ``finish_reason`` ``length`` and content without :data:`THINKING_ANSWER`.
    """
    probs: list[str] = []
    for fld, text in (("content", content), ("reasoning", reasoning)):
        probs += [f"{where} {leak} leaked into {fld}" for leak in find_leaks(text)]
    tail, head = reasoning[-SEAM_CHARS:], content[:SEAM_CHARS]
    seam = set(find_leaks(tail + head)) - set(find_leaks(tail)) - set(find_leaks(head))
    probs += [
        f"{where} {leak} split across the end of reasoning and the start of content" for leak in sorted(seam)
    ]
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


def _check_modes(ctx: CheckContext, deadline: Deadline, *, every: bool) -> Passed:
    c = ctx.profile.checks
    judge = c.thinking.enabled and model_checks_reason(ctx.profile) is None
    problems: list[str] = []
    ev: dict[str, Any] = {}
    t = ctx.long_prompt_timeout_s
    modes = thinking_modes(ctx.profile, every=every)
    for mode in modes:
        thinks = bool(mode.thinking)
        mt = c.thinking.max_tokens if thinks else (ANSWER_MAX_TOKENS if judge else c.max_tokens)
        prompt = THINKING_PROMPT if judge else None
        body = {**_without_thinking_fields(base_chat(ctx, prompt, max_tokens=mt)), **mode.fields}
        body.update(LOGPROB_FIELDS)
        raw = post_chat(ctx, body, deadline, f"chat, {mode.label}", timeout_s=t)
        msg, fr = message_of(raw)
        content, reasoning = content_of(msg), reasoning_of(msg)
        seen: JSON = {
            "request": {k: body[k] for k in ("chat_template_kwargs", "reasoning_effort") if k in body},
            "thinks": thinks,
            "content": content[:200],
            "reasoning_chars": len(reasoning),
            "finish_reason": fr,
        }
        ev[mode.label] = seen
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
        agree = compare_stream(raw, s.chunks)
        if not agree.ok:
            problems.append(f"[{mode.label}] {agree.problem}")
        elif agree.near_tie:
            problems += prefix_problems(
                f"[{mode.label}]", agree, s.chunks, {"content": content, "reasoning": reasoning}
            )
        else:
            if s.content != content:
                problems.append(
                    f"[{mode.label}] streamed content {s.content[:60]!r} differs from non-streamed "
                    f"{content[:60]!r} of the same greedy request (the same tokens)"
                )
            if s.reasoning != reasoning:
                problems.append(
                    f"[{mode.label}] streamed reasoning differs from non-streamed (the same tokens)"
                )
            if s_fr != fr:
                problems.append(f"[{mode.label}] finish_reason streamed {s_fr!r}, non-streamed {fr!r}")
    if problems:
        more = f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""
        raise Fail("; ".join(problems[:6]) + more, {"problems": problems, "modes": ev})
    thinking = sum(1 for m in modes if m.thinking)
    return Passed(
        f"{len(modes)} thinking modes ({thinking} thinking), each streamed and not: streamed == "
        f"non-streamed, no leaks, reasoning as the mode ({', '.join(ev)[:300]})",
        {"modes": ev},
    )


def check_thinking_modes(ctx: CheckContext, deadline: Deadline) -> Passed:
    """In every thinking mode of :func:`thinking_modes` (the readiness rows), non-streamed and
    streamed: no think tag / special token / DSML in content or reasoning or split across
    them, reasoning exactly when the mode thinks, the stream equal to the non-streamed answer
    (greedy), and with a model that answers, the right answer in content."""
    return _check_modes(ctx, deadline, every=False)


def check_thinking_table(ctx: CheckContext, deadline: Deadline) -> Passed:
    """:func:`check_thinking_modes` over the whole :data:`THINKING_TABLE` (the sweep)."""
    return _check_modes(ctx, deadline, every=True)
