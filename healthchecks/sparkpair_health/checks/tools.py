"""Tool calls: forced choice with strict tools (``tool_required``, ``tool_named``) and the
model check ``dsv4.tool_calls`` (exact calls of a trained model, B10).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from typing import Any

import jsonschema

from ..client import Deadline
from .base import (
    DSML_MARKERS,
    JSON,
    NO_THINKING,
    CheckContext,
    Fail,
    Passed,
    Skip,
    answer_json,
    base_chat,
    find_leaks,
    message_of,
    model_checks_reason,
    post_chat,
    raise_for_status,
    short,
    stream_chat,
    user_chat,
)
from .compare import LOGPROB_FIELDS, compare_stream, prefix_problems

WRAPPER_KEYS = ("arguments", "parameters", "input", "args", "kwargs")
"""Keys a model wraps the real arguments in (vllm PR #41241, sglang#38924)."""

TOOL_WEATHER: JSON = {
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
TOOL_TIME: JSON = {
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
        raise_for_status(r, "POST /tokenize (profile checks.tools.suppress_whitespace_tokens)")
        toks = answer_json(r, "POST /tokenize").get("tokens") or []
        if len(toks) == 1:
            bias[str(toks[0])] = -100.0
    ctx.state["whitespace_bias"] = bias
    return bias


def tool_request(ctx: CheckContext, deadline: Deadline, tool_choice: str | JSON) -> JSON:
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
    answer: JSON, tools: list[JSON], want_name: str | None, finish_reasons: list[str]
) -> tuple[list[str], JSON]:
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
    ctx: CheckContext,
    deadline: Deadline,
    tool_choice: str | JSON,
    want_name: str | None,
    finish_reasons: list[str],
) -> Passed:
    spec = ctx.profile.checks.tools
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables tool checks (checks.tools.enabled: false)")
    body = {**tool_request(ctx, deadline, tool_choice), **LOGPROB_FIELDS}
    d = post_chat(ctx, body, deadline, "forced tool call")
    problems, ev = judge_tool_calls(d, body["tools"], want_name, finish_reasons)
    ev["request"] = {k: body[k] for k in ("tool_choice", "max_tokens") if k in body}
    if "logit_bias" in body:
        ev["request"]["logit_bias"] = body["logit_bias"]
    if problems:
        raise Fail("; ".join(problems), ev)
    # The same request streamed: reassembled arguments must parse to the same object (B11).
    s = stream_chat(ctx, body, deadline, "streamed forced tool call")
    streamed = s.tool_calls
    ev["streamed_tool_calls"] = streamed
    sproblems = s.framing_problems(want_usage=None)
    agree = compare_stream(d, s.chunks)
    ev["difference"] = agree.evidence
    if not agree.ok:
        sproblems.append(agree.problem)
    elif agree.near_tie:  # the stream's arguments before the near-tie begin the non-streamed ones
        args = "".join(c["function"]["arguments"] for c in d["choices"][0]["message"]["tool_calls"])
        sproblems += prefix_problems("", agree, s.chunks, {"arguments": args})
    else:
        sproblems += _same_calls(d, streamed, s.finish_reasons)
    if sproblems:
        raise Fail("; ".join(sproblems), ev)
    calls = d["choices"][0]["message"]["tool_calls"]
    return Passed(
        f"{calls[0]['function']['name']}({calls[0]['function']['arguments']}) valid, "
        f"finish_reason {d['choices'][0]['finish_reason']}; stream agrees",
        ev,
    )


def _same_calls(d: JSON, streamed: list[dict[str, str]], finish_reasons: list[str]) -> list[str]:
    """Where a stream carried the same tokens as the non-streamed answer ``d``: the same calls
    (arguments compared as JSON) and the same finish_reason."""
    probs: list[str] = []
    want = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in d["choices"][0]["message"]["tool_calls"]
    ]
    try:
        got = [(c["name"], json.loads(c["arguments"])) for c in streamed]
    except json.JSONDecodeError as e:
        got = []
        probs.append(f"streamed tool arguments do not parse as JSON: {e}")
    if got != want:
        probs.append(f"streamed tool calls {got} differ from non-streamed {want}")
    if finish_reasons != [d["choices"][0]["finish_reason"]]:
        probs.append(
            f"streamed finish_reasons {finish_reasons}, non-streamed {d['choices'][0]['finish_reason']!r}"
        )
    return probs


def check_tool_required(ctx: CheckContext, deadline: Deadline) -> Passed:
    """``tool_choice: required`` with strict tools: schema-valid arguments, finish_reason tool_calls."""
    return _tool_check(ctx, deadline, "required", None, ["tool_calls"])


def check_tool_named(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A named ``tool_choice`` with strict tools: that function, schema-valid arguments."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    return _tool_check(ctx, deadline, choice, "get_weather", ctx.profile.checks.tools.named_finish_reasons)


# ---- exact tool calls of a trained model (dsv4.tool_calls)


def _tool(name: str, description: str, props: JSON, required: list[str]) -> JSON:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


TOOLS: dict[str, JSON] = {
    "get_weather": _tool(
        "get_weather",
        "Current weather for a city.",
        {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        ["city"],
    ),
    "get_time": _tool(
        "get_time", "Current time in an IANA timezone.", {"timezone": {"type": "string"}}, ["timezone"]
    ),
    "send_email": _tool(
        "send_email",
        "Send an e-mail.",
        {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
        ["to", "subject", "body"],
    ),
}


@dataclass(frozen=True)
class ToolCase:
    label: str
    tools: tuple[str, ...]
    tool_choice: str
    prompt: str
    expect_name: str
    expect_args: dict[str, str]  # key -> substring the value must contain
    stream: bool = False


TOOL_CASES: tuple[ToolCase, ...] = (
    ToolCase(
        "auto, one tool",
        ("get_weather",),
        "auto",
        "What is the weather in Paris right now? Use the get_weather tool.",
        "get_weather",
        {"city": "Paris"},
    ),
    ToolCase(
        "required, one tool",
        ("get_weather",),
        "required",
        "Weather in Berlin, please.",
        "get_weather",
        {"city": "Berlin"},
    ),
    ToolCase(
        "auto, several tools",
        ("get_weather", "get_time", "send_email"),
        "auto",
        "What time is it in Tokyo? Use the get_time tool with the timezone Asia/Tokyo.",
        "get_time",
        {"timezone": "Tokyo"},
    ),
    ToolCase(
        "required, several tools",
        ("get_weather", "get_time", "send_email"),
        "required",
        "Send an e-mail to bob@example.com with subject 'Hi' and body 'Hello Bob'.",
        "send_email",
        {"to": "bob@example.com"},
    ),
    ToolCase(
        "auto, several tools, stream",
        ("get_weather", "get_time", "send_email"),
        "auto",
        "What is the weather in Rome? Use the get_weather tool.",
        "get_weather",
        {"city": "Rome"},
        True,
    ),
)


def judge_tool_call(
    case_label: str,
    tools: list[JSON],
    expect_name: str,
    expect_args: dict[str, str],
    finish: str | None,
    calls: list[dict[str, str]],
    content: str | None,
) -> list[str]:
    """Problems with one tool-call answer (empty: exact).

    Args:
        tools: the request's ``tools`` (OpenAI function format).
        calls: ``[{name, arguments}]`` (``arguments`` the JSON text the server sent).
        content: the message content beside the calls.
    """
    where = f"[{case_label}]"
    probs: list[str] = []
    for leak in find_leaks(content):
        probs.append(f"{where} {leak} left in content (B10: unparsed DSML)")
    if finish != "tool_calls":
        probs.append(f"{where} finish_reason {finish!r}, wanted 'tool_calls'")
    if not calls:
        probs.append(f"{where} no tool_calls (content: {short(content, 100)!r})")
        return probs
    call = calls[0]
    if call.get("name") != expect_name:
        probs.append(f"{where} tool name {call.get('name')!r}, wanted {expect_name!r}")
        return probs
    schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == expect_name)
    try:
        args = json.loads(call.get("arguments") or "")
    except ValueError:
        probs.append(f"{where} arguments are not JSON: {short(call.get('arguments'), 100)!r}")
        return probs
    if not isinstance(args, dict):
        probs.append(f"{where} arguments are {type(args).__name__} {short(args, 60)}, wanted an object")
        return probs
    props = set(schema.get("properties", {}))
    wrapper = [k for k in args if k in WRAPPER_KEYS and k not in props]
    if wrapper:
        probs.append(
            f"{where} spurious wrapper key {wrapper[0]!r} around the arguments "
            f"(B10, vllm PR #41241): {short(args, 100)}; wanted keys from {sorted(props)}"
        )
        return probs
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as e:
        probs.append(f"{where} arguments {short(args, 100)} do not validate: {e.message}")
        return probs
    for k, sub in expect_args.items():
        if sub.lower() not in str(args.get(k, "")).lower():
            probs.append(f"{where} argument {k}={args.get(k)!r}, wanted a value containing {sub!r}")
    return probs


def check_tool_calls(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Exact tool calls (auto/required, one and several tools, one streamed), thinking off:
    finish_reason ``tool_calls``, the wanted name, arguments that parse and validate, no
    spurious wrapper key, no DSML left in content (B10)."""
    spec = ctx.profile.checks.tools
    if not spec.enabled:
        raise Skip(spec.skip_reason or "the server has no tool-call parser (checks.tools disabled)")
    reason = model_checks_reason(ctx.profile)
    if reason:
        raise Skip(reason)
    probs: list[str] = []
    seen: list[JSON] = []
    t = ctx.long_prompt_timeout_s
    for case in TOOL_CASES:
        tools = [TOOLS[n] for n in case.tools]
        body = user_chat(
            ctx, case.prompt, 256, tools=tools, tool_choice=case.tool_choice, temperature=0, **NO_THINKING
        )
        t0 = time.monotonic()
        content: str | None
        if case.stream:
            st = stream_chat(ctx, body, deadline, f"tool call ({case.label}, streamed)", timeout_s=t)
            probs += [f"[{case.label}] {p}" for p in st.framing_problems()]
            calls = st.tool_calls
            finish = st.finish_reasons[-1] if st.finish_reasons else None
            content = st.content
        else:
            msg, finish = message_of(post_chat(ctx, body, deadline, f"tool call ({case.label})", timeout_s=t))
            calls = [
                {
                    "name": (tc.get("function") or {}).get("name", ""),
                    "arguments": (tc.get("function") or {}).get("arguments", ""),
                }
                for tc in msg.get("tool_calls") or []
            ]
            content = msg.get("content")
        probs += judge_tool_call(
            case.label, tools, case.expect_name, case.expect_args, finish, calls, content
        )
        seen.append(
            {
                "case": case.label,
                "finish_reason": finish,
                "calls": calls,
                "content": short(content),
                "latency_s": round(time.monotonic() - t0, 3),
            }
        )
    if probs:
        raise Fail("; ".join(probs[:5]), {"problems": probs, "requests": seen})
    return Passed(
        f"{len(TOOL_CASES)} tool-call cases exact (auto/required, one and several tools, stream)",
        {"requests": seen},
    )
