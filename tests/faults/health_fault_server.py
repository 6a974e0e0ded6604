"""A fault-injecting stand-in for a vLLM OpenAI server, on 127.0.0.1, for the health suite's tests.

It answers the endpoints the suite uses the way vLLM 0.32 does (same JSON shapes and SSE
framing as captured from the real CPU server) and, per switch in ``faults``, misbehaves
in exactly one way, so each check can be shown to FAIL on the behaviour it exists to catch.
It is not a mock of the suite: the suite runs unchanged over real HTTP against it.

Faults (strings in :attr:`FaultServer.faults`):
    models_missing, chat_500, chat_empty, usage_wrong, double_done, no_usage_chunk,
    usage_always, usage_on_empty_options (vllm PR #36379), stream_differs, tool_args_true,
    tool_args_invalid, tool_in_content,
    tool_finish_stop, long_hang, long_accept_overlong, prompt_tokens_off, nondeterministic,
    engine_dies (after ``die_after`` chat requests /health answers 503 and chat 500 with
    vLLM's EngineDeadError text), wedge (after ``die_after`` chat requests, chat requests hang
    ``hang_s`` while /health stays 200), wrong_answer, reasoning_when_off,
    unspecified_think_tag / unspecified_eos / unspecified_reasoning (a chat request that names
    no thinking field gets ``<think>`` in content, ``<|im_end|>`` at the end of content, or a
    reasoning field; with ``unspecified_stream_only`` only when streamed),
    echo_auth (every error body quotes the request's ``Authorization`` header, as a careless
    proxy does), echo_key (with ``api_key`` set: every chat answer repeats the key in every
    way a server can, :func:`key_echo_pieces`: whole, split across 2..n stream chunks at every
    offset, masked, base64 of the ``Authorization`` header, spelt in JSON ``\\u`` escapes; tool
    arguments carry it; error bodies quote the header and its base64),
    spec_not_drafting (speculation counters exported but never rising), batch_differs (a chat
    answer served while another is in flight gets other text; each answer then takes 0.3 s).

Speculation (``spec_k`` set): ``/metrics`` exports vLLM's ``vllm:spec_decode_num_*_total``
counters; each chat answer of ``n`` tokens adds ``ceil(n / (k + 1))`` drafts of k tokens, of
which the fraction ``acceptance`` is accepted.

Malformed answers (:attr:`FaultServer.chat_mode`, for non-streamed chat requests: what the
gateway's canary sends first), one of :data:`CHAT_MODES`; streamed ones
(:attr:`FaultServer.stream_mode`), one of :data:`STREAM_MODES`. :attr:`FaultServer.replay`: a
caching proxy in front of the server: every chat request gets the last answer given before
(same bytes, same ``id`` and ``created``). Answers are named as vLLM names them:
``chatcmpl-<request_id>`` (the body's ``request_id``, else a fresh uuid), ``created`` now.
``api_key``: when set, every request without ``Authorization: Bearer <api_key>`` gets HTTP
401 (quoting the header it got).
"""

from __future__ import annotations

import base64
import json
import random
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fake_logprobs import BatchNoise, entries
from fault_answers import pieces, send_malformed, stream_chunks
from key_echo import escape_key, key_echo_pieces, masked
from sparkpair_health.suite import Timeouts
from vllm_thinking import vllm_thinks

LIVENESS = Timeouts(ready_s=30, request_s=30, long_prompt_s=30)
"""The suite's time limits for a run against this server: bounds its prompt answers always meet,
even on a loaded 2-core CI machine (3 s per request ran out there once). A test that needs a
timeout to fire sets its own, shorter one, on a request the server holds far longer."""

CHAT_MODES = (
    "ok",
    "body_list",  # 200, JSON []
    "body_string",  # 200, JSON "hello"
    "body_usage_str",  # 200, {"usage": "x"}
    "body_wrong_types",  # 200, every field of the right name and the wrong type
    "body_not_json",  # 200, application/json that does not parse
    "wrong_content_type",  # 200, text/html
    "partial",  # 200, content-length promises more than is sent, then the connection closes
    "drip",  # 200 headers, then one byte every drip_s seconds, never finishing
    "other_text",  # a well-formed answer with other text than the greedy one
    "finish_flipped",  # a well-formed answer with the other finish_reason (stop <-> length)
    "hang",  # no answer for hang_s
)
"""Non-streamed chat behaviours the gateway fault walk drives through (``FaultServer.chat_mode``)."""

BUSY_MODES = ("slow",)
"""Chat modes of an engine that works but answers late: held ``hang_s`` like ``hang`` while
the exported engine counters (``engine_metrics``) keep moving (not in the fault walk: busy is
not a fault)."""

STREAM_MODES = (
    "ok",
    "empty",  # 200 text/event-stream carrying only `data: [DONE]`: a stream that ends without content
    "drip",  # the right stream, each event drip_s after the one before (a slow stream)
)
"""Streamed chat behaviours (``FaultServer.stream_mode``)."""

ENDLESS_MODES = (
    "endless",  # 200, a chunked body that never ends, 64 KiB chunks as fast as they are read
    "endless_slow",  # 200, a chunked body that never ends, 1 KiB every 10 ms (under any size cap)
)
"""Chat modes whose body never ends (``FaultServer.chat_mode`` too; not in the gateway walk:
the client's own test measures what they make it read, ``FaultServer.body_bytes_sent``)."""

WORDS = "hello pair of sparks the quick brown fox jumps over the lazy dog again and again".split()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.owner.lock:
            self.server.owner.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.owner.lock:
            self.server.owner.connections.discard(self.connection)
        super().finish()

    # ---------------------------------------------------------------- plumbing
    def _send(self, code: int, obj: Any) -> None:
        auth = self.headers.get("authorization", "")
        if code != 200 and {"echo_auth", "echo_key"} & self.faults and isinstance(obj, dict):
            obj = {**obj, "echo": f"request headers: Authorization: {auth}"}
            if "echo_key" in self.faults:
                obj["b64"] = base64.b64encode(f"Authorization: {auth}".encode()).decode()
        text = json.dumps(obj, ensure_ascii=False)
        if "echo_key" in self.faults and self.server.owner.api_key:
            text = escape_key(text, self.server.owner.api_key)
        body = text.encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _sse(self, payloads: list[str]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("connection", "close")
        self.end_headers()
        key = self.server.owner.api_key
        for p in payloads:
            if self.server.owner.stream_mode == "drip":
                time.sleep(self.server.owner.drip_s)  # each event late, none past a read timeout
            if "echo_key" in self.faults and key:
                p = escape_key(p, key)
            self.wfile.write(f"data: {p}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True

    @property
    def faults(self) -> set[str]:
        return self.server.owner.faults

    def _dead(self) -> bool:
        o = self.server.owner
        return "engine_dies" in self.faults and o.chat_count >= o.die_after

    def _refused(self) -> bool:
        key = self.server.owner.api_key
        got = self.headers.get("authorization", "")
        if key is None or got == f"Bearer {key}":
            return False
        self._send(401, {"error": {"message": f"Unauthorized: got Authorization {got!r}", "code": 401}})
        return True

    def _raw(self, code: int, ctype: str, body: bytes, length: int | None = None) -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    # ---------------------------------------------------------------- GET
    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/health" and self._refused():
            return
        if self.path == "/health":
            if self._dead():
                self._send(503, {"error": "EngineDeadError"})
            else:
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
        elif self.path == "/v1/models":
            name = "other-model" if "models_missing" in self.faults else self.server.owner.model
            self._send(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": name, "object": "model", "max_model_len": self.server.owner.max_model_len}
                    ],
                },
            )
        elif self.path == "/version":
            self._send(200, {"version": "fault-server"})
        elif self.path == "/metrics":
            o = self.server.owner
            time.sleep(o.metrics_delay_s)  # an API server starved under load answers late
            c = o.spec if o.spec_k else {}
            lines = [
                f"# TYPE vllm:spec_decode_{k} counter\nvllm:spec_decode_{k}_total {v}" for k, v in c.items()
            ]
            if o.engine_metrics:
                lines.append(o.engine_text())
            self._raw(200, "text/plain; version=0.0.4", ("\n".join(lines) + "\n").encode())
        else:
            self._send(404, {"error": {"message": "not found", "code": 404}})

    # ---------------------------------------------------------------- POST
    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(n) or b"{}")
        if self._refused():
            return
        if self.path == "/tokenize":
            text = body.get("prompt", "")
            self._send(
                200,
                {
                    "count": len(text),
                    "tokens": [ord(c) % 500 for c in text],
                    "max_model_len": self.server.owner.max_model_len,
                },
            )
        elif self.path == "/v1/completions":
            self._completions(body)
        elif self.path == "/v1/chat/completions":
            self._chat(body)
        else:
            self._send(404, {"error": {"message": "not found", "code": 404}})

    def _completions(self, body: dict[str, Any]) -> None:
        o = self.server.owner
        prompt = body.get("prompt")
        plen = len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
        mt = int(body.get("max_tokens") or 16)
        if plen + mt > o.max_model_len:
            if "long_hang" in self.faults:
                time.sleep(o.hang_s)
            if "long_accept_overlong" not in self.faults:
                self._send(
                    400,
                    {
                        "error": {
                            "message": f"This model's maximum context length is {o.max_model_len} "
                            f"tokens. However, you requested {plen + mt} tokens.",
                            "type": "BadRequestError",
                            "code": 400,
                        }
                    },
                )
                return
        pt = plen - 1 if "prompt_tokens_off" in self.faults else plen
        self._send(
            200,
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "model": o.model,
                "choices": [{"index": 0, "text": " fox" * mt, "finish_reason": "length"}],
                "usage": {"prompt_tokens": pt, "completion_tokens": mt, "total_tokens": pt + mt},
            },
        )

    def _text(self, body: dict[str, Any]) -> tuple[str, int, str]:
        mt = int(body.get("max_tokens") or 16)
        prompt = json.dumps(body.get("messages"))
        start = sum(map(ord, prompt)) % len(WORDS)
        words = [WORDS[(start + i) % len(WORDS)] for i in range(mt)]
        if "nondeterministic" in self.faults:
            words[-1] = random.choice(WORDS) + str(random.randint(0, 10**6))
        text = " ".join(words)
        if "wrong_answer" in self.faults:
            text = "Berlin Berlin Berlin"
        return text, mt, "length"

    def _chat(self, body: dict[str, Any]) -> None:
        o = self.server.owner
        with o.lock:
            o.chat_running += 1
        try:
            self._chat_answer(body)
        finally:
            with o.lock:
                o.chat_running -= 1

    def _chat_answer(self, body: dict[str, Any]) -> None:
        o = self.server.owner
        with o.lock:
            o.chat_count += 1
            dead = "engine_dies" in self.faults and o.chat_count > o.die_after
        if "wedge" in self.faults and o.chat_count > o.die_after:
            time.sleep(o.hang_s)  # a wedged engine: /health still 200, requests never answered (B08)
        stream = bool(body.get("stream"))
        if o.chat_delay_s:
            time.sleep(o.chat_delay_s)  # a right answer, late (an engine that works, slowly)
        if o.replay and stream in o.cached:
            if stream:
                self._sse(o.cached[stream])
            else:
                self._send(200, o.cached[stream])
            return
        if not stream and send_malformed(self, o.chat_mode):
            return
        if stream and o.stream_mode == "empty":
            self._sse(["[DONE]"])
            return
        if dead or "chat_500" in self.faults:
            self._send(
                500,
                {
                    "error": {
                        "message": "EngineCore encountered an issue. See stack trace (above) "
                        "for the root cause."
                        if dead
                        else "internal error",
                        "type": "InternalServerError",
                        "code": 500,
                    }
                },
            )
            return
        rid = body.get("request_id")
        ident = f"chatcmpl-{rid if isinstance(rid, str) and rid else uuid.uuid4().hex}"
        created = int(time.time())
        echo = key_echo_pieces(o.api_key) if "echo_key" in self.faults and o.api_key else []
        ptoks = 11
        msg: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": []}
        original_text: list[str] | None = None
        tc = body.get("tool_choice")
        if body.get("tools") and tc not in (None, "none", "auto"):
            name = tc["function"]["name"] if isinstance(tc, dict) else "get_weather"
            args = {"get_weather": '{"city": "Paris", "unit": "celsius"}', "get_time": '{"city": "Paris"}'}[
                name
            ]
            if "tool_args_true" in self.faults:
                args = "true"
            if "tool_args_invalid" in self.faults:
                args = '{"city": "Rome", "unit": "celsius"}'
            if echo:
                args = json.dumps({"city": o.api_key, "unit": masked(o.api_key)})
            fr = "stop" if isinstance(tc, dict) else "tool_calls"
            if "tool_finish_stop" in self.faults:
                fr = "stop"
            if "tool_in_content" in self.faults:
                msg["content"] = f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'
                fr = "stop"
            else:
                msg["tool_calls"] = [
                    {
                        "id": "chatcmpl-tool-1",
                        "type": "function",
                        "function": {"name": name, "arguments": args},
                    }
                ]
            text, ctoks = msg["content"] or "", 20
        else:
            text, ctoks, fr = self._text(body)
            ticket = o.noise.enter()
            if o.noise.noise is not None:
                time.sleep(o.noise.hold_s)
            said = pieces(text)
            text = "".join(o.noise.leave(ticket, said, body))
            original_text = said
            if "batch_differs" in self.faults:
                with o.lock:
                    o.in_flight += 1
                time.sleep(0.3)
                with o.lock:
                    crowded = o.in_flight > 1
                    o.in_flight -= 1
                if crowded:
                    text = text.replace(" ", "  ", 1)
            if o.spec_k and "spec_not_drafting" not in self.faults:
                with o.lock:
                    drafts = -(-ctoks // (o.spec_k + 1))
                    o.spec["num_drafts"] += drafts
                    o.spec["num_draft_tokens"] += drafts * o.spec_k
                    o.spec["num_accepted_tokens"] += round(drafts * o.spec_k * o.acceptance)
            msg["content"] = text + "".join(echo)
            if "chat_empty" in self.faults:
                msg["content"] = ""
            kw = body.get("chat_template_kwargs") or {}
            thinks = o.thinking_defaults is not None and vllm_thinks(body, o.thinking_defaults)
            if "reasoning_when_off" in self.faults or thinks:
                msg["reasoning"] = "let me think"
            if o.chat_mode == "other_text":
                msg["content"] = "something else entirely"
            if o.chat_mode == "finish_flipped":
                fr = "stop" if fr == "length" else "length"
            unspecified = not any(k in kw for k in ("thinking", "enable_thinking")) and (
                "reasoning_effort" not in body
            )
            if unspecified and (stream or "unspecified_stream_only" not in self.faults):
                if "unspecified_think_tag" in self.faults:
                    msg["content"] = "<think>" + msg["content"]
                if "unspecified_eos" in self.faults:
                    msg["content"] += "<|im_end|>"
                if "unspecified_reasoning" in self.faults:
                    msg["reasoning"] = "leaked chain of thought"
        usage = {"prompt_tokens": ptoks, "completion_tokens": ctoks, "total_tokens": ptoks + ctoks}
        if "usage_wrong" in self.faults:
            usage["total_tokens"] += 3
        want_lp = bool(body.get("logprobs"))
        reasoning_tokens = [msg["reasoning"]] if msg.get("reasoning") else []
        if msg["tool_calls"]:
            a = msg["tool_calls"][0]["function"]["arguments"]
            answer_tokens = [a[: len(a) // 2], a[len(a) // 2 :]]
        else:
            said = msg["content"] or ""
            said = said[: len(said) - len("".join(echo))] if echo else said
            answer_tokens = pieces(said) + echo if said or echo else []
        tokens = reasoning_tokens + answer_tokens
        original = reasoning_tokens + (original_text + echo if original_text is not None else answer_tokens)
        if len(original) != len(tokens):
            original = tokens
        lp_entries = entries(tokens, original) if want_lp else []
        if not stream:
            choice: dict[str, Any] = {"index": 0, "message": msg, "finish_reason": fr}
            if want_lp:
                choice["logprobs"] = {"content": lp_entries}
            answer = {
                "id": ident,
                "object": "chat.completion",
                "created": created,
                "model": o.model,
                "choices": [choice],
                "usage": usage,
            }
            o.cached[False] = answer
            self._send(200, answer)
            return
        out = stream_chunks(
            ident=ident,
            created=created,
            model=o.model,
            msg=msg,
            finish_reason=fr,
            usage=usage,
            echo=echo,
            lp_entries=lp_entries if want_lp else None,
            reasoning_tokens=reasoning_tokens,
            faults=self.faults,
            body=body,
        )
        o.cached[True] = out
        self._sse(out)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FaultServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer (what the health client does to a stream it has
        judged) is expected here: say nothing. Anything else: socketserver's traceback."""
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class FaultServer:
    """A vLLM stand-in on ``127.0.0.1:<free port>``, misbehaving per :attr:`faults`.

    Args:
        faults: fault names (see the module docstring); mutable while running.
        model: the served model name.
        max_model_len: tokens, as ``/v1/models`` reports it.
        die_after: with ``engine_dies``, chat requests answered before the engine "dies".
        hang_s: with ``long_hang``/``wedge`` and the ``drip``/``hang`` chat modes, seconds a
            request is held open.
        drip_s: with the ``drip`` chat mode, seconds between two bytes.
        api_key: require ``Authorization: Bearer <api_key>`` (else HTTP 401).
        thinking_defaults: ``None``: a model without a thinking mode (no reasoning, ever);
            else a thinking model served with these ``--default-chat-template-kwargs``: it
            reasons exactly when vLLM's DeepSeek-V4 encoder would think (``vllm_thinking``).
        engine_metrics: ``/metrics`` also exports vLLM's engine counters
            (:meth:`engine_text`): requests running are the chat requests in flight; the step
            counter moves at each read while one runs, unless the engine is stuck (any chat
            mode but ``slow`` holding the answer, or ``wedge``).
        noise: batch noise (:class:`fake_logprobs.BatchNoise`): with ``flip``, an answer served
            while another is in flight takes, every other time, the runner-up of a near-tie at its
            middle token; with ``garbage``, a token outside the top 5 there.
        metrics_delay_s: seconds ``/metrics`` waits before it reads the counters and answers
            (an API server starved under load); mutable while running.
        chat_delay_s: seconds every chat answer (streamed or not) waits before it is sent
            (then sent as usual); mutable while running.
    """

    def __init__(
        self,
        faults: set[str] | None = None,
        *,
        model: str = "tiny",
        max_model_len: int = 2048,
        die_after: int = 2,
        hang_s: float = 30.0,
        drip_s: float = 2.0,
        api_key: str | None = None,
        spec_k: int | None = None,
        acceptance: float = 0.7,
        thinking_defaults: dict[str, Any] | None = None,
        noise: str | None = None,
        engine_metrics: bool = False,
        metrics_delay_s: float = 0.0,
        chat_delay_s: float = 0.0,
    ) -> None:
        self.faults = set(faults or ())
        self.metrics_delay_s = metrics_delay_s
        self.chat_delay_s = chat_delay_s
        self.noise = BatchNoise(noise)
        """Batch noise on chat answers (``fake_logprobs``): ``None``, ``flip`` or ``garbage``."""
        self.thinking_defaults = thinking_defaults
        self.spec_k = spec_k
        self.acceptance = acceptance
        self.spec = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
        self.in_flight = 0
        self.engine_metrics = engine_metrics
        self.chat_running = 0
        self.engine_steps = 0
        self.generated = 0
        self.chat_mode = "ok"
        self.stream_mode = "ok"
        """One of :data:`STREAM_MODES`."""
        self.replay = False
        """Answer every chat request with the last answer given before (a caching proxy)."""
        self.cached: dict[bool, Any] = {}
        self.body_bytes_sent = 0
        """Body bytes the ``endless`` chat modes wrote (what the client let through its socket)."""
        self.drip_s = drip_s
        self.api_key = api_key
        self.closing = False
        self.model = model
        self.max_model_len = max_model_len
        self.die_after = die_after
        self.hang_s = hang_s
        self.chat_count = 0
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def engine_text(self) -> str:
        """vLLM's engine counters (names as ``vllm/v1/metrics/loggers.py``): one engine step per
        read while a chat request runs on an engine that is not stuck."""
        with self.lock:
            stuck = self.chat_mode in ("hang", "drip") or "wedge" in self.faults
            if self.chat_running > 0 and not stuck:
                self.engine_steps += 1
                self.generated += 1
            run, steps, gen = self.chat_running, self.engine_steps, self.generated
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="{self.model}"}} {run}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0",model_name="{self.model}"}} 0\n'
            "# TYPE vllm:iteration_tokens_total histogram\n"
            f'vllm:iteration_tokens_total_bucket{{engine="0",le="+Inf"}} {steps}\n'
            f'vllm:iteration_tokens_total_count{{engine="0"}} {steps}\n'
            f'vllm:iteration_tokens_total_sum{{engine="0"}} {gen}\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0"}} {gen}\n'
            "# TYPE vllm:prompt_tokens counter\n"
            f'vllm:prompt_tokens_total{{engine="0"}} {steps}\n'
        )

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and free the port (a vanishing backend); held requests end at once."""
        if self.closing:
            return
        self.closing = True
        self._httpd.shutdown()
        self._httpd.server_close()
        with self.lock:
            live = list(self.connections)
        for c in live:  # keep-alive connections too: a vanished server answers nothing
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
