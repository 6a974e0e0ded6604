"""The API basics: model listing, a chat completion, streaming framing and usage.

Every check is an ordinary check of :mod:`sparkpair_health.checks.base`.
"""

from __future__ import annotations

import json
from typing import Any

from ..client import Deadline
from .base import (
    CheckContext,
    Fail,
    Passed,
    answer_json,
    base_chat,
    check_usage,
    first_difference,
    message_of,
    post_chat,
    raise_for_status,
    stream_chat,
)
from .compare import LOGPROB_FIELDS, compare_stream, prefix_problems


def check_models(ctx: CheckContext, deadline: Deadline) -> Passed:
    """``/v1/models`` lists exactly the configured served name; its max_model_len matches the profile."""
    r = ctx.client.get("/v1/models", timeout_s=min(ctx.request_timeout_s, deadline.left()))
    raise_for_status(r, "GET /v1/models")
    d = answer_json(r, "GET /v1/models")
    data = d.get("data") if isinstance(d, dict) else None
    if not isinstance(data, list):
        raise Fail(f"GET /v1/models: no 'data' list in {json.dumps(d)[:200]}", {"answer": d})
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    entry = next((m for m in data if isinstance(m, dict) and m.get("id") == ctx.model), None)
    if entry is None:
        raise Fail(
            f"served_model_name {ctx.model!r} is not listed by /v1/models (listed: {ids}); every request "
            "of the suite uses that name",
            {"listed": ids},
        )
    ev: dict[str, Any] = {"listed": ids}
    mml = entry.get("max_model_len")
    want = ctx.profile.server.max_model_len
    if isinstance(mml, int):
        ctx.state["max_model_len"] = mml
        ev["max_model_len"] = mml
        if mml != want:
            raise Fail(
                f"/v1/models reports max_model_len={mml} for {ctx.model!r}; the profile "
                f"{ctx.profile.name!r} sets server.max_model_len={want}",
                ev,
            )
    return Passed(f"{ctx.model!r} listed" + (f", max_model_len {mml}" if mml else ""), ev)


def check_chat(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A greedy non-streaming chat completion returns text, a finish_reason and consistent usage."""
    body = base_chat(ctx)
    d = post_chat(ctx, body, deadline, "POST /v1/chat/completions")
    msg, fr = message_of(d)
    content = msg.get("content")
    ev = {"finish_reason": fr, "content": (content or "")[:200], "usage": d.get("usage")}
    if d.get("model") != ctx.model:
        raise Fail(f"answer names model {d.get('model')!r}, wanted {ctx.model!r}", ev)
    if fr not in ("stop", "length"):
        raise Fail(f"finish_reason is {fr!r}, wanted 'stop' or 'length'", ev)
    usage = check_usage(d, body["max_tokens"], "chat")
    if not isinstance(content, str) or (
        not content and not msg.get("reasoning") and not msg.get("reasoning_content")
    ):
        raise Fail(
            f"message.content is {content!r} after {usage['completion_tokens']} completion tokens; "
            "wanted text",
            ev,
        )
    if fr == "length" and usage["completion_tokens"] != body["max_tokens"]:
        raise Fail(
            f"finish_reason 'length' but completion_tokens={usage['completion_tokens']} < "
            f"max_tokens={body['max_tokens']}",
            ev,
        )
    ctx.state["chat_text"] = content
    return Passed(f"{usage['completion_tokens']} tokens, finish_reason {fr}", ev)


def check_stream(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Streaming with include_usage: one [DONE], one usage chunk last, the same tokens and text as
    non-streamed (or parting at a near-tie, :mod:`.compare`)."""
    body = {**base_chat(ctx), **LOGPROB_FIELDS}
    ref = post_chat(ctx, body, deadline, "non-streamed reference")
    ref_msg, ref_fr = message_of(ref)
    ref_text = ref_msg.get("content") or ""
    s = stream_chat(ctx, dict(body, stream_options={"include_usage": True}), deadline, "streamed chat")
    ev: dict[str, Any] = {
        "chunks": len(s.chunks),
        "done_count": s.done_count,
        "usage_chunks": len(s.usage_chunks),
        "finish_reasons": s.finish_reasons,
        "streamed_text": s.content[:200],
        "non_streamed_text": ref_text[:200],
    }
    problems = s.framing_problems(want_usage=True)
    agree = compare_stream(ref, s.chunks)
    ev["difference"] = agree.evidence
    if not agree.ok:
        problems.append(f"streamed text vs non-streamed: {agree.problem}")
    elif agree.near_tie:  # judged up to the near-tie: the text before it, framing, prompt usage
        problems += prefix_problems("", agree, s.chunks, {"content": ref_text})
    if agree.identical and s.finish_reasons != [ref_fr]:
        problems.append(
            f"stream finish_reasons {s.finish_reasons}, wanted exactly [{ref_fr!r}] as non-streamed"
        )
    if agree.identical and s.content != ref_text:
        i = first_difference(s.content, ref_text)
        problems.append(
            f"streamed text differs from non-streamed text of the same greedy request at char {i} "
            f"(streamed {len(s.content)} chars, non-streamed {len(ref_text)})"
        )
    if s.usage_chunks:
        su = s.usage_chunks[-1].get("usage") or {}
        ru = ref.get("usage") or {}
        ev["stream_usage"] = su
        for k in ("prompt_tokens", "completion_tokens") if agree.identical else ("prompt_tokens",):
            if su.get(k) != ru.get(k):
                problems.append(f"stream usage.{k}={su.get(k)} but non-streamed usage.{k}={ru.get(k)}")
    if s.mixed_chunks:
        ev["warning"] = (
            f"{len(s.mixed_chunks)} chunk(s) carry both reasoning and content (B11; recorded, allowed)"
        )
    if problems:
        raise Fail("; ".join(problems), ev)
    return Passed(f"{len(s.chunks)} chunks, one [DONE], one usage chunk, text equal to non-streamed", ev)


def check_stream_no_usage(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Streaming without include_usage (false, ``{}``, absent): no usage chunk, one [DONE]."""
    body = base_chat(ctx)
    ev: dict[str, Any] = {}
    problems: list[str] = []
    for label, extra in (
        ("include_usage=false", {"stream_options": {"include_usage": False}}),
        ("stream_options={}", {"stream_options": {}}),  # usage leaked here before vllm PR #36379
        ("no stream_options", {}),
    ):
        s = stream_chat(ctx, dict(body, **extra), deadline, f"streamed chat ({label})")
        ev[label] = {"chunks": len(s.chunks), "done_count": s.done_count, "usage_chunks": len(s.usage_chunks)}
        problems += [f"{label}: {p}" for p in s.framing_problems(want_usage=False)]
    if problems:
        raise Fail("; ".join(problems), ev)
    return Passed("no usage chunk when not asked for, one [DONE] each", ev)
