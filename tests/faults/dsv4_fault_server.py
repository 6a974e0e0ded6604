"""A small OpenAI-compatible app that mimics a DeepSeek-V4-Flash vLLM server, correct or broken.

Served on 127.0.0.1 by uvicorn in a thread (:func:`serve`). With no faults it behaves as a
correct DeepSeek-V4 server does for the health checks' prompts (thinking rules of
``tokenizers/deepseek_v4.py`` and ``chat_completion/protocol.py``, [T] below), exact tool calls,
the needle, "Paris", usage). Each fault reproduces one field bug:

[T]: docs/reference/vllm-code-paths.md#thinking

| fault | behaviour | field bug |
|---|---|---|
| ``think_in_content`` | ``<think>…</think>`` left inside content, no reasoning field | [T] |
| ``reasoning_when_off`` | reasoning returned although thinking is off | [T] |
| ``no_reasoning`` | no reasoning although thinking is on | [T] |
| ``conflict_ignored`` | ``thinking:false`` + ``reasoning_effort=high`` does not think | [T] |
| ``special_token_leak`` | ``<｜end▁of▁sentence｜>`` at the end of content | — |
| ``dsml_in_content`` | raw DSML in content, no tool_calls, finish ``stop`` | B10 (a) |
| ``arguments_wrapper`` | tool arguments wrapped as ``{"arguments": {...}}`` | B10 (b) |
| ``needle_off_by_one`` | the needle comes back with its last character changed | — |
| ``needle_chatty`` | the needle comes back inside a sentence ("The secret code is …") | — |
| ``needle_split_odd`` | the needle is garbled only at odd prompt token counts (boundary bug) | — |
| ``leak_when_unspecified`` | streamed, no thinking field: ``<think>``, ``<｜end▁of▁sentence｜>`` | [T] |
| ``null_key_kept`` | a null thinking key: prompt thinks, parser not: ``</think>`` in content | [T] |
| ``think_split_boundary`` | thinking: reasoning ends ``</thi``, content starts ``nk>`` | [T] |
| ``think_split_chunks`` | streamed: ``<think>`` opens content, sent as ``<th`` + ``ink>`` | [T] |
| ``needle_residue`` | the needle is garbled only when the prompt length is 3 modulo 4 (one residue) | — |
| ``drops_head`` | the first 4 % of the prompt is silently dropped (usage still counts it) | — |
| ``truncates_prompt`` | prompts longer than 512 tokens are cut (usage says 512) | — |
| ``garbage`` | "capital of France" answers repeated junk, ``length``; /health still 200 | B15 |
| ``nondeterministic`` | every answer carries a request counter | B15 (determinism) |
| ``stream_drops_chunk`` | the stream loses its second content piece | B11 |
| ``wedge_after`` | after ``wedge_after`` chat requests, requests hang (``wedge_s``) | B08 |
| ``engine_dead`` | every chat request answers HTTP 500 EngineDeadError (toggle at run time) | B08 |

Logprobs (a request with ``logprobs: true``) come as vLLM sends them, one token per stream piece
(``fake_logprobs``); ``FaultState.noise`` (``BatchNoise("flip")`` or ``("garbage")``) is batch
noise: an answer served while another request is in flight takes, every other time, the
runner-up of the near-tie at its middle token, or a token outside the top 5.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fake_logprobs import BatchNoise, entries
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from vllm_thinking import vllm_thinks

D = "｜DSML｜"
FAULTS = {
    "think_in_content",
    "reasoning_when_off",
    "no_reasoning",
    "conflict_ignored",
    "special_token_leak",
    "dsml_in_content",
    "arguments_wrapper",
    "needle_off_by_one",
    "needle_chatty",
    "needle_split_odd",
    "leak_when_unspecified",
    "null_key_kept",
    "think_split_boundary",
    "think_split_chunks",
    "truncates_prompt",
    "needle_residue",
    "drops_head",
    "garbage",
    "nondeterministic",
    "stream_drops_chunk",
    "wedge_after",
    "engine_dead",
}


@dataclass
class FaultState:
    """Mutable behaviour of one fault server (tests may change it while it runs)."""

    faults: set[str] = field(default_factory=set)
    served_model_name: str = "dsv4-fault"
    max_model_len: int = 524_288  # configs/profiles/deepseek-v4-flash.yaml server.max_model_len
    api_key: str | None = None
    wedge_after: int = 3
    wedge_s: float = 30.0
    default_chat_kwargs: dict[str, Any] = field(default_factory=dict)
    """The server's ``--default-chat-template-kwargs``."""
    noise: BatchNoise = field(default_factory=BatchNoise)
    """Batch noise on answers with text (``fake_logprobs``); tool calls are left as they are."""
    chat_requests: int = 0
    seen_models: list[str] = field(default_factory=list)
    seen_auth: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = self.faults - FAULTS
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {sorted(FAULTS)}")


def _thinking(body: dict[str, Any], st: FaultState) -> bool:
    ck = body.get("chat_template_kwargs") or {}
    effort = body.get("reasoning_effort")
    if "conflict_ignored" in st.faults and effort not in (None, "none") and "enable_thinking" not in ck:
        # reasoning_effort adds no enable_thinking: thinking:false + effort=high does not think
        body = {k: v for k, v in body.items() if k != "reasoning_effort"}
    return vllm_thinks(body, st.default_chat_kwargs)


def _last_user(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else json.dumps(c)
    return ""


def _prompt_tokens(body: dict[str, Any], st: FaultState | None = None) -> int:
    """The prompt's length in this server's tokens (4 characters each, 12 for the template),
    as served (``truncates_prompt`` cuts it; ``st=None``: as ``/tokenize`` counts it)."""
    n = 12 + sum(len(str(m.get("content") or "")) // 4 for m in body.get("messages") or [])
    return min(n, 512) if st is not None and "truncates_prompt" in st.faults else n


def _pick_tool(prompt: str, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    names = [t["function"]["name"] for t in tools]
    name = next((n for n in names if n in prompt), None)
    if name is None:
        low = prompt.lower()
        name = next(
            (
                n
                for n, kw in (("send_email", "mail"), ("get_time", "time"), ("get_weather", "weather"))
                if kw in low and n in names
            ),
            names[0],
        )
    if name == "get_weather":
        m = re.search(r"\b(?:in) ([A-Z][a-z]+)", prompt)
        return name, {"city": m.group(1) if m else "Paris"}
    if name == "get_time":
        m = re.search(r"timezone (\S+?)\.?$", prompt)
        return name, {"timezone": m.group(1) if m else "UTC"}
    to = re.search(r"[\w.]+@[\w.]+\w", prompt)
    subj = re.search(r"subject '([^']*)'", prompt)
    bod = re.search(r"body '([^']*)'", prompt)
    return name, {
        "to": to.group(0) if to else "",
        "subject": subj.group(1) if subj else "",
        "body": bod.group(1) if bod else "",
    }


@dataclass
class Answer:
    content: str | None
    reasoning: str | None
    finish: str
    tool: tuple[str, str] | None = None  # (name, arguments JSON)
    completion_tokens: int = 0


def _answer(body: dict[str, Any], st: FaultState, n_req: int) -> Answer:
    prompt = _last_user(body)
    think = _thinking(body, st)
    max_tokens = int(body.get("max_tokens") or 16)
    min_tokens = int(body.get("min_tokens") or 0)
    reasoning: str | None = None
    finish = "stop"
    tool = None
    ck = body.get("chat_template_kwargs") or {}
    tools = body.get("tools") or []
    if tools and body.get("tool_choice", "auto") != "none":
        name, args = _pick_tool(prompt, tools)
        if "arguments_wrapper" in st.faults:
            args = {"arguments": args}
        if "dsml_in_content" in st.faults:
            params = "".join(
                f'<{D}parameter name="{k}" string="true">{v}</{D}parameter>\n' for k, v in args.items()
            )
            content: str | None = f'<{D}invoke name="{name}">\n{params}</{D}invoke>\n</{D}tool_calls>'
        else:
            content, tool, finish = None, (name, json.dumps(args)), "tool_calls"
    elif "secret code" in prompt:
        seen = prompt[len(prompt) * 4 // 100 :] if "drops_head" in st.faults else prompt
        m = re.search(r"The secret code is (\S+)\.", seen)
        code = m.group(1) if m else "none"
        if "truncates_prompt" in st.faults:
            code = "I do not see a code."
        elif "needle_residue" in st.faults and _prompt_tokens(body, st) % 4 == 3:
            code = code[:4] + code[5:]
        elif "needle_off_by_one" in st.faults:
            code = code[:-1] + ("X" if code[-1] != "X" else "Y")
        elif "needle_split_odd" in st.faults and _prompt_tokens(body, st) % 2:
            code = code.replace("-", " - ", 1)
        content = f"The secret code is {code}." if "needle_chatty" in st.faults else code
    elif "capital of France" in prompt:
        if "garbage" in st.faults:
            content, finish = " ".join(["the"] * max_tokens), "length"
        else:
            content = "Paris"
    elif "17 + 25" in prompt:
        content = "42"
    elif "Count from one to twenty" in prompt:
        words = (
            "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen".split()
        )
        content = ", ".join(words[: max_tokens // 2])
        finish = "length" if max_tokens // 2 < len(words) else "stop"
    else:
        n = min(max_tokens, max(min_tokens, 20))
        content = " ".join(f"w{i}" for i in range(n))
        finish = "length" if n >= max_tokens else "stop"
    if think and tool is None and "no_reasoning" not in st.faults:
        reasoning = "The user asks a simple question; I answer briefly."
    if not think and "reasoning_when_off" in st.faults:
        reasoning = "Thinking although it was turned off."
    if "think_in_content" in st.faults and reasoning:
        content, reasoning = f"<think>{reasoning}</think>{content or ''}", None
    nulls = any(k in ck and ck[k] is None for k in ("thinking", "enable_thinking"))
    if "null_key_kept" in st.faults and reasoning and nulls and not st.default_chat_kwargs:
        content, reasoning = f"{reasoning}</think>{content or ''}", None
    if "think_split_boundary" in st.faults and reasoning:
        reasoning, content = reasoning + "</thi", "nk>" + (content or "")
    unspecified = not any(k in ck for k in ("thinking", "enable_thinking")) and "reasoning_effort" not in body
    if "leak_when_unspecified" in st.faults and unspecified and body.get("stream") and content is not None:
        content = f"<think>{content}<｜end▁of▁sentence｜>"
    if "special_token_leak" in st.faults and content is not None:
        content += "<｜end▁of▁sentence｜>"
    if "nondeterministic" in st.faults and content is not None:
        content += f" #{n_req}"
    ct = len((content or "").split()) + len((reasoning or "").split()) + (8 if tool else 0)
    return Answer(content, reasoning, finish, tool, min(ct, max_tokens))


def make_app(st: FaultState) -> FastAPI:
    """The fault server's FastAPI app, driven by ``st``."""
    app = FastAPI()

    def _auth(request: Request) -> JSONResponse | None:
        got = request.headers.get("authorization", "")
        st.seen_auth.append(got)
        if st.api_key and got != f"Bearer {st.api_key}":
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return None

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({})

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        if (bad := _auth(request)) is not None:
            return bad
        return JSONResponse(
            {
                "object": "list",
                "data": [{"id": st.served_model_name, "object": "model", "max_model_len": st.max_model_len}],
            }
        )

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        if (bad := _auth(request)) is not None:
            return bad
        body = await request.json()
        if "messages" in body:
            n = _prompt_tokens(body)
        else:
            n = max(1, len(str(body.get("prompt") or "")) // 4)
        return JSONResponse({"count": n, "max_model_len": st.max_model_len, "tokens": [0] * n})

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        if (bad := _auth(request)) is not None:
            return bad
        body = await request.json()
        st.chat_requests += 1
        n_req = st.chat_requests
        st.seen_models.append(body.get("model"))
        if body.get("model") != st.served_model_name:
            return JSONResponse(
                {"error": {"message": f"The model `{body.get('model')}` does not exist."}}, status_code=404
            )
        if "engine_dead" in st.faults:
            return JSONResponse(
                {
                    "error": {
                        "message": "EngineCore encountered an issue. EngineDeadError",
                        "type": "InternalServerError",
                    }
                },
                status_code=500,
            )
        if "wedge_after" in st.faults and n_req > st.wedge_after:
            await asyncio.sleep(st.wedge_s)
        pt = _prompt_tokens(body, st)
        mml_left = st.max_model_len - pt
        if mml_left < int(body.get("max_tokens") or 0):
            return JSONResponse({"error": {"message": "maximum context length exceeded"}}, status_code=400)
        a = _answer(body, st, n_req)
        r_tok, c_tok = _pieces(a.reasoning) if a.reasoning else [], _pieces(a.content) if a.content else []
        original = r_tok + c_tok
        ticket = st.noise.enter()
        if st.noise.noise is not None:
            await asyncio.sleep(st.noise.hold_s)
        # a near-tie lies in free text; a tool call's arguments and a copied needle have none
        free_text = a.tool is None and "secret code" not in _last_user(body)
        served = st.noise.leave(ticket, original if free_text else [], body) or original
        if served != original:
            a.reasoning = "".join(served[: len(r_tok)]) or a.reasoning
            a.content = "".join(served[len(r_tok) :]) or a.content
        lp = entries(served, original) + (entries(_halves(a.tool[1]), _halves(a.tool[1])) if a.tool else [])
        want_lp = bool(body.get("logprobs"))
        usage = {
            "prompt_tokens": pt,
            "completion_tokens": a.completion_tokens,
            "total_tokens": pt + a.completion_tokens,
        }
        rid = body.get("request_id")
        ident = f"chatcmpl-{rid if isinstance(rid, str) and rid else uuid.uuid4().hex}"
        if not body.get("stream"):
            msg: dict[str, Any] = {"role": "assistant", "content": a.content, "reasoning": a.reasoning}
            if a.tool:
                msg["tool_calls"] = [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": a.tool[0], "arguments": a.tool[1]},
                    }
                ]
            choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": a.finish}
            if want_lp:
                choice["logprobs"] = {"content": lp}
            return JSONResponse(
                {
                    "id": ident,
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": st.served_model_name,
                    "choices": [choice],
                    "usage": usage,
                }
            )
        return StreamingResponse(
            _stream(a, body, usage, st, ident, lp if want_lp else None), media_type="text/event-stream"
        )

    return app


def _pieces(text: str) -> list[str]:
    """A text as this server's tokens (and stream pieces): each word with the spaces after it."""
    return re.findall(r"\S+\s*|\s+", text) or [text]


def _halves(args: str) -> list[str]:
    """Tool arguments as this server's tokens (and stream fragments): two halves."""
    return [args[: len(args) // 2], args[len(args) // 2 :]]


async def _stream(
    a: Answer,
    body: dict[str, Any],
    usage: dict[str, int],
    st: FaultState,
    ident: str,
    lp: list[dict[str, Any]] | None = None,
) -> AsyncIterator[str]:
    created = int(time.time())
    lp_iter = iter(lp or [])

    def chunk(delta: dict[str, Any], finish: str | None = None, token: bool = False) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        entry = next(lp_iter, None) if token and lp is not None else None
        if entry is not None:
            choice["logprobs"] = {"content": [entry]}
        obj = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": st.served_model_name,
            "choices": [choice],
        }
        return f"data: {json.dumps(obj)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for p in _pieces(a.reasoning or "") if a.reasoning else []:
        yield chunk({"reasoning": p}, token=True)
    if "think_split_chunks" in st.faults and a.content:
        yield chunk({"content": "<th"})
        yield chunk({"content": "ink>"})
    if a.content:
        for i, p in enumerate(_pieces(a.content)):
            if i == 1 and "stream_drops_chunk" in st.faults:
                next(lp_iter, None)  # the chunk is lost with its token
                continue
            yield chunk({"content": p}, token=True)
    if a.tool:
        name, args = a.tool
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        for frag in _halves(args):
            yield chunk({"tool_calls": [{"index": 0, "function": {"arguments": frag}}]}, token=True)
    yield chunk({}, a.finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        yield f"data: {json.dumps({'id': ident, 'created': created, 'choices': [], 'usage': usage})}\n\n"
    yield "data: [DONE]\n\n"


class Served:
    """A uvicorn server running an app in a daemon thread on 127.0.0.1 (use as a context manager)."""

    def __init__(self, app: Any, port: int = 0) -> None:
        self.config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def base_url(self) -> str:
        sock = self.server.servers[0].sockets[0]
        return f"http://127.0.0.1:{sock.getsockname()[1]}"

    def __enter__(self) -> Served:
        self.thread.start()
        t_end = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > t_end or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start within 20 s")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(st: FaultState) -> Served:
    """``with serve(FaultState(...)) as srv:`` → ``srv.base_url``."""
    return Served(make_app(st))
