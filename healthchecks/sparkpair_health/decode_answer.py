"""Judging one chat completion, whole or streamed: did it decode, and what did it say.

:func:`judge_decode` (a whole answer: HTTP status and body text) and :func:`judge_stream`
(a streamed one, asked with ``stream_options.include_usage``) turn any answer into a
:class:`DecodeAnswer` and never raise: what is not the OpenAI chat-completion shape
(https://platform.openai.com/docs/api-reference/chat/object) is a ``problem``, not an
exception. The readiness gate (:func:`sparkpair_health.suite.decode_probe`) and the gateway's
canary judge with these.

Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from .checks.compare import Step, steps_of_answer, steps_of_chunks
from .client import Streamed


class DecodeAnswer(BaseModel):
    """One judged chat completion (the readiness probe and the gateway's canary), streamed or not.

    Attributes:
        ok: HTTP 200, an OpenAI answer (a JSON object with a ``choices[0]`` object, or a stream
            framed as OpenAI's) and ``usage.completion_tokens`` >= 1.
        problem: why not ``ok`` (one line, key redacted by the caller), else ``""``.
        text: ``choices[0].message.content`` (streamed: the joined ``delta.content``) when it
            is a string, else ``""``.
        finish_reason: ``choices[0].finish_reason`` (streamed: the last one) when it is a
            string, else ``None``.
        completion_tokens: ``usage.completion_tokens`` (streamed: the usage chunk's) when it is
            an int, else ``None``.
        id: the answer's ``id`` (streamed: every chunk's) when it is a non-empty string, else ``None``.
        created: the answer's ``created`` (unix seconds) when it is an int, else ``None``.
        streamed: whether the answer came as a stream.
        steps: the generated tokens with their logprobs when the request asked for them
            (:mod:`sparkpair_health.checks.compare`), else ``None``.
    """

    ok: bool
    problem: str = ""
    text: str = ""
    finish_reason: str | None = None
    completion_tokens: int | None = None
    id: str | None = None
    created: int | None = None
    streamed: bool = False
    steps: list[Step] | None = None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def judge_decode(status: int, body: str) -> DecodeAnswer:
    """Judge a chat-completion answer from its HTTP status and body text; never raises.

    Any body shape is handled (``[]``, a string, ``{"usage": "x"}``, wrong types anywhere):
    what is not the OpenAI shape is a ``problem``, not an exception.
    """
    if status != 200:
        return DecodeAnswer(ok=False, problem=f"HTTP {status}, wanted 200: {body[:300]!r}")
    try:
        d = json.loads(body)
    except ValueError:
        return DecodeAnswer(ok=False, problem=f"HTTP 200 but the body is not JSON: {body[:200]!r}")
    if not isinstance(d, dict):
        return DecodeAnswer(
            ok=False, problem=f"HTTP 200 but the body is JSON {type(d).__name__}, wanted an object"
        )
    choices = d.get("choices")
    ch = choices[0] if isinstance(choices, list) and choices else None
    usage = d.get("usage")
    n = _int(usage.get("completion_tokens")) if isinstance(usage, dict) else None
    ident = d.get("id") if isinstance(d.get("id"), str) and d.get("id") else None
    created = _int(d.get("created"))
    if not isinstance(ch, dict):
        return DecodeAnswer(
            ok=False,
            completion_tokens=n,
            id=ident,
            created=created,
            problem=f"HTTP 200 without a choices[0] object: {body[:200]!r}",
        )
    msg = ch.get("message")
    text = msg.get("content") if isinstance(msg, dict) else None
    fr = ch.get("finish_reason")
    ans = DecodeAnswer(
        ok=False,
        text=text if isinstance(text, str) else "",
        finish_reason=fr if isinstance(fr, str) else None,
        completion_tokens=n,
        id=ident,
        created=created,
        steps=steps_of_answer(d),
    )
    if n is None or n < 1:
        ans.problem = f"HTTP 200 without a decoded token (usage.completion_tokens={n!r}): {body[:200]!r}"
        return ans
    ans.ok = True
    return ans


def judge_stream(got: Streamed) -> DecodeAnswer:
    """Judge a streamed chat-completion answer (asked with ``stream_options.include_usage``) as
    :func:`judge_decode` judges a whole one; never raises.

    Beyond a non-200 answer or another content type, a problem is: a stream that ends without
    content (no chunk, no content delta and no usage before ``[DONE]``), framing defects
    (:meth:`~sparkpair_health.sse.OpenAIStream.framing_problems`), chunks naming different
    ``id`` values, or no decoded token in the usage chunk.
    """
    s = got.stream
    r = got.response
    if s is None:
        if r.status_code != 200:
            return DecodeAnswer(
                ok=False, streamed=True, problem=f"HTTP {r.status_code}, wanted 200: {r.text[:300]!r}"
            )
        ctype = r.headers.get("content-type", "")
        return DecodeAnswer(
            ok=False,
            streamed=True,
            problem=f"HTTP 200 but content-type {ctype!r}, wanted text/event-stream: {r.text[:200]!r}",
        )
    ids = {c.get("id") for c in s.chunks}
    first = s.chunks[0] if s.chunks else {}
    ident = first.get("id") if isinstance(first.get("id"), str) and first.get("id") else None
    usage = s.usage_chunks[-1].get("usage") if s.usage_chunks else None
    n = _int(usage.get("completion_tokens")) if isinstance(usage, dict) else None
    ans = DecodeAnswer(
        ok=False,
        streamed=True,
        text=s.content,
        finish_reason=s.finish_reasons[-1] if s.finish_reasons else None,
        completion_tokens=n,
        id=ident,
        created=_int(first.get("created")),
        steps=steps_of_chunks(s.chunks),
    )
    framing = s.framing_problems(want_usage=True)
    if not s.content and not s.tool_calls and not s.usage_chunks:
        ans.problem = (
            f"the stream ended without content: {len(s.chunks)} chunk(s), no content delta and no usage "
            f"before {s.done_count} 'data: [DONE]'" + (f" ({'; '.join(framing)})" if framing else "")
        )
    elif framing:
        ans.problem = "stream framing: " + "; ".join(framing)
    elif len(ids) > 1:
        ans.problem = (
            f"the stream's chunks carry {len(ids)} different ids {sorted(map(str, ids))[:3]}; wanted one"
        )
    elif n is None or n < 1:
        ans.problem = f"the stream's usage chunk has no decoded token (usage.completion_tokens={n!r})"
    else:
        ans.ok = True
    return ans
