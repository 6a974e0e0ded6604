"""The functional checks of the health suite.

Each check is a function ``(ctx, deadline) -> Passed`` that raises :class:`Fail` when the
server misbehaves, :class:`Skip` when the check does not apply, and lets
:class:`~sparkpair_health.client.SuiteError` through when the suite cannot judge. The
runner (:mod:`sparkpair_health.suite`) turns those into :class:`~sparkpair_health.report.CheckResult`.

Every request is greedy (``temperature 0``, fixed ``seed``) so that two requests, or a
streamed and a non-streamed one, must give the same text (field-bugs.md B11, B15).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jsonschema

from .client import Deadline, HealthClient, ServerGone, engine_dead_in
from .profile import Profile
from .sse import assemble_tool_calls, parse_openai_stream


class Fail(Exception):
    """The server did something the check forbids.

    Args:
        message: what was seen and what was wanted.
        evidence: facts behind the verdict (JSON-serialisable).
    """

    def __init__(self, message: str, evidence: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence or {}


class Skip(Exception):
    """The check does not apply; the message says why."""


@dataclass
class Passed:
    """A passing outcome: a one-line message and its evidence."""

    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckContext:
    """What every check needs.

    Attributes:
        client: the HTTP client.
        model: the served model name every request uses.
        profile: the model profile (which checks apply, request settings).
        request_timeout_s: read timeout of one ordinary request, seconds.
        long_prompt_timeout_s: read timeout of a long-prompt request, seconds.
        state: facts learned by earlier checks (``max_model_len``).
    """

    client: HealthClient
    model: str
    profile: Profile
    request_timeout_s: float = 60.0
    long_prompt_timeout_s: float = 120.0
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckSpec:
    """A registered check: id, one-line demand, what it catches, and its function."""

    id: str
    title: str
    catches: str
    fn: Callable[[CheckContext, Deadline], Passed]
    timeout_s: float = 60.0


# --------------------------------------------------------------------------- helpers


def _json(resp: httpx.Response, what: str) -> Any:
    try:
        return resp.json()
    except (json.JSONDecodeError, ValueError):
        raise Fail(f"{what}: HTTP {resp.status_code} body is not JSON: {resp.text[:200]!r}") from None


def _raise_for_status(resp: httpx.Response, what: str, wanted: int = 200) -> None:
    if resp.status_code == wanted:
        return
    body = resp.text[:500]
    if resp.status_code >= 500 and engine_dead_in(body):
        raise ServerGone(f"engine died: {what} answered HTTP {resp.status_code}: {body!r}")
    raise Fail(
        f"{what} answered HTTP {resp.status_code}, wanted {wanted}: {body[:300]!r}",
        {"status": resp.status_code, "body": body},
    )


def base_chat(ctx: CheckContext, prompt: str | None = None, max_tokens: int | None = None) -> dict[str, Any]:
    """A greedy chat request body for the profile's model and settings."""
    c = ctx.profile.checks
    body: dict[str, Any] = {
        "model": ctx.model,
        "messages": [{"role": "user", "content": prompt or c.prompt}],
        "max_tokens": max_tokens or c.max_tokens,
        "temperature": 0.0,
        "seed": 0,
    }
    body.update(copy.deepcopy(c.request_extra))
    return body


def post_chat(ctx: CheckContext, body: dict[str, Any], deadline: Deadline, what: str) -> dict[str, Any]:
    """POST a non-streaming chat completion; return the JSON answer.

    Raises:
        Fail: a non-200 answer, a non-JSON body, or no ``choices``.
        ServerGone: the answer says the engine is dead, or the connection dropped.
        RequestTimeout: no answer within the deadline.
    """
    r = ctx.client.post("/v1/chat/completions", body, timeout_s=min(ctx.request_timeout_s, deadline.left()))
    _raise_for_status(r, what)
    d = _json(r, what)
    if not isinstance(d, dict) or not d.get("choices"):
        raise Fail(f"{what}: answer has no choices: {json.dumps(d)[:300]}", {"answer": d})
    return d


def stream_chat(ctx: CheckContext, body: dict[str, Any], deadline: Deadline, what: str) -> Any:
    """POST a streaming chat completion; return the parsed :class:`~sparkpair_health.sse.OpenAIStream`.

    Raises:
        Fail: a non-200 answer or a content type other than ``text/event-stream``.
        ServerGone / RequestTimeout: as :func:`post_chat`.
    """
    b = dict(body, stream=True)
    with ctx.client.stream_lines(
        "/v1/chat/completions", b, deadline=deadline, chunk_timeout_s=ctx.request_timeout_s
    ) as (resp, lines):
        if resp.status_code != 200:
            resp.read()
            _raise_for_status(resp, what)
        ctype = resp.headers.get("content-type", "")
        if "text/event-stream" not in ctype:
            resp.read()
            raise Fail(f"{what}: content-type {ctype!r}, wanted text/event-stream", {"body": resp.text[:300]})
        return parse_openai_stream(lines)


def _message(d: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    ch = d["choices"][0]
    return ch.get("message") or {}, ch.get("finish_reason")


def _check_usage(d: dict[str, Any], max_tokens: int, what: str) -> dict[str, Any]:
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


# --------------------------------------------------------------------------- checks


def check_models(ctx: CheckContext, deadline: Deadline) -> Passed:
    """``/v1/models`` lists exactly the configured served name; its max_model_len matches the profile."""
    r = ctx.client.get("/v1/models", timeout_s=min(ctx.request_timeout_s, deadline.left()))
    _raise_for_status(r, "GET /v1/models")
    d = _json(r, "GET /v1/models")
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
    msg, fr = _message(d)
    content = msg.get("content")
    ev = {"finish_reason": fr, "content": (content or "")[:200], "usage": d.get("usage")}
    if d.get("model") != ctx.model:
        raise Fail(f"answer names model {d.get('model')!r}, wanted {ctx.model!r}", ev)
    if fr not in ("stop", "length"):
        raise Fail(f"finish_reason is {fr!r}, wanted 'stop' or 'length'", ev)
    usage = _check_usage(d, body["max_tokens"], "chat")
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
    """Streaming with include_usage: one [DONE], one usage chunk last, text equal to non-streamed."""
    body = base_chat(ctx)
    ref = post_chat(ctx, body, deadline, "non-streamed reference")
    ref_msg, ref_fr = _message(ref)
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
    if s.finish_reasons != [ref_fr]:
        problems.append(
            f"stream finish_reasons {s.finish_reasons}, wanted exactly [{ref_fr!r}] as non-streamed"
        )
    if s.content != ref_text:
        i = next(
            (k for k, (a, b) in enumerate(zip(s.content, ref_text, strict=False)) if a != b),
            min(len(s.content), len(ref_text)),
        )
        problems.append(
            f"streamed text differs from non-streamed text of the same greedy request at char {i} "
            f"(streamed {len(s.content)} chars, non-streamed {len(ref_text)})"
        )
    if s.usage_chunks:
        su = s.usage_chunks[-1].get("usage") or {}
        ru = ref.get("usage") or {}
        ev["stream_usage"] = su
        for k in ("prompt_tokens", "completion_tokens"):
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


def check_determinism(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Two identical greedy requests give identical text (B15)."""
    body = base_chat(
        ctx, prompt="Count from one to ten: one, two,", max_tokens=max(ctx.profile.checks.max_tokens, 32)
    )
    a = post_chat(ctx, body, deadline, "first greedy request")
    b = post_chat(ctx, body, deadline, "second greedy request")
    ta, tb = _message(a)[0].get("content") or "", _message(b)[0].get("content") or ""
    ev = {"first": ta[:200], "second": tb[:200], "usage": [a.get("usage"), b.get("usage")]}
    if ta != tb:
        raise Fail("two identical greedy requests gave different text", ev)
    if not ta:
        raise Fail("two identical greedy requests both gave empty text; wanted text", ev)
    return Passed(f"identical {len(ta)}-char answers", ev)


# ---- tools

TOOL_WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Berlin", "Tokyo"]},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TOOL_TIME: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a city.",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
"""Strict tools with bounded strings (``enum``, ``maxLength``) and ``additionalProperties: false``:
with them a grammar-constrained call is always finite."""

DSML_MARKERS = ("DSML", "<tool_call>", "</tool_call>", "\uff5c")
"""Tool-call markup that must never leak into content (B10; both bar variants)."""


def _whitespace_bias(ctx: CheckContext, deadline: Deadline) -> dict[str, float]:
    if "whitespace_bias" in ctx.state:
        return dict(ctx.state["whitespace_bias"])
    bias: dict[str, float] = {}
    for ch in (" ", "\n", "\r", "\t"):
        r = ctx.client.post(
            "/tokenize",
            {"model": ctx.model, "prompt": ch, "add_special_tokens": False},
            timeout_s=min(ctx.request_timeout_s, deadline.left()),
        )
        _raise_for_status(r, "POST /tokenize (profile checks.tools.suppress_whitespace_tokens)")
        toks = _json(r, "POST /tokenize").get("tokens") or []
        if len(toks) == 1:
            bias[str(toks[0])] = -100.0
    ctx.state["whitespace_bias"] = bias
    return bias


def tool_request(ctx: CheckContext, deadline: Deadline, tool_choice: Any) -> dict[str, Any]:
    """The forced tool-call request body (two strict tools, the profile's tool settings)."""
    spec = ctx.profile.checks.tools
    body = base_chat(ctx, prompt="What is the weather in Paris, in celsius?", max_tokens=spec.max_tokens)
    body["tools"] = [copy.deepcopy(TOOL_WEATHER), copy.deepcopy(TOOL_TIME)]
    body["tool_choice"] = tool_choice
    if spec.suppress_whitespace_tokens:
        body["logit_bias"] = _whitespace_bias(ctx, deadline)
    body.update(copy.deepcopy(spec.request_extra))
    return body


def judge_tool_calls(
    answer: dict[str, Any], tools: list[dict[str, Any]], want_name: str | None, finish_reasons: list[str]
) -> tuple[list[str], dict[str, Any]]:
    """Judge a non-streamed forced tool-call answer.

    Returns ``(problems, evidence)``; no problems means a schema-valid call: at least one
    ``tool_calls`` entry of type function, a known (or the wanted) name, ``arguments`` a JSON
    text that parses to an object valid against the tool's ``parameters`` (jsonschema), a
    finish_reason in ``finish_reasons``, and no tool-call markup in ``content``.
    """
    ch = answer["choices"][0]
    msg = ch.get("message") or {}
    fr = ch.get("finish_reason")
    calls = msg.get("tool_calls") or []
    content = msg.get("content") or ""
    ev: dict[str, Any] = {
        "finish_reason": fr,
        "tool_calls": calls,
        "content": content[:300],
        "usage": answer.get("usage"),
    }
    problems: list[str] = []
    if fr not in finish_reasons:
        problems.append(f"finish_reason is {fr!r}, wanted {' or '.join(map(repr, finish_reasons))}")
    if not calls:
        problems.append("no tool_calls in the answer, though the tool choice forces a call")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for i, tc in enumerate(calls):
        fn = tc.get("function") or {}
        name, raw = fn.get("name"), fn.get("arguments")
        if tc.get("type") != "function":
            problems.append(f"tool_calls[{i}].type is {tc.get('type')!r}, wanted 'function'")
        if want_name is not None and name != want_name:
            problems.append(f"tool_calls[{i}] calls {name!r}, wanted the named function {want_name!r}")
        if name not in schemas:
            problems.append(
                f"tool_calls[{i}] calls {name!r}, which is not one of the tools {sorted(schemas)}"
            )
            continue
        if not isinstance(raw, str):
            problems.append(
                f"tool_calls[{i}].function.arguments is {type(raw).__name__}, wanted a JSON string"
            )
            continue
        try:
            args = json.loads(raw)
        except json.JSONDecodeError as e:
            problems.append(f"tool_calls[{i}].arguments is not JSON ({e.msg} at {e.pos}): {raw[:120]!r}")
            continue
        try:
            jsonschema.validate(args, schemas[name])
        except jsonschema.ValidationError as e:
            problems.append(f"tool_calls[{i}].arguments {raw[:120]!r} violate the {name} schema: {e.message}")
    leaked = [m for m in DSML_MARKERS if m in content]
    if leaked:
        problems.append(f"content carries tool-call markup {leaked} (B10)")
    return problems, ev


def _tool_check(
    ctx: CheckContext, deadline: Deadline, tool_choice: Any, want_name: str | None, finish_reasons: list[str]
) -> Passed:
    spec = ctx.profile.checks.tools
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables tool checks (checks.tools.enabled: false)")
    body = tool_request(ctx, deadline, tool_choice)
    d = post_chat(ctx, body, deadline, "forced tool call")
    problems, ev = judge_tool_calls(d, body["tools"], want_name, finish_reasons)
    ev["request"] = {k: body[k] for k in ("tool_choice", "max_tokens") if k in body}
    if "logit_bias" in body:
        ev["request"]["logit_bias"] = body["logit_bias"]
    if problems:
        raise Fail("; ".join(problems), ev)
    # The same request streamed: reassembled arguments must parse to the same object (B11).
    s = stream_chat(ctx, body, deadline, "streamed forced tool call")
    streamed = assemble_tool_calls(s.tool_call_deltas)
    ev["streamed_tool_calls"] = streamed
    sproblems = s.framing_problems(want_usage=None)
    want = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in d["choices"][0]["message"]["tool_calls"]
    ]
    try:
        got = [(c["name"], json.loads(c["arguments"])) for c in streamed]
    except json.JSONDecodeError as e:
        got = []
        sproblems.append(f"streamed tool arguments do not parse as JSON: {e}")
    if got != want:
        sproblems.append(f"streamed tool calls {got} differ from non-streamed {want}")
    if s.finish_reasons != [d["choices"][0]["finish_reason"]]:
        sproblems.append(
            f"streamed finish_reasons {s.finish_reasons}, non-streamed {d['choices'][0]['finish_reason']!r}"
        )
    if sproblems:
        raise Fail("; ".join(sproblems), ev)
    calls = d["choices"][0]["message"]["tool_calls"]
    return Passed(
        f"{calls[0]['function']['name']}({calls[0]['function']['arguments']}) valid, "
        f"finish_reason {d['choices'][0]['finish_reason']}; stream agrees",
        ev,
    )


def check_tool_required(ctx: CheckContext, deadline: Deadline) -> Passed:
    """``tool_choice: required`` with strict tools: schema-valid arguments, finish_reason tool_calls."""
    return _tool_check(ctx, deadline, "required", None, ["tool_calls"])


def check_tool_named(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A named ``tool_choice`` with strict tools: that function, schema-valid arguments."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    return _tool_check(ctx, deadline, choice, "get_weather", ctx.profile.checks.tools.named_finish_reasons)


# ---- long prompts


def _max_model_len(ctx: CheckContext, deadline: Deadline) -> int:
    if "max_model_len" not in ctx.state:
        r = ctx.client.get("/v1/models", timeout_s=min(ctx.request_timeout_s, deadline.left()))
        _raise_for_status(r, "GET /v1/models")
        for m in _json(r, "GET /v1/models").get("data") or []:
            if m.get("id") == ctx.model and isinstance(m.get("max_model_len"), int):
                ctx.state["max_model_len"] = m["max_model_len"]
    return int(ctx.state.get("max_model_len") or ctx.profile.server.max_model_len)


def _prompt_ids(ctx: CheckContext, deadline: Deadline, n: int) -> list[int]:
    """``n`` token ids of ordinary text, from the server's own ``/tokenize``."""
    if "unit_ids" not in ctx.state:
        r = ctx.client.post(
            "/tokenize",
            {
                "model": ctx.model,
                "prompt": "The quick brown fox jumps over the lazy dog. ",
                "add_special_tokens": False,
            },
            timeout_s=min(ctx.request_timeout_s, deadline.left()),
        )
        _raise_for_status(r, "POST /tokenize")
        ids = _json(r, "POST /tokenize").get("tokens") or []
        if not ids:
            raise Fail("POST /tokenize returned no tokens for an ordinary sentence")
        ctx.state["unit_ids"] = ids
    unit = ctx.state["unit_ids"]
    return (unit * (n // len(unit) + 1))[:n]


def check_long_prompt_accepted(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A prompt close to max_model_len is served and usage.prompt_tokens equals its length."""
    spec = ctx.profile.checks.long_prompt
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables long-prompt checks")
    mml = _max_model_len(ctx, deadline)
    n = spec.accept_tokens or (mml - spec.margin_tokens)
    max_tokens = min(4, mml - n)
    if max_tokens < 1:
        raise Fail(f"checks.long_prompt.accept_tokens={n} leaves no room below max_model_len={mml}")
    body = {
        "model": ctx.model,
        "prompt": _prompt_ids(ctx, deadline, n),
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    r = ctx.client.post("/v1/completions", body, timeout_s=min(ctx.long_prompt_timeout_s, deadline.left()))
    _raise_for_status(r, f"POST /v1/completions with a {n}-token prompt (max_model_len {mml})")
    d = _json(r, "long prompt")
    u = d.get("usage") or {}
    ev = {"prompt_len": n, "max_model_len": mml, "max_tokens": max_tokens, "usage": u}
    if u.get("prompt_tokens") != n:
        raise Fail(
            f"usage.prompt_tokens is {u.get('prompt_tokens')!r} for a {n}-token prompt; wanted {n}", ev
        )
    if not (isinstance(u.get("completion_tokens"), int) and 1 <= u["completion_tokens"] <= max_tokens):
        raise Fail(f"usage.completion_tokens is {u.get('completion_tokens')!r}, wanted 1..{max_tokens}", ev)
    return Passed(f"{n}-token prompt served (max_model_len {mml}), prompt_tokens consistent", ev)


def check_long_prompt_rejected(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A prompt one token over max_model_len is rejected with HTTP 400, promptly (not a hang)."""
    spec = ctx.profile.checks.long_prompt
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables long-prompt checks")
    from .client import RequestTimeout

    mml = _max_model_len(ctx, deadline)
    n = mml + 1
    body = {"model": ctx.model, "prompt": _prompt_ids(ctx, deadline, n), "max_tokens": 1, "temperature": 0.0}
    t = min(ctx.request_timeout_s, deadline.left())
    try:
        r = ctx.client.post("/v1/completions", body, timeout_s=t)
    except RequestTimeout as e:
        raise Fail(
            f"a {n}-token prompt (max_model_len {mml}) hung: no answer within {t:.0f} s; wanted HTTP 400",
            {"prompt_len": n, "error": str(e)},
        ) from None
    ev = {"prompt_len": n, "max_model_len": mml, "status": r.status_code, "body": r.text[:300]}
    if r.status_code != 400:
        if r.status_code >= 500 and engine_dead_in(r.text):
            raise ServerGone(f"engine died: over-long prompt answered HTTP {r.status_code}: {r.text[:300]!r}")
        raise Fail(f"a {n}-token prompt (max_model_len {mml}) answered HTTP {r.status_code}; wanted 400", ev)
    return Passed(f"{n}-token prompt rejected with 400", ev)


# ---- semantic and thinking


def check_semantic(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Greedy questions with known answers: the answer contains the expected text and ends as wanted (B15)."""
    spec = ctx.profile.checks.semantic
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables semantic checks")
    if not spec.expected_answers:
        raise Fail("checks.semantic.enabled is true but checks.semantic.expected_answers is empty")
    ev: dict[str, Any] = {"answers": []}
    problems = []
    for qa in spec.expected_answers:
        d = post_chat(
            ctx, base_chat(ctx, prompt=qa.prompt, max_tokens=qa.max_tokens), deadline, "semantic question"
        )
        msg, fr = _message(d)
        text = msg.get("content") or ""
        ev["answers"].append({"prompt": qa.prompt, "answer": text[:200], "finish_reason": fr})
        if qa.contains.lower() not in text.lower():
            problems.append(f"{qa.prompt!r}: answer {text[:80]!r} lacks {qa.contains!r}")
        if fr != qa.finish_reason:
            problems.append(f"{qa.prompt!r}: finish_reason {fr!r}, wanted {qa.finish_reason!r}")
    if problems:
        raise Fail("; ".join(problems), ev)
    return Passed(f"{len(spec.expected_answers)} expected answers found", ev)


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
    m_on, fr_on = _message(post_chat(ctx, on, deadline, "thinking on"))
    m_off, fr_off = _message(post_chat(ctx, off, deadline, "thinking off"))
    r_on = m_on.get("reasoning") or m_on.get("reasoning_content") or ""
    r_off = m_off.get("reasoning") or m_off.get("reasoning_content") or ""
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


# ---- every thinking mode, streamed and not

THINKING_KEYS = ("thinking", "enable_thinking")
"""``chat_template_kwargs`` keys that switch DeepSeek-V4-style thinking
(docs/reference/vllm-code-paths.md#thinking)."""


def thinking_modes(profile: Profile) -> list[tuple[str, dict[str, Any], bool]]:
    """``(label, request fields, thinks)`` for every thinking mode the profile allows.

    Always ``unspecified`` (no thinking field at all: the server's default decides, which is
    the profile's ``--default-chat-template-kwargs`` when it sets one, else on for a model
    with a thinking mode and off for one without); with ``checks.thinking.enabled`` also
    ``on`` (``on_kwargs``) and ``off`` (``off_kwargs``).
    """
    from .checks_model import _server_default_chat_kwargs

    t = profile.checks.thinking
    thinks_by_default = t.enabled
    ck = _server_default_chat_kwargs(list(profile.server.args))
    if ck is not None and any(k in ck for k in THINKING_KEYS):
        thinks_by_default = any(bool(ck.get(k)) for k in THINKING_KEYS)
    modes = [("unspecified", {}, thinks_by_default)]
    if t.enabled:
        modes += [("on", copy.deepcopy(t.on_kwargs), True), ("off", copy.deepcopy(t.off_kwargs), False)]
    return modes


def _without_thinking_fields(body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    out.pop("reasoning_effort", None)
    ck = {k: v for k, v in (out.pop("chat_template_kwargs", None) or {}).items() if k not in THINKING_KEYS}
    if ck:
        out["chat_template_kwargs"] = ck
    return out


def check_thinking_modes(ctx: CheckContext, deadline: Deadline) -> Passed:
    """In every thinking mode the profile allows (unspecified included), streamed and not:
    no think tag / special token / DSML in content or reasoning, reasoning exactly when the
    mode thinks, and the stream equal to the non-streamed answer (greedy)."""
    from .checks_model import find_leaks

    c = ctx.profile.checks
    problems: list[str] = []
    ev: dict[str, Any] = {}
    for label, fields, thinks in thinking_modes(ctx.profile):
        mt = c.thinking.max_tokens if thinks else c.max_tokens
        body = {**_without_thinking_fields(base_chat(ctx, max_tokens=mt)), **fields}
        d = post_chat(ctx, body, deadline, f"chat, thinking {label}")
        msg, fr = _message(d)
        content = msg.get("content") if isinstance(msg.get("content"), str) else ""
        reasoning = msg.get("reasoning") or msg.get("reasoning_content") or ""
        s = stream_chat(ctx, body, deadline, f"streamed chat, thinking {label}")
        s_fr = s.finish_reasons[-1] if s.finish_reasons else None
        ev[label] = {
            "request": {k: body[k] for k in ("chat_template_kwargs", "reasoning_effort") if k in body},
            "thinks": thinks,
            "content": content[:200],
            "reasoning_chars": len(reasoning),
            "finish_reason": fr,
            "streamed_content": s.content[:200],
            "streamed_reasoning_chars": len(s.reasoning),
            "streamed_finish_reason": s_fr,
        }
        for how, text_c, text_r in (
            ("non-streamed", content, reasoning),
            ("streamed", s.content, s.reasoning),
        ):
            where = f"[thinking {label}, {how}]"
            for fld, text in (("content", text_c), ("reasoning", text_r)):
                problems += [f"{where} {leak} leaked into {fld}" for leak in find_leaks(text)]
            if text_r and not thinks:
                problems.append(f"{where} reasoning came back in a mode that does not think: {text_r[:80]!r}")
            if thinks and not text_r and (fr if how == "non-streamed" else s_fr) != "length":
                problems.append(f"{where} the mode thinks but no reasoning came back")
        problems += [f"[thinking {label}, streamed] {p}" for p in s.framing_problems(want_usage=None)]
        if s.content != content:
            problems.append(
                f"[thinking {label}] streamed content {s.content[:60]!r} differs from non-streamed "
                f"{content[:60]!r} of the same greedy request"
            )
        if s.reasoning != reasoning:
            problems.append(f"[thinking {label}] streamed reasoning differs from non-streamed")
        if s_fr != fr:
            problems.append(f"[thinking {label}] finish_reason streamed {s_fr!r}, non-streamed {fr!r}")
    if problems:
        raise Fail(
            "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""), ev
        )
    return Passed(
        f"thinking modes {', '.join(ev)}: streamed == non-streamed, no leaks, reasoning as the mode", ev
    )


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
    CheckSpec(
        "thinking",
        "reasoning when thinking is on, none when off",
        "B11, docs/reference/vllm-code-paths.md#thinking",
        check_thinking,
        300,
    ),
    CheckSpec(
        "thinking_modes",
        "every thinking mode (unspecified too), streamed and not: no leaks, reasoning only when thinking",
        "docs/reference/vllm-code-paths.md#thinking, B11 (leaks only in one mode)",
        check_thinking_modes,
        300,
    ),
]
"""The suite, in run order."""
