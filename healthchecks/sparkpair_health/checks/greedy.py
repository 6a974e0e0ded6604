"""Greedy sanity and determinism: known answers, identical repeats, stream equal to non-stream.

``determinism`` and ``semantic`` run on every profile (``semantic`` skips without a trained
model); ``dsv4.greedy_sanity`` and ``dsv4.stream_equality`` are the model checks' stricter
forms (reasoning and tool arguments compared too). Two greedy generations are compared token by
token with their logprobs (:func:`~sparkpair_health.checks.compare.compare_greedy`): identical, or
parting at a near-tie, never otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from sparkpair_serving.profile import ExpectedAnswer

from ..client import Deadline
from .base import (
    JSON,
    NO_THINKING,
    CheckContext,
    Fail,
    Passed,
    Skip,
    base_chat,
    content_of,
    first_difference,
    message_of,
    model_checks_reason,
    post_chat,
    reasoning_of,
    short,
    stream_chat,
    user_chat,
)
from .compare import LOGPROB_FIELDS, compare_answers, compare_stream, prefix_problems
from .thinking import THINKING_PROMPT
from .tools import TOOL_CASES, TOOLS


def check_determinism(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Two identical greedy requests give the same tokens, or part only at a near-tie (B15)."""
    body = base_chat(
        ctx, prompt="Count from one to ten: one, two,", max_tokens=max(ctx.profile.checks.max_tokens, 32)
    )
    body.update(LOGPROB_FIELDS)
    a = post_chat(ctx, body, deadline, "first greedy request")
    b = post_chat(ctx, body, deadline, "second greedy request")
    ta, tb = content_of(message_of(a)[0]), content_of(message_of(b)[0])
    ev: dict[str, Any] = {"first": ta[:200], "second": tb[:200], "usage": [a.get("usage"), b.get("usage")]}
    agree = compare_answers(a, b)
    ev["difference"] = agree.evidence
    if not agree.ok:
        raise Fail(f"two identical greedy requests: {agree.problem}", ev)
    if agree.identical and ta != tb:
        raise Fail("two identical greedy requests gave the same tokens but different text", ev)
    if not ta:
        raise Fail("two identical greedy requests both gave empty text; wanted text", ev)
    note = agree.note(("first", "second"))
    return Passed(f"identical {len(ta)}-char answers" if not note else f"{note}; tolerated", ev)


def _expected_answers(ctx: CheckContext) -> list[ExpectedAnswer]:
    spec = ctx.profile.checks.semantic
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables semantic checks")
    if not spec.expected_answers:
        raise Fail("checks.semantic.enabled is true but checks.semantic.expected_answers is empty")
    return spec.expected_answers


def judge_answer(qa: ExpectedAnswer, where: str, text: str, fr: str | None) -> list[str]:
    """Problems with one answer to ``qa``: the expected text missing, the wrong finish_reason."""
    problems = []
    if qa.contains.lower() not in text.lower():
        problems.append(
            f"{where}: answer {short(text, 60)!r} lacks {qa.contains!r} (finish_reason {fr}) — garbage "
            "while /health is 200 (B15)"
        )
    if fr != qa.finish_reason:
        problems.append(f"{where}: finish_reason {fr!r}, wanted {qa.finish_reason!r}")
    return problems


def check_semantic(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Greedy questions with known answers: the answer contains the expected text and ends as wanted (B15)."""
    answers = _expected_answers(ctx)
    ev: dict[str, Any] = {"answers": []}
    problems: list[str] = []
    for qa in answers:
        d = post_chat(
            ctx, base_chat(ctx, prompt=qa.prompt, max_tokens=qa.max_tokens), deadline, "semantic question"
        )
        msg, fr = message_of(d)
        text = content_of(msg)
        ev["answers"].append({"prompt": qa.prompt, "answer": text[:200], "finish_reason": fr})
        problems += judge_answer(qa, repr(qa.prompt), text, fr)
    if problems:
        raise Fail("; ".join(problems), ev)
    return Passed(f"{len(answers)} expected answers found", ev)


def check_greedy_sanity(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Each expected answer, asked twice greedily with thinking off: contains the expected
    text, ends as wanted, and the two runs give the same tokens or part only at a near-tie (B15)."""
    answers = _expected_answers(ctx)
    c = ctx.profile.checks
    probs: list[str] = []
    seen: list[JSON] = []
    for qa in answers:
        body = user_chat(
            ctx,
            qa.prompt,
            qa.max_tokens,
            temperature=0,
            seed=c.dsv4.seed,
            **(NO_THINKING if c.thinking.enabled else {}),
            **LOGPROB_FIELDS,
        )
        outs, raw = [], []
        for _ in range(2):
            d = post_chat(ctx, body, deadline, "greedy question", timeout_s=ctx.long_prompt_timeout_s)
            raw.append(d)
            msg, finish = message_of(d)
            outs.append((content_of(msg), finish))
        for i, (content, finish) in enumerate(outs, 1):
            probs += judge_answer(qa, f"{qa.prompt!r} run {i}", content, finish)
        agree = compare_answers(raw[0], raw[1], ("run 1", "run 2"))
        if not agree.ok:
            probs.append(f"{qa.prompt!r}: two greedy runs: {agree.problem}")
        elif agree.identical and outs[0][0] != outs[1][0]:
            probs.append(
                f"{qa.prompt!r}: two greedy runs gave the same tokens but different text: "
                f"{short(outs[0][0], 50)!r} vs {short(outs[1][0], 50)!r}"
            )
        seen.append(
            {
                "prompt": qa.prompt,
                "contains": qa.contains,
                "answers": [o[0] for o in outs],
                "finish_reasons": [o[1] for o in outs],
                "difference": agree.evidence,
            }
        )
    if probs:
        raise Fail("; ".join(probs[:4]), {"problems": probs, "answers": seen})
    return Passed(
        f"{len(seen)} greedy question(s) answered as expected, twice, the same tokens or parting at a "
        "near-tie",
        {"answers": seen},
    )


def _equality_cases(ctx: CheckContext) -> list[tuple[str, JSON]]:
    c = ctx.profile.checks
    off = NO_THINKING if c.thinking.enabled else {}
    cases: list[tuple[str, JSON]] = [
        ("content", user_chat(ctx, "Count from one to twenty in words.", 48, **off)),
    ]
    if c.thinking.enabled:
        think = {"chat_template_kwargs": {"thinking": True}}
        cases.append(("thinking", user_chat(ctx, THINKING_PROMPT, c.thinking.max_tokens, **think)))
    if c.tools.enabled and model_checks_reason(ctx.profile) is None:
        tc = TOOL_CASES[0]
        tools = [TOOLS[n] for n in tc.tools]
        cases.append(
            ("tool call", user_chat(ctx, tc.prompt, 256, tools=tools, tool_choice="auto", **NO_THINKING))
        )
    return [
        (label, {**body, "temperature": 0, "seed": c.dsv4.seed, **LOGPROB_FIELDS}) for label, body in cases
    ]


def _field_problems(label: str, msg: JSON, finish: str | None, st: Any, s_fin: str | None) -> list[str]:
    """Where the stream carried the same tokens as the non-streamed answer: every field equal."""
    probs: list[str] = []
    for fld, ns, ss in (
        ("content", content_of(msg), st.content),
        ("reasoning", reasoning_of(msg), st.reasoning),
    ):
        if ns != ss:
            i = first_difference(ns, ss)
            probs.append(
                f"[{label}] streamed {fld} differs from non-streamed at char {i} (the same tokens): "
                f"stream {short(ss[i : i + 40], 40)!r} vs {short(ns[i : i + 40], 40)!r} "
                f"(lengths {len(ss)} vs {len(ns)})"
            )
    n_calls = [json.loads(tc["function"]["arguments"] or "null") for tc in msg.get("tool_calls") or []]
    try:
        s_calls = [json.loads(tc["arguments"] or "null") for tc in st.tool_calls]
    except ValueError as e:
        s_calls = []
        probs.append(f"[{label}] streamed tool arguments do not join into JSON: {e}")
    if n_calls != s_calls:
        probs.append(
            f"[{label}] streamed tool arguments {short(s_calls, 80)} != non-streamed {short(n_calls, 80)}"
        )
    if finish != s_fin:
        probs.append(f"[{label}] finish_reason stream {s_fin!r} vs non-stream {finish!r}")
    return probs


def check_stream_equality(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Greedy requests (content; thinking and a tool call where the profile allows) streamed
    and not: the same tokens, then the same content, reasoning, tool arguments and
    finish_reason; or tokens parting at a near-tie, and the stream's text before it how each
    non-streamed field begins (B11)."""
    cases = _equality_cases(ctx)
    probs: list[str] = []
    seen: list[JSON] = []
    t = ctx.long_prompt_timeout_s
    for label, body in cases:
        d = post_chat(ctx, body, deadline, f"{label} (non-streamed)", timeout_s=t)
        msg, finish = message_of(d)
        st = stream_chat(ctx, body, deadline, f"{label} (streamed)", timeout_s=t)
        probs += [f"[{label}] {p}" for p in st.framing_problems()]
        s_fin = st.finish_reasons[-1] if st.finish_reasons else None
        agree = compare_stream(d, st.chunks)
        args = "".join(tc["function"]["arguments"] or "" for tc in msg.get("tool_calls") or [])
        if not agree.ok:
            probs.append(f"[{label}] {agree.problem}")
        elif agree.near_tie:
            probs += prefix_problems(
                f"[{label}]",
                agree,
                st.chunks,
                {
                    "content": content_of(msg),
                    "reasoning": reasoning_of(msg),
                    "arguments": args,
                },
            )
        else:
            probs += _field_problems(label, msg, finish, st, s_fin)
        seen.append(
            {
                "case": label,
                "content_chars": len(content_of(msg)),
                "finish_reason": finish,
                "stream_chunks": len(st.chunks),
                "mixed_reasoning_content_chunks": len(st.mixed_chunks),
                "difference": agree.evidence,
            }
        )
    if probs:
        raise Fail("; ".join(probs[:4]), {"problems": probs, "cases": seen})
    mixed = sum(int(x["mixed_reasoning_content_chunks"]) for x in seen)
    note = (
        f"; {mixed} chunk(s) carried reasoning and content together (B11: recorded, allowed)" if mixed else ""
    )
    return Passed(
        f"streamed == non-streamed for {len(cases)} greedy case(s) ({', '.join(x[0] for x in cases)}){note}",
        {"cases": seen},
    )
