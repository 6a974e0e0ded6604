"""The check framework: the check type, its outcomes, its context, and the request helpers.

A check is a function ``(ctx, deadline) -> Passed`` that raises :class:`Fail` when the
server misbehaves, :class:`Skip` when the check does not apply, and lets
:class:`~sparkpair_health.client.SuiteError` through when the suite cannot judge. The
runner (:func:`sparkpair_health.suite.run_check`) turns those into
:class:`~sparkpair_health.report.CheckResult`. Every request goes through the one
:class:`~sparkpair_health.client.HealthClient`, bounded by the check's
:class:`~sparkpair_health.client.Deadline`.

Every request is greedy (``temperature 0``, fixed ``seed``) so that two requests, or a
streamed and a non-streamed one, must give the same text (docs/reference/field-bugs.md B11, B15).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from sparkpair_serving.profile import Profile

from ..client import Deadline, HealthClient, ServerGone, engine_dead_in
from ..sse import OpenAIStream

JSON = dict[str, Any]
"""A decoded JSON object (an OpenAI request or answer body)."""


class Fail(Exception):
    """The server did something the check forbids.

    Args:
        message: what was seen and what was wanted.
        evidence: facts behind the verdict (JSON-serialisable).
    """

    def __init__(self, message: str, evidence: JSON | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence or {}


class Skip(Exception):
    """The check does not apply; the message says why."""


@dataclass
class Passed:
    """A passing outcome: a one-line message and its evidence."""

    message: str
    evidence: JSON = field(default_factory=dict)


@dataclass
class CheckContext:
    """What every check needs.

    Attributes:
        client: the HTTP client.
        model: the served model name every request uses.
        profile: the model profile (which checks apply, request settings).
        request_timeout_s: read timeout of one ordinary request, seconds.
        long_prompt_timeout_s: read timeout of a long-prompt (or thinking) request, seconds.
        state: facts learned by earlier checks (``max_model_len``, token ids).
    """

    client: HealthClient
    model: str
    profile: Profile
    request_timeout_s: float = 60.0
    long_prompt_timeout_s: float = 120.0
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: id, one-line demand, what it catches, its function, its timeout (s)."""

    id: str
    title: str
    catches: str
    fn: Callable[[CheckContext, Deadline], Passed]
    timeout_s: float = 60.0


# --------------------------------------------------------------------------- what must not leak

DSML_MARKERS = ("DSML", "<tool_call>", "</tool_call>", "\uff5c")
"""Tool-call markup that must never reach ``content`` (B10; both bar variants: the DSML
full-width bar U+FF5C, and the ``<tool_call>`` tags of hermes-style parsers)."""

LEAK_PATTERNS: dict[str, re.Pattern[str]] = {
    "think tag": re.compile(r"<\s*/?\s*think\s*>", re.IGNORECASE),
    # the start of a think tag at the very end of a field: a tag cut there (by the parser
    # or the stream), its rest in the next field or chunk
    "cut think tag": re.compile(r"<\s*/?\s*th(?:i(?:nk?)?)?\s*$", re.IGNORECASE),
    # Both bar variants of DSML: full-width U+FF5C and ASCII '|' (B10).
    "DSML marker": re.compile(r"[｜|]\s*DSML\s*[｜|]"),
    "special token": re.compile(r"<｜[^<>｜\n]{1,64}｜>|<\|[A-Za-z_▁][^<>|\n]{0,63}\|>"),
}
"""What must never reach ``content`` or ``reasoning``: think tags (whole, or cut at a field's
end), DSML markup, special tokens."""

NO_THINKING: JSON = {"chat_template_kwargs": {"thinking": False, "enable_thinking": False}}
"""Request fields that turn DeepSeek-V4 thinking off (``enable_thinking`` too: vLLM's request
merge ORs the two keys, docs/reference/vllm-0.33.md)."""


def find_leaks(text: str | None) -> list[str]:
    """Names and first matches of every :data:`LEAK_PATTERNS` entry found in ``text``."""
    if not text:
        return []
    return [f"{name} {m.group(0)!r}" for name, rx in LEAK_PATTERNS.items() if (m := rx.search(text))]


def short(text: object, n: int = 160) -> str:
    """``text`` (JSON-dumped when not a string) cut to ``n`` characters with an ellipsis."""
    s = text if isinstance(text, str) else json.dumps(text)
    return s if len(s) <= n else s[:n] + "…"


# --------------------------------------------------------------------------- request helpers


def answer_json(resp: httpx.Response, what: str) -> Any:
    """The JSON body of ``resp``.

    Raises:
        Fail: the body is not JSON.
    """
    try:
        return resp.json()
    except (json.JSONDecodeError, ValueError):
        raise Fail(f"{what}: HTTP {resp.status_code} body is not JSON: {resp.text[:200]!r}") from None


def raise_for_status(resp: httpx.Response, what: str, wanted: int = 200) -> None:
    """Return when ``resp`` has status ``wanted``.

    Raises:
        ServerGone: a 5xx whose body carries vLLM's engine-dead error.
        Fail: any other status (named with the body).
    """
    if resp.status_code == wanted:
        return
    body = resp.text[:500]
    if resp.status_code >= 500 and engine_dead_in(body):
        raise ServerGone(f"engine died: {what} answered HTTP {resp.status_code}: {body!r}")
    raise Fail(
        f"{what} answered HTTP {resp.status_code}, wanted {wanted}: {body[:300]!r}",
        {"status": resp.status_code, "body": body},
    )


def base_chat(ctx: CheckContext, prompt: str | None = None, max_tokens: int | None = None) -> JSON:
    """A greedy chat request body for the profile's model and request settings."""
    c = ctx.profile.checks
    body: JSON = {
        "model": ctx.model,
        "messages": [{"role": "user", "content": prompt or c.prompt}],
        "max_tokens": max_tokens or c.max_tokens,
        "temperature": 0.0,
        "seed": 0,
    }
    body.update(copy.deepcopy(c.request_extra))
    return body


def user_chat(ctx: CheckContext, prompt: str, max_tokens: int, **fields: Any) -> JSON:
    """A chat request body with only the model, one user message, ``max_tokens`` and ``fields``
    (no profile ``request_extra``: the model checks set every field they depend on)."""
    return {
        "model": ctx.model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        **fields,
    }


def post_chat(
    ctx: CheckContext, body: JSON, deadline: Deadline, what: str, timeout_s: float | None = None
) -> JSON:
    """POST a non-streaming chat completion; return the JSON answer.

    ``timeout_s`` (default ``ctx.request_timeout_s``) bounds the request, capped by what is
    left of ``deadline``.

    Raises:
        Fail: a non-200 answer, a non-JSON body, or no ``choices``.
        ServerGone: the answer says the engine is dead, or the connection dropped.
        RequestTimeout: no answer within the timeout or the deadline.
    """
    t = ctx.request_timeout_s if timeout_s is None else timeout_s
    r = ctx.client.post("/v1/chat/completions", body, timeout_s=min(t, deadline.left()))
    raise_for_status(r, what)
    d = answer_json(r, what)
    if not isinstance(d, dict) or not d.get("choices"):
        raise Fail(f"{what}: answer has no choices: {json.dumps(d)[:300]}", {"answer": d})
    count_generated(ctx, body, d.get("usage"))
    return d


STATE_GENERATED = "generated_tokens"
"""``CheckContext.state`` key: completion tokens the suite's requests generated, by kind
(``chat``: content and reasoning; ``tool``: requests that offer tools), from each answer's
``usage``: the suite's own mix, which the speculation floor is derived from."""


def count_generated(ctx: CheckContext, body: JSON, usage: Any) -> None:
    """Add an answer's ``usage.completion_tokens`` to :data:`STATE_GENERATED` under its kind."""
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n > 0:
        kind = "tool" if body.get("tools") else "chat"
        mix = ctx.state.setdefault(STATE_GENERATED, {"chat": 0, "tool": 0})
        mix[kind] += n


def stream_chat(
    ctx: CheckContext, body: JSON, deadline: Deadline, what: str, timeout_s: float | None = None
) -> OpenAIStream:
    """POST a streaming chat completion; return the parsed stream.

    ``timeout_s`` (default ``ctx.request_timeout_s``) is the longest gap between chunks;
    ``deadline`` bounds the whole stream.

    Raises:
        Fail: a non-200 answer or a content type other than ``text/event-stream``.
        ServerGone / RequestTimeout: as :func:`post_chat`.
    """
    b = dict(body, stream=True)
    gap = ctx.request_timeout_s if timeout_s is None else timeout_s
    got = ctx.client.stream("/v1/chat/completions", b, deadline=deadline, chunk_timeout_s=gap)
    if got.stream is None:
        raise_for_status(got.response, what)
        ctype = got.response.headers.get("content-type", "")
        raise Fail(
            f"{what}: content-type {ctype!r}, wanted text/event-stream", {"body": got.response.text[:300]}
        )
    if got.stream.usage_chunks:
        count_generated(ctx, body, got.stream.usage_chunks[-1].get("usage"))
    return got.stream


def message_of(d: JSON) -> tuple[JSON, str | None]:
    """``choices[0].message`` and ``finish_reason`` of a chat completion."""
    ch = d["choices"][0]
    msg: JSON = ch.get("message") or {}
    fr = ch.get("finish_reason")
    return msg, fr if isinstance(fr, str) else None


def reasoning_of(msg: JSON) -> str:
    """The chain of thought: ``message.reasoning`` (vLLM) or ``reasoning_content`` (older); ``""``."""
    r = msg.get("reasoning")
    if r is None:
        r = msg.get("reasoning_content")
    return r if isinstance(r, str) else ""


def content_of(msg: JSON) -> str:
    """``message.content`` as a string (``""`` when null or not a string)."""
    c = msg.get("content")
    return c if isinstance(c, str) else ""


def check_usage(d: JSON, max_tokens: int, what: str) -> JSON:
    """The answer's ``usage``, checked: positive prompt tokens, 1..max_tokens completion
    tokens, total = prompt + completion.

    Raises:
        Fail: a field missing or inconsistent.
    """
    u = d.get("usage")
    if not isinstance(u, dict):
        raise Fail(f"{what}: no usage object in the answer", {"answer": d})
    p, c, t = u.get("prompt_tokens"), u.get("completion_tokens"), u.get("total_tokens")
    if not (isinstance(p, int) and p > 0):
        raise Fail(f"{what}: usage.prompt_tokens is {p!r}, wanted a positive integer", {"usage": u})
    if not (isinstance(c, int) and 1 <= c <= max_tokens):
        raise Fail(
            f"{what}: usage.completion_tokens is {c!r}, wanted 1..max_tokens={max_tokens}", {"usage": u}
        )
    if t != p + c:
        raise Fail(f"{what}: usage.total_tokens is {t!r}, wanted prompt+completion={p + c}", {"usage": u})
    return u


def server_default_chat_kwargs(args: list[str]) -> JSON | None:
    """The JSON object of ``--default-chat-template-kwargs`` in a server's arguments, if any."""
    for i, a in enumerate(args):
        val = None
        if a == "--default-chat-template-kwargs" and i + 1 < len(args):
            val = args[i + 1]
        elif a.startswith("--default-chat-template-kwargs="):
            val = a.split("=", 1)[1]
        if val is not None:
            try:
                d = json.loads(val)
            except ValueError:
                return None
            return d if isinstance(d, dict) else None
    return None


def first_difference(a: str, b: str) -> int:
    """Index of the first character where ``a`` and ``b`` differ (the shorter length if one
    is a prefix of the other)."""
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def model_checks_reason(profile: Profile) -> str | None:
    """Why a check that needs a trained model does not apply to ``profile`` (``None``: it does)."""
    sem = profile.checks.semantic
    return None if sem.enabled else (sem.skip_reason or "the profile disables semantic checks")
