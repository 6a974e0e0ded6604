"""DeepSeek-V4-specific functional checks: thinking modes, exact tool calls, stream equality,
long context, greedy sanity and a soak.

Each check answers one question an operator of a DeepSeek-V4-Flash pair has, from the
server's own HTTP answers (never from its ``/health``):

- ``dsv4.thinking``: answer in the wrong field, reasoning when thinking is off (or none when
  on), think tags / DSML / special tokens leaking (docs/reference/vllm-code-paths.md#thinking, incl. the
  ``thinking: false`` +
  ``reasoning_effort`` conflict);
- ``dsv4.tool_calls`` (B10): no ``tool_calls`` / raw DSML in content, wrong name, arguments
  that do not parse or validate, a spurious ``arguments`` wrapper;
- ``dsv4.stream_equality`` (B11): streamed reasoning / content / tool arguments differing
  from the non-streamed ones; framing defects;
- ``dsv4.long_context``: an answer that is not exactly the needle (normalised only as
  :data:`NEEDLE_NORMALISATION` says) at several depths and neighbouring prompt lengths;
  a prompt whose ``usage`` does not match the length sent; refuses beyond ``max_model_len``;
- ``dsv4.greedy_sanity`` (B15): garbage for a greedy question with a known answer,
  ``finish_reason`` not ``stop``, two greedy runs that differ;
- ``dsv4.soak`` (B08): a wedge after a handful of requests (a request over its latency budget).

Checks that need a trained model (thinking, exact tool calls, greedy answers, needle
retrieval) skip with the profile's stated reason when ``checks.semantic.enabled`` is false
(the tiny CPU model). Statuses: ``pass``, ``fail`` (the server answered wrongly),
``skip`` (not applicable, with the reason), ``error`` (the suite itself could not do the
check: network, timeout, a setting that makes the probe impossible).

This module runs in the slim client: it imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import jsonschema
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from .apikey import auth_headers, redact
from .sse import OpenAIStream, assemble_tool_calls, parse_openai_stream

Status = Literal["pass", "fail", "skip", "error"]

# --------------------------------------------------------------------------- settings


class DSV4CheckSettings(BaseModel):
    """Settings of the DeepSeek-V4 checks (env: ``SPARKPAIR_DSV4_<FIELD>``, see the gateway).

    Times are seconds, lengths are tokens.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(description="http://host:port of the OpenAI server (no /v1)")
    served_model_name: str = Field(description="the id every request sends as 'model'")
    api_key: SecretStr | None = Field(None, description="bearer key of a server started with --api-key")
    request_timeout_s: float = Field(120.0, gt=0, description="one HTTP request, seconds")
    check_timeout_s: float = Field(600.0, gt=0, description="one whole check, seconds")
    seed: int = 0

    semantic_enabled: bool = Field(
        False, description="the model is trained (profile checks.semantic.enabled)"
    )
    semantic_skip_reason: str = "the profile disables semantic checks"
    thinking_enabled: bool = Field(False, description="the model thinks (profile checks.thinking)")
    thinking_skip_reason: str = "the profile's model does not think (checks.thinking disabled)"
    tools_enabled: bool = Field(True, description="the server has a tool-call parser (profile checks.tools)")
    thinking_default: bool = Field(
        True,
        description="thinking when a request names neither 'thinking' nor 'enable_thinking' "
        "(True in vLLM, tokenizers/deepseek_v4.py; False if the server sets "
        "--default-chat-template-kwargs '{\"thinking\": false}')",
    )
    thinking_max_tokens: int = Field(1024, gt=0, description="max_tokens of a thinking-mode request")
    expected_answers: list[dict[str, str]] = Field(
        default_factory=lambda: [
            {"prompt": "What is the capital of France? Answer in one word.", "contains": "Paris"}
        ],
        description="greedy sanity: [{prompt, contains}] (field-bugs B15)",
    )
    answer_max_tokens: int = Field(32, gt=0)

    long_context_tokens: int = Field(48_000, gt=0, description="target prompt length of the needle probe")
    long_context_depths: list[float] = Field(default_factory=lambda: [0.1, 0.5, 0.9])
    long_context_shifts: list[int] = Field(
        default_factory=lambda: [0, 1, 2],
        description="neighbouring prompt lengths: this many extra filler words ('so ') before the "
        "haystack (a few tokens each: 3 on the tiny demo's tokenizer), so the needle meets "
        "different token boundaries",
    )
    long_context_tolerance: float = Field(
        0.05, gt=0, lt=1, description="allowed |usage.prompt_tokens - target| / target"
    )
    long_context_answer_tokens: int = Field(32, gt=0)

    soak_requests: int = Field(0, ge=0, description="0 = soak off (it is not part of the 3-minute suite)")
    soak_long_tokens: int = Field(1000, gt=0, description="output length of the long soak requests")
    soak_short_tokens: int = Field(64, gt=0)
    soak_first_token_budget_s: float = Field(30.0, gt=0, description="prefill + queue allowance per request")
    soak_min_decode_tok_s: float = Field(8.0, gt=0, description="slowest acceptable decode, tokens/s")

    @classmethod
    def from_profile(cls, profile: Any, base_url: str, **overrides: Any) -> DSV4CheckSettings:
        """Settings for ``profile`` (a :class:`sparkpair_health.profile.Profile`).

        ``profile.checks.extra["dsv4"]`` (a mapping of the fields above) and then
        ``overrides`` take precedence over what is derived from the profile.
        """
        sem = profile.checks.semantic

        def enabled(spec: Any) -> bool:  # ``tools: true`` or ``tools: {enabled: true, ...}``
            return bool(spec) if isinstance(spec, bool) else bool(getattr(spec, "enabled", False))

        data: dict[str, Any] = {
            "base_url": base_url,
            "served_model_name": profile.served_model_name,
            "semantic_enabled": sem.enabled,
            "semantic_skip_reason": sem.skip_reason or "the profile disables semantic checks",
            "thinking_enabled": enabled(profile.checks.thinking),
            "tools_enabled": enabled(profile.checks.tools),
        }
        reason = getattr(profile.checks.thinking, "skip_reason", "")
        if reason:
            data["thinking_skip_reason"] = reason
        default_ck = _server_default_chat_kwargs(list(profile.server.args))
        if default_ck is not None and ("thinking" in default_ck or "enable_thinking" in default_ck):
            data["thinking_default"] = bool(default_ck.get("thinking") or default_ck.get("enable_thinking"))
        if sem.expected_answers:
            data["expected_answers"] = [
                {"prompt": a["prompt"], "contains": a["contains"]}
                if isinstance(a, dict)
                else {"prompt": a.prompt, "contains": a.contains}
                for a in sem.expected_answers
            ]
        data.update(profile.checks.extra.get("dsv4", {}) or {})
        data.update(overrides)
        return cls.model_validate(data)


def _server_default_chat_kwargs(args: list[str]) -> dict[str, Any] | None:
    """The JSON of ``--default-chat-template-kwargs`` in a server's arguments, if any."""
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


# --------------------------------------------------------------------------- results


@dataclass
class ModelCheckResult:
    """One check's outcome.

    Attributes:
        name: ``dsv4.<check>``.
        status: ``pass`` / ``fail`` / ``skip`` / ``error``.
        message: one line naming the fault (or the skip reason).
        evidence: JSON-able details (requests sent, what came back), API key redacted.
        duration_s: wall time of the check, seconds.
    """

    name: str
    status: Status
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "evidence": self.evidence,
            "duration_s": round(self.duration_s, 3),
        }


class CheckFailed(Exception):
    """The server answered, wrongly."""

    def __init__(self, message: str, **evidence: Any) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence


class SuiteError(Exception):
    """The suite could not do the check (network, timeout, impossible setting)."""

    def __init__(self, message: str, **evidence: Any) -> None:
        super().__init__(message)
        self.message = message
        self.evidence = evidence


class RequestTimeout(SuiteError):
    """A request got no complete answer within its timeout."""


# --------------------------------------------------------------------------- HTTP


class Deadline:
    """A check's time budget: every request's timeout is capped by what is left."""

    def __init__(self, total_s: float) -> None:
        self.total_s = total_s
        self.t_end = time.monotonic() + total_s

    def cap(self, timeout_s: float, what: str) -> float:
        left = self.t_end - time.monotonic()
        if left <= 0:
            raise SuiteError(f"check timeout: {self.total_s:.0f} s (check_timeout_s) spent before {what}")
        return min(timeout_s, left)


class Client:
    """The checks' HTTP client: served model name, API key, timeouts, error classes.

    HTTP error statuses raise :class:`CheckFailed` (the server answered, with an error);
    transport failures raise :class:`SuiteError`, timeouts :class:`RequestTimeout`.
    """

    def __init__(self, settings: DSV4CheckSettings, deadline: Deadline | None = None) -> None:
        self.s = settings
        self.deadline = deadline or Deadline(settings.check_timeout_s)
        self.http = httpx.Client(
            base_url=settings.base_url.rstrip("/"), headers=auth_headers(settings.api_key)
        )
        self.requests = 0

    def close(self) -> None:
        self.http.close()

    def _timeout(self, timeout_s: float | None, what: str) -> float:
        return self.deadline.cap(timeout_s or self.s.request_timeout_s, what)

    def _err(self, e: Exception, what: str, timeout: float) -> SuiteError:
        if isinstance(e, httpx.TimeoutException):
            capped = (
                f", the rest of check_timeout_s={self.deadline.total_s:g}"
                if timeout < self.s.request_timeout_s
                else ""
            )
            return RequestTimeout(f"{what}: no answer within {timeout:.1f} s{capped} ({type(e).__name__})")
        err = redact(str(e), self.s.api_key)
        return SuiteError(f"{what}: {type(e).__name__}: {err} (the suite could not reach {self.s.base_url})")

    def _check_status(self, r: httpx.Response, what: str) -> None:
        if r.status_code != 200:
            # Redacted before it is cut: a key echoed across the cut would survive in part.
            body = redact(r.text, self.s.api_key)
            raise CheckFailed(
                f"{what}: HTTP {r.status_code}, wanted 200: {body[:300]}", http_status=r.status_code
            )

    def _send(self, method: str, path: str, what: str, timeout: float, **kw: Any) -> httpx.Response:
        """One request within ``timeout`` seconds overall (:func:`sparkpair_health.client.within`:
        not per read, so a dripping server is cut at the deadline)."""
        from .client import within

        def send() -> httpx.Response:
            try:
                return self.http.request(method, path, timeout=timeout, **kw)
            except httpx.HTTPError as e:
                raise self._err(e, what, timeout) from None

        capped = (
            f", the rest of check_timeout_s={self.deadline.total_s:g}"
            if timeout < self.s.request_timeout_s
            else ""
        )
        return within(
            timeout,
            send,
            lambda: RequestTimeout(
                f"{what}: no whole answer within {timeout:.1f} s{capped} (overall deadline)"
            ),
        )

    def get_models(self) -> dict[str, Any]:
        timeout = self._timeout(None, "GET /v1/models")
        r = self._send("GET", "/v1/models", "GET /v1/models", timeout)
        self._check_status(r, "GET /v1/models")
        return dict(r.json())

    def _body(self, body: dict[str, Any]) -> dict[str, Any]:
        out = {"model": self.s.served_model_name, **body}
        out["model"] = self.s.served_model_name
        return out

    def chat(self, body: dict[str, Any], timeout_s: float | None = None) -> tuple[dict[str, Any], float]:
        """POST a non-streaming chat completion; return (response JSON, latency s)."""
        what = "POST /v1/chat/completions"
        timeout = self._timeout(timeout_s, what)
        self.requests += 1
        t0 = time.monotonic()
        r = self._send("POST", "/v1/chat/completions", what, timeout, json=self._body(body))
        self._check_status(r, what)
        try:
            data = r.json()
        except ValueError:
            raise CheckFailed(f"{what}: body is not JSON: {redact(r.text, self.s.api_key)[:200]!r}") from None
        if not isinstance(data, dict) or not data.get("choices"):
            raise CheckFailed(f"{what}: no choices in the answer: {redact(r.text, self.s.api_key)[:300]}")
        return data, time.monotonic() - t0

    def chat_stream(self, body: dict[str, Any], timeout_s: float | None = None) -> tuple[OpenAIStream, float]:
        """POST a streaming chat completion; return (parsed stream, latency s to the last line)."""
        what = "POST /v1/chat/completions (stream)"
        timeout = self._timeout(timeout_s, what)
        self.requests += 1
        t0 = time.monotonic()
        lines: list[str] = []
        try:
            with self.http.stream(
                "POST", "/v1/chat/completions", json=self._body({**body, "stream": True}), timeout=timeout
            ) as r:
                if r.status_code != 200:
                    r.read()
                    self._check_status(r, what)
                t_end = t0 + timeout
                buf = ""
                # Chunks, not lines: a server dripping bytes without a newline is still cut.
                for chunk in r.iter_text():
                    if time.monotonic() > t_end:
                        raise httpx.ReadTimeout("stream exceeded its total timeout")
                    buf += chunk
                    parts = buf.split("\n")
                    buf = parts.pop()
                    lines += [p.rstrip("\r") for p in parts]
                if buf:
                    lines.append(buf)
        except httpx.HTTPError as e:
            raise self._err(e, what, timeout) from None
        return parse_openai_stream(lines), time.monotonic() - t0


# --------------------------------------------------------------------------- shared judgements

LEAK_PATTERNS: dict[str, re.Pattern[str]] = {
    "think tag": re.compile(r"<\s*/?\s*think\s*>", re.IGNORECASE),
    # Both bar variants: full-width U+FF5C and ASCII '|' (field-bugs B10, cline#13348).
    "DSML marker": re.compile(r"[｜|]\s*DSML\s*[｜|]"),
    "special token": re.compile(r"<｜[^<>｜\n]{1,64}｜>|<\|[A-Za-z_▁][^<>|\n]{0,63}\|>"),
}
"""What must never reach ``content`` or ``reasoning``: think tags, DSML markup, special tokens."""

NO_THINKING = {"chat_template_kwargs": {"thinking": False, "enable_thinking": False}}
"""Request fields that turn DeepSeek-V4 thinking off (``enable_thinking`` too:
docs/reference/vllm-code-paths.md#thinking)."""

WRAPPER_KEYS = ("arguments", "parameters", "input", "args", "kwargs")
"""Keys a model wraps the real arguments in (vllm PR #41241, sglang#38924)."""


def find_leaks(text: str | None) -> list[str]:
    """Names and first matches of every leak pattern found in ``text``."""
    if not text:
        return []
    return [f"{name} {m.group(0)!r}" for name, rx in LEAK_PATTERNS.items() if (m := rx.search(text))]


def message_of(resp: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``choices[0].message`` and ``finish_reason`` of a chat completion."""
    ch = resp["choices"][0]
    return ch.get("message") or {}, ch.get("finish_reason")


def reasoning_of(msg: dict[str, Any]) -> str | None:
    """The chain of thought: ``message.reasoning`` (vLLM) or ``reasoning_content`` (older)."""
    r = msg.get("reasoning")
    if r is None:
        r = msg.get("reasoning_content")
    return r or None


def _short(text: Any, n: int = 160) -> str:
    s = text if isinstance(text, str) else json.dumps(text)
    return s if len(s) <= n else s[:n] + "…"


# --------------------------------------------------------------------------- thinking


@dataclass(frozen=True)
class ThinkingVariant:
    """One way a client asks for (or against) thinking, and whether reasoning must come back."""

    label: str
    fields: dict[str, Any]
    thinking: bool | None  # None: the server default (settings.thinking_default)


THINKING_VARIANTS: tuple[ThinkingVariant, ...] = (
    ThinkingVariant("no thinking kwargs", {}, None),
    ThinkingVariant("thinking=false", {"chat_template_kwargs": {"thinking": False}}, False),
    ThinkingVariant("enable_thinking=false", {"chat_template_kwargs": {"enable_thinking": False}}, False),
    ThinkingVariant("thinking=true", {"chat_template_kwargs": {"thinking": True}}, True),
    ThinkingVariant("enable_thinking=true", {"chat_template_kwargs": {"enable_thinking": True}}, True),
    ThinkingVariant("reasoning_effort=none", {"reasoning_effort": "none"}, False),
    # docs/reference/vllm-code-paths.md#thinking: reasoning_effort != "none" injects enable_thinking=True
    # unless the client set it,
    # and the tokenizer ORs it with 'thinking': this still thinks.
    ThinkingVariant(
        "thinking=false + reasoning_effort=high",
        {"chat_template_kwargs": {"thinking": False}, "reasoning_effort": "high"},
        True,
    ),
    ThinkingVariant(
        "enable_thinking=false + reasoning_effort=high",
        {"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"},
        False,
    ),
)
STREAMED_THINKING_VARIANTS = (
    "no thinking kwargs",
    "thinking=false",
    "thinking=true",
    "thinking=false + reasoning_effort=high",
)
"""Variants also sent streamed; the unspecified one included (a leak only there must fail)."""

THINKING_PROMPT = "What is 17 + 25? Reply with the number only."
THINKING_ANSWER = "42"


def _judge_thinking(
    label: str, want: bool, reasoning: str | None, content: str | None, finish: str | None, max_tokens: int
) -> list[str]:
    probs: list[str] = []
    where = f"[{label}]"
    if want and not reasoning:
        probs.append(f"{where} thinking on but no reasoning came back")
    if not want and reasoning:
        probs.append(f"{where} thinking off but reasoning came back: {_short(reasoning, 80)!r}")
    for fld, text in (("content", content), ("reasoning", reasoning)):
        for leak in find_leaks(text):
            probs.append(f"{where} {leak} leaked into {fld}")
    if finish == "length":
        probs.append(f"{where} finish_reason length: no answer within max_tokens={max_tokens}")
    elif not content or THINKING_ANSWER not in content:
        hint = " (the answer is in reasoning)" if reasoning and THINKING_ANSWER in reasoning else ""
        probs.append(f"{where} content {_short(content, 80)!r} lacks the answer {THINKING_ANSWER!r}{hint}")
    return probs


def check_thinking(c: Client) -> tuple[str, dict[str, Any]]:
    s = c.s
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    for v in THINKING_VARIANTS:
        want = s.thinking_default if v.thinking is None else v.thinking
        mt = s.thinking_max_tokens if want else s.answer_max_tokens * 2
        body = {
            "messages": [{"role": "user", "content": THINKING_PROMPT}],
            "temperature": 0,
            "max_tokens": mt,
            **v.fields,
        }
        resp, lat = c.chat(body)
        msg, finish = message_of(resp)
        reasoning, content = reasoning_of(msg), msg.get("content")
        probs += _judge_thinking(v.label, want, reasoning, content, finish, mt)
        seen.append(
            {
                "variant": v.label,
                "stream": False,
                "want_reasoning": want,
                "reasoning_chars": len(reasoning or ""),
                "content": _short(content),
                "finish_reason": finish,
                "latency_s": round(lat, 3),
            }
        )
        if v.label in STREAMED_THINKING_VARIANTS:
            st, lat = c.chat_stream(body)
            probs += [f"[{v.label}, stream] {p}" for p in st.framing_problems()]
            fin = st.finish_reasons[-1] if st.finish_reasons else None
            probs += [
                p.replace(f"[{v.label}]", f"[{v.label}, stream]")
                for p in _judge_thinking(v.label, want, st.reasoning or None, st.content or None, fin, mt)
            ]
            seen.append(
                {
                    "variant": v.label,
                    "stream": True,
                    "want_reasoning": want,
                    "reasoning_chars": len(st.reasoning),
                    "content": _short(st.content),
                    "finish_reason": fin,
                    "mixed_chunks": len(st.mixed_chunks),
                    "latency_s": round(lat, 3),
                }
            )
    if probs:
        raise CheckFailed(
            "; ".join(probs[:6]) + (f" (+{len(probs) - 6} more)" if len(probs) > 6 else ""),
            problems=probs,
            requests=seen,
        )
    return f"{len(seen)} requests over {len(THINKING_VARIANTS)} thinking variants answered correctly", {
        "requests": seen
    }


# --------------------------------------------------------------------------- tool calls


def _tool(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
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


TOOLS: dict[str, dict[str, Any]] = {
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
    tools: list[dict[str, Any]],
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
        probs.append(f"{where} no tool_calls (content: {_short(content, 100)!r})")
        return probs
    call = calls[0]
    if call.get("name") != expect_name:
        probs.append(f"{where} tool name {call.get('name')!r}, wanted {expect_name!r}")
        return probs
    schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == expect_name)
    try:
        args = json.loads(call.get("arguments") or "")
    except ValueError:
        probs.append(f"{where} arguments are not JSON: {_short(call.get('arguments'), 100)!r}")
        return probs
    if not isinstance(args, dict):
        probs.append(f"{where} arguments are {type(args).__name__} {_short(args, 60)}, wanted an object")
        return probs
    props = set(schema.get("properties", {}))
    wrapper = [k for k in args if k in WRAPPER_KEYS and k not in props]
    if wrapper:
        probs.append(
            f"{where} spurious wrapper key {wrapper[0]!r} around the arguments "
            f"(B10, vllm PR #41241): {_short(args, 100)}; wanted keys from {sorted(props)}"
        )
        return probs
    try:
        jsonschema.validate(args, schema)
    except jsonschema.ValidationError as e:
        probs.append(f"{where} arguments {_short(args, 100)} do not validate: {e.message}")
        return probs
    for k, sub in expect_args.items():
        if sub.lower() not in str(args.get(k, "")).lower():
            probs.append(f"{where} argument {k}={args.get(k)!r}, wanted a value containing {sub!r}")
    return probs


def check_tool_calls(c: Client) -> tuple[str, dict[str, Any]]:
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    for case in TOOL_CASES:
        tools = [TOOLS[n] for n in case.tools]
        body = {
            "messages": [{"role": "user", "content": case.prompt}],
            "tools": tools,
            "tool_choice": case.tool_choice,
            "temperature": 0,
            "max_tokens": 256,
            **NO_THINKING,
        }
        if case.stream:
            st, lat = c.chat_stream(body)
            probs += [f"[{case.label}] {p}" for p in st.framing_problems()]
            calls = assemble_tool_calls(st.tool_call_deltas)
            finish = st.finish_reasons[-1] if st.finish_reasons else None
            content: str | None = st.content
        else:
            resp, lat = c.chat(body)
            msg, finish = message_of(resp)
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
                "content": _short(content),
                "latency_s": round(lat, 3),
            }
        )
    if probs:
        raise CheckFailed("; ".join(probs[:5]), problems=probs, requests=seen)
    return f"{len(TOOL_CASES)} tool-call cases exact (auto/required, one and several tools, stream)", {
        "requests": seen
    }


# --------------------------------------------------------------------------- stream equality


def check_stream_equality(c: Client) -> tuple[str, dict[str, Any]]:
    s = c.s
    cases: list[tuple[str, dict[str, Any]]] = [
        (
            "content",
            {
                "messages": [{"role": "user", "content": "Count from one to twenty in words."}],
                "max_tokens": 48,
                **(NO_THINKING if s.thinking_enabled else {}),
            },
        ),
    ]
    if s.thinking_enabled:
        cases.append(
            (
                "thinking",
                {
                    "messages": [{"role": "user", "content": THINKING_PROMPT}],
                    "max_tokens": s.thinking_max_tokens,
                    "chat_template_kwargs": {"thinking": True},
                },
            )
        )
    if s.tools_enabled and s.semantic_enabled:
        tc = TOOL_CASES[0]
        cases.append(
            (
                "tool call",
                {
                    "messages": [{"role": "user", "content": tc.prompt}],
                    "tools": [TOOLS[n] for n in tc.tools],
                    "tool_choice": "auto",
                    "max_tokens": 256,
                    **NO_THINKING,
                },
            )
        )
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    for label, body in cases:
        body = {**body, "temperature": 0, "seed": s.seed}
        resp, _ = c.chat(body)
        msg, finish = message_of(resp)
        st, _ = c.chat_stream(body)
        probs += [f"[{label}] {p}" for p in st.framing_problems()]
        s_fin = st.finish_reasons[-1] if st.finish_reasons else None
        pairs = [
            ("content", msg.get("content") or "", st.content),
            ("reasoning", reasoning_of(msg) or "", st.reasoning),
        ]
        for fld, ns, ss in pairs:
            if ns != ss:
                i = next((k for k in range(min(len(ns), len(ss))) if ns[k] != ss[k]), min(len(ns), len(ss)))
                probs.append(
                    f"[{label}] streamed {fld} differs from non-streamed at char {i}: "
                    f"stream {_short(ss[i : i + 40], 40)!r} vs {_short(ns[i : i + 40], 40)!r} "
                    f"(lengths {len(ss)} vs {len(ns)})"
                )
        n_calls = [json.loads(tc["function"]["arguments"] or "null") for tc in msg.get("tool_calls") or []]
        try:
            s_calls = [
                json.loads(tc["arguments"] or "null") for tc in assemble_tool_calls(st.tool_call_deltas)
            ]
        except ValueError as e:
            s_calls = []
            probs.append(f"[{label}] streamed tool arguments do not join into JSON: {e}")
        if n_calls != s_calls:
            probs.append(
                f"[{label}] streamed tool arguments {_short(s_calls, 80)} "
                f"!= non-streamed {_short(n_calls, 80)}"
            )
        if finish != s_fin:
            probs.append(f"[{label}] finish_reason stream {s_fin!r} vs non-stream {finish!r}")
        seen.append(
            {
                "case": label,
                "content_chars": len(msg.get("content") or ""),
                "finish_reason": finish,
                "stream_chunks": len(st.chunks),
                "mixed_reasoning_content_chunks": len(st.mixed_chunks),
            }
        )
    if probs:
        raise CheckFailed("; ".join(probs[:4]), problems=probs, cases=seen)
    mixed = sum(x["mixed_reasoning_content_chunks"] for x in seen)
    note = (
        f"; {mixed} chunk(s) carried reasoning and content together (B11: recorded, allowed)" if mixed else ""
    )
    return (
        f"streamed == non-streamed for {len(cases)} greedy case(s) ({', '.join(x[0] for x in cases)}){note}",
        {"cases": seen},
    )


# --------------------------------------------------------------------------- long context

_FILLER = (
    "Line {i:05d}: the river keeps its slow course past the mill, and the miller counts "
    "the sacks of grain before the evening bell."
)
_QUESTION = "What is the secret code mentioned above? Reply with the code only, exactly as written."


def needle_code(rng: random.Random) -> str:
    """A needle like ``K7QX-3941-ZB2M`` (no 0/O, 1/I/L to keep it unambiguous)."""
    alphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
    return "-".join("".join(rng.choice(alphabet) for _ in range(4)) for _ in range(3))


def build_haystack(n_lines: int, depth: float | None, code: str, shift: int = 0) -> str:
    """``n_lines`` filler lines with ``The secret code is <code>.`` at fraction ``depth`` of them,
    after ``shift`` extra words (``"so "`` each: a few tokens; 3 on the tiny demo's tokenizer,
    where the real server gave 1800, 1803, 1806 tokens) that move every later token
    boundary: neighbouring prompt lengths."""
    lines = [_FILLER.format(i=i) for i in range(n_lines)]
    if depth is not None:
        lines.insert(min(n_lines, round(depth * n_lines)), f"The secret code is {code}.")
    return "so " * shift + "\n".join(lines) + "\n\n" + _QUESTION


NEEDLE_NORMALISATION = (
    "surrounding whitespace, then one pair of surrounding quotes or backticks, then one trailing "
    "period, removed; nothing else"
)
"""What :func:`normalise_needle_answer` removes before the exact comparison (stated in messages)."""


def normalise_needle_answer(text: str) -> str:
    """The answer as compared with the needle: :data:`NEEDLE_NORMALISATION`, no more.

    ``" `K7QX-3941-ZB2M`. "`` -> ``"K7QX-3941-ZB2M"``; ``"The code is K7QX-3941-ZB2M"`` is
    left as it is (and so is not the needle).
    """
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'`":
        t = t[1:-1]
    elif len(t) >= 3 and t.endswith(".") and t[0] == t[-2] and t[0] in "\"'`":
        t = t[1:-2]
    t = t.removesuffix(".")
    return t.strip()


def server_max_model_len(models: dict[str, Any], served: str) -> int:
    """``max_model_len`` of ``served`` from a ``/v1/models`` answer.

    Raises:
        CheckFailed: the served model name is not listed.
        SuiteError: the entry carries no ``max_model_len`` (the probe cannot be bounded).
    """
    ids = [m.get("id") for m in models.get("data", [])]
    entry = next((m for m in models.get("data", []) if m.get("id") == served), None)
    if entry is None:
        raise CheckFailed(f"/v1/models lists {ids}, not the served_model_name {served!r}")
    mml = entry.get("max_model_len")
    if not isinstance(mml, int) or mml <= 0:
        raise SuiteError(
            f"/v1/models entry {served!r} has max_model_len={mml!r}; wanted a positive int "
            "to bound the long-context probe"
        )
    return mml


def check_long_context(c: Client) -> tuple[str, dict[str, Any]]:
    s = c.s
    mml = server_max_model_len(c.get_models(), s.served_model_name)
    need = s.long_context_tokens + s.long_context_answer_tokens
    if need > mml:
        raise SuiteError(
            f"long_context_tokens={s.long_context_tokens} + answer {s.long_context_answer_tokens} = {need} "
            f"tokens exceeds the server's max_model_len {mml}; wanted long_context_tokens <= "
            f"{mml - s.long_context_answer_tokens} (refusing to send it)",
            max_model_len=mml,
        )
    extra = NO_THINKING if s.thinking_enabled else {}

    def prompt_tokens(text: str) -> tuple[int, dict[str, Any]]:
        resp, _ = c.chat(
            {"messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0, **extra}
        )
        u = resp.get("usage") or {}
        if not isinstance(u.get("prompt_tokens"), int):
            raise CheckFailed(f"answer carries no usage.prompt_tokens: usage={u!r}")
        return u["prompt_tokens"], resp

    # Calibrate tokens per filler line from two short prompts (no tokenizer on the client).
    n1, n2 = 8, 24
    p1, _ = prompt_tokens(build_haystack(n1, None, ""))
    p2, _ = prompt_tokens(build_haystack(n2, None, ""))
    per_line = (p2 - p1) / (n2 - n1)
    if per_line <= 0:
        raise CheckFailed(
            f"usage.prompt_tokens did not grow with the prompt: {p1} for {n1} lines, {p2} for {n2}"
        )
    base = p1 - n1 * per_line
    n_lines = max(1, int((s.long_context_tokens - base) / per_line))
    rng = random.Random(s.seed)
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    judge_needle = s.semantic_enabled
    shifts = s.long_context_shifts or [0]
    for depth in s.long_context_depths:
        for shift in shifts:
            code = needle_code(rng)
            text = build_haystack(n_lines, depth, code, shift)
            resp, lat = c.chat(
                {
                    "messages": [{"role": "user", "content": text}],
                    "max_tokens": s.long_context_answer_tokens,
                    "temperature": 0,
                    **extra,
                }
            )
            msg, finish = message_of(resp)
            got = msg.get("content") or ""
            norm = normalise_needle_answer(got)
            pt = (resp.get("usage") or {}).get("prompt_tokens")
            where = f"[depth {depth:.2f}, +{shift} words, {pt} prompt tokens]"
            if not isinstance(pt, int):
                probs.append(f"{where} no usage.prompt_tokens in the answer")
            else:
                off = abs(pt - s.long_context_tokens) / s.long_context_tokens
                if off > s.long_context_tolerance:
                    probs.append(
                        f"{where} usage.prompt_tokens={pt}, wanted {s.long_context_tokens} "
                        f"±{s.long_context_tolerance:.0%} (the prompt sent was not the prompt served)"
                    )
                if pt > mml:
                    probs.append(f"{where} usage.prompt_tokens={pt} > max_model_len {mml}")
            if judge_needle and norm != code:
                probs.append(
                    f"{where} answer {_short(got, 60)!r} (normalised: {_short(norm, 60)!r}) is not the "
                    f"needle {code!r}; compared exactly after {NEEDLE_NORMALISATION}"
                )
            seen.append(
                {
                    "depth": depth,
                    "shift_words": shift,
                    "prompt_tokens": pt,
                    "needle": code,
                    "answer": _short(got, 80),
                    "normalised": _short(norm, 80),
                    "exact": norm == code,
                    "finish_reason": finish,
                    "latency_s": round(lat, 3),
                }
            )
    lengths = sorted({x["prompt_tokens"] for x in seen if isinstance(x["prompt_tokens"], int)})
    ev = {
        "max_model_len": mml,
        "target_tokens": s.long_context_tokens,
        "tokens_per_line": per_line,
        "lines": n_lines,
        "normalisation": NEEDLE_NORMALISATION,
        "probes": seen,
    }
    if probs:
        raise CheckFailed("; ".join(probs[:4]), problems=probs, **ev)
    judged = (
        f"answer == needle exactly (after {NEEDLE_NORMALISATION}) at every probe"
        if judge_needle
        else f"needle retrieval not judged ({s.semantic_skip_reason})"
    )
    return (
        f"{len(seen)} prompt(s): depths {list(s.long_context_depths)} x {len(shifts)} neighbouring lengths "
        f"(prompt_tokens {lengths}, usage verified, max_model_len {mml}); {judged}"
    ), ev


# --------------------------------------------------------------------------- greedy sanity


def check_greedy_sanity(c: Client) -> tuple[str, dict[str, Any]]:
    s = c.s
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    for qa in s.expected_answers:
        prompt, want = qa["prompt"], qa["contains"]
        body = {
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "seed": s.seed,
            "max_tokens": s.answer_max_tokens,
            **(NO_THINKING if s.thinking_enabled else {}),
        }
        outs = []
        for _ in range(2):
            resp, lat = c.chat(body)
            msg, finish = message_of(resp)
            outs.append((msg.get("content") or "", finish, lat))
        for i, (content, finish, _) in enumerate(outs, 1):
            if want.lower() not in content.lower():
                probs.append(
                    f"{prompt!r} run {i}: answer {_short(content, 60)!r} lacks {want!r} "
                    f"(finish_reason {finish}) — garbage while /health is 200 (B15)"
                )
            if finish != "stop":
                probs.append(f"{prompt!r} run {i}: finish_reason {finish!r}, wanted 'stop'")
        if outs[0][0] != outs[1][0]:
            probs.append(
                f"{prompt!r}: two greedy runs differ: "
                f"{_short(outs[0][0], 50)!r} vs {_short(outs[1][0], 50)!r}"
            )
        seen.append(
            {
                "prompt": prompt,
                "contains": want,
                "answers": [o[0] for o in outs],
                "finish_reasons": [o[1] for o in outs],
            }
        )
    if probs:
        raise CheckFailed("; ".join(probs[:4]), problems=probs, answers=seen)
    return f"{len(seen)} greedy question(s) answered as expected, twice, byte-identical", {"answers": seen}


# --------------------------------------------------------------------------- soak


def soak_plan(n: int, short: int, long: int) -> list[int]:
    """max_tokens of each of ``n`` soak requests: short, long, medium repeating (≥ 1 long when n ≥ 1)."""
    medium = max(short, long // 4)
    cycle = [short, long, medium]
    plan = [cycle[i % 3] for i in range(n)]
    if n and long not in plan:
        plan[0] = long
    return plan


def check_soak(c: Client) -> tuple[str, dict[str, Any]]:
    s = c.s
    plan = soak_plan(s.soak_requests, s.soak_short_tokens, s.soak_long_tokens)
    seen: list[dict[str, Any]] = []
    for i, mt in enumerate(plan, 1):
        budget = s.soak_first_token_budget_s + mt / s.soak_min_decode_tok_s
        body = {
            "messages": [{"role": "user", "content": f"Request {i}: write a long story about a lighthouse."}],
            "max_tokens": mt,
            "min_tokens": mt if mt >= s.soak_long_tokens else 0,
            "temperature": 0.7,
            "seed": s.seed + i,
            **(NO_THINKING if s.thinking_enabled else {}),
        }
        left = c.deadline.t_end - time.monotonic()
        if left < budget:
            raise SuiteError(
                f"request {i}/{len(plan)} needs a {budget:.0f} s latency budget but only "
                f"{max(left, 0):.0f} s of check_timeout_s={c.deadline.total_s:g} are left; "
                "raise it or lower soak_requests",
                requests=seen,
            )
        try:
            resp, lat = c.chat(body, timeout_s=budget)
        except RequestTimeout:
            raise CheckFailed(
                f"request {i}/{len(plan)} (max_tokens={mt}) got no answer within its latency budget "
                f"{budget:.0f} s after {i - 1} good requests: the wedge-after-a-few-requests class (B08)",
                requests=seen,
            ) from None
        ct = (resp.get("usage") or {}).get("completion_tokens")
        seen.append(
            {
                "i": i,
                "max_tokens": mt,
                "completion_tokens": ct,
                "latency_s": round(lat, 3),
                "budget_s": round(budget, 1),
            }
        )
        if mt >= s.soak_long_tokens and isinstance(ct, int) and ct < s.soak_long_tokens:
            raise CheckFailed(
                f"request {i}: completion_tokens={ct}, wanted ≥ {s.soak_long_tokens} "
                "(min_tokens ignored: the long outputs B08 needs were not produced)",
                requests=seen,
            )
    worst = max(seen, key=lambda x: x["latency_s"] / x["budget_s"])
    return (
        f"{len(plan)} sequential requests completed, {sum(1 for m in plan if m >= s.soak_long_tokens)} of "
        f"≥{s.soak_long_tokens} tokens; worst {worst['latency_s']} s of {worst['budget_s']} s budget"
    ), {"requests": seen}


# --------------------------------------------------------------------------- registry and runner


@dataclass(frozen=True)
class ModelCheck:
    """A named check and when it applies (``applies`` returns a skip reason, or ``None``)."""

    name: str
    fn: Callable[[Client], tuple[str, dict[str, Any]]]
    applies: Callable[[DSV4CheckSettings], str | None]
    title: str = ""
    catches: str = ""
    timeout_s: float = 180.0


def _need_semantic(s: DSV4CheckSettings) -> str | None:
    return None if s.semantic_enabled else s.semantic_skip_reason


def _need_thinking(s: DSV4CheckSettings) -> str | None:
    if not s.thinking_enabled:
        return s.thinking_skip_reason
    return _need_semantic(s)


def _need_tools(s: DSV4CheckSettings) -> str | None:
    if not s.tools_enabled:
        return "the server has no tool-call parser (checks.tools disabled)"
    return _need_semantic(s)


def _soak_on(s: DSV4CheckSettings) -> str | None:
    return None if s.soak_requests > 0 else "soak off (soak_requests=0; it is not part of the 3-minute suite)"


CHECKS: tuple[ModelCheck, ...] = (
    ModelCheck(
        "dsv4.greedy_sanity",
        check_greedy_sanity,
        _need_semantic,
        "greedy known answers, finish_reason stop, twice byte-identical",
        "B15",
        120.0,
    ),
    ModelCheck(
        "dsv4.thinking",
        check_thinking,
        _need_thinking,
        "every way to ask for thinking: reasoning exactly when on, answer in content, no leaks",
        "docs/reference/vllm-code-paths.md#thinking, B11",
        600.0,
    ),
    ModelCheck(
        "dsv4.tool_calls",
        check_tool_calls,
        _need_tools,
        "exact tool calls: auto/required, one and several tools, stream; no wrapper, no DSML",
        "B10",
        300.0,
    ),
    ModelCheck(
        "dsv4.stream_equality",
        check_stream_equality,
        lambda s: None,
        "greedy streamed reasoning/content/tool args == non-streamed",
        "B11",
        300.0,
    ),
    ModelCheck(
        "dsv4.long_context",
        check_long_context,
        lambda s: None if s.long_context_depths else "no depths configured (long_context_depths=[])",
        "needle returned exactly at several depths and neighbouring prompt lengths; usage verified",
        "B13 envelope, truncation",
        600.0,
    ),
    ModelCheck(
        "dsv4.soak",
        check_soak,
        _soak_on,
        "N sequential mixed-length requests (>= 1000-token outputs) within a latency budget",
        "B08",
        3600.0,
    ),
)
CHECK_NAMES = tuple(ch.name for ch in CHECKS)


def run_check(check: ModelCheck, settings: DSV4CheckSettings) -> ModelCheckResult:
    """Run one check with its own deadline; never raises for server or network faults."""
    t0 = time.monotonic()
    reason = check.applies(settings)
    if reason:
        return ModelCheckResult(check.name, "skip", reason)
    c = Client(settings, Deadline(settings.check_timeout_s))
    status: Status
    try:
        msg, ev = check.fn(c)
        status = "pass"
    except CheckFailed as e:
        status, msg, ev = "fail", e.message, e.evidence
    except SuiteError as e:
        status, msg, ev = "error", f"suite error (not a model verdict): {e.message}", e.evidence
    finally:
        c.close()
    ev = {**ev, "requests_sent": c.requests}
    return ModelCheckResult(
        check.name, status, redact(msg, settings.api_key), redact(ev, settings.api_key), time.monotonic() - t0
    )


def iter_model_checks(
    settings: DSV4CheckSettings, only: tuple[str, ...] | None = None
) -> Iterator[ModelCheckResult]:
    """Run the checks (all, or those named in ``only``) in order, yielding each result as it ends.

    Raises:
        ValueError: ``only`` names an unknown check.
    """
    if only:
        unknown = set(only) - set(CHECK_NAMES)
        if unknown:
            raise ValueError(f"unknown DeepSeek-V4 check(s) {sorted(unknown)}; known: {list(CHECK_NAMES)}")
    for ch in CHECKS:
        if only and ch.name not in only:
            continue
        yield run_check(ch, settings)


def run_model_checks(
    settings: DSV4CheckSettings, only: tuple[str, ...] | None = None
) -> list[ModelCheckResult]:
    """All results of :func:`iter_model_checks` as a list."""
    return list(iter_model_checks(settings, only))


# --------------------------------------------------------------------------- health v1 suite adapter


def dsv4_check_specs(api_key: SecretStr | str | None = None, **overrides: Any) -> list[Any]:
    """The checks above as the suite's ``CheckSpec`` list, for ``run_suite(settings, checks=...)``.

    Each spec builds :class:`DSV4CheckSettings` from the suite's context (profile, base URL,
    served model name) plus ``overrides`` and maps the outcome onto the suite's classes:
    ``pass`` -> ``Passed``, ``fail`` -> ``Fail``, ``skip`` -> ``Skip``, ``error`` ->
    ``client.SuiteError`` (reported ``error``). The check's budget is the suite deadline.

    Args:
        api_key: the server's key (the suite's ``SuiteSettings.api_key``), never printed.
        overrides: :class:`DSV4CheckSettings` fields (e.g. ``long_context_tokens=1500``).
    """
    from .checks import CheckSpec, Fail, Passed, Skip
    from .client import SuiteError as HealthSuiteError

    key = SecretStr(api_key) if isinstance(api_key, str) else api_key
    DSV4CheckSettings.model_validate({"base_url": "http://x", "served_model_name": "x", **overrides})

    def make(ch: ModelCheck) -> Callable[[Any, Any], Any]:
        def fn(ctx: Any, deadline: Any) -> Any:
            s = DSV4CheckSettings.from_profile(
                ctx.profile,
                ctx.client.base_url,
                **{
                    "served_model_name": ctx.model,
                    "api_key": key,
                    "request_timeout_s": ctx.long_prompt_timeout_s,
                    "check_timeout_s": deadline.left(),
                    **overrides,
                },
            )
            r = run_check(ch, s)
            if r.status == "pass":
                return Passed(r.message, r.evidence)
            if r.status == "fail":
                raise Fail(r.message, r.evidence)
            if r.status == "skip":
                raise Skip(r.message)
            raise HealthSuiteError(r.message.removeprefix("suite error (not a model verdict): "))

        return fn

    return [CheckSpec(ch.name, ch.title, ch.catches, make(ch), ch.timeout_s) for ch in CHECKS]
