"""How the fault server (``health_fault_server.py``) writes a chat answer on the wire: a streamed
answer's SSE payloads in vLLM's framing, the malformed non-streamed answers of its chat modes,
and its tokens (words, each after the first with its leading space).
"""

from __future__ import annotations

import json
import time
from typing import Any

from fake_logprobs import entries


def pieces(text: str) -> list[str]:
    """A text as this server's tokens: its words, each after the first with its leading space."""
    if not text:
        return []
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def send_malformed(h: Any, mode: str) -> bool:
    """Answer a non-streamed chat request on handler ``h`` per ``mode`` (one of the server's
    ``CHAT_MODES``, ``BUSY_MODES`` or ``ENDLESS_MODES``); False: answer it normally."""
    o = h.server.owner
    bodies: dict[str, Any] = {
        "body_list": [],
        "body_string": "hello",
        "body_usage_str": {"usage": "x"},
        "body_wrong_types": {
            "choices": {"0": "x"},
            "usage": {"completion_tokens": "3"},
            "model": 1,
        },
    }
    if mode in bodies:
        h._raw(200, "application/json", json.dumps(bodies[mode]).encode())
    elif mode == "body_not_json":
        h._raw(200, "application/json", b"{not json")
    elif mode == "wrong_content_type":
        h._raw(200, "text/html", b"<html><body>upstream proxy error</body></html>")
    elif mode == "partial":
        h._raw(200, "application/json", b'{"choices": [{"message": {"content": "he', length=500)
        h.close_connection = True
    elif mode == "drip":
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", "100000")
        h.end_headers()
        t_end = time.monotonic() + o.hang_s
        try:
            while time.monotonic() < t_end and not o.closing:
                h.wfile.write(b" ")
                h.wfile.flush()
                time.sleep(o.drip_s)
        except OSError:
            pass
        h.close_connection = True
    elif mode in ("endless", "endless_slow"):
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        size, pause = (65536, 0.0) if mode == "endless" else (1024, 0.01)
        chunk = f"{size:x}\r\n".encode() + b" " * size + b"\r\n"
        try:
            while not o.closing:
                h.wfile.write(chunk)
                with o.lock:
                    o.body_bytes_sent += size
                if pause:
                    time.sleep(pause)
        except OSError:  # the client closed the connection: what a bounded reader does
            pass
        h.close_connection = True
    elif mode in ("hang", "slow"):
        t_end = time.monotonic() + o.hang_s
        while time.monotonic() < t_end and not o.closing:
            time.sleep(0.05)
        h.close_connection = True
    else:
        return False
    return True


def stream_chunks(
    *,
    ident: str,
    created: int,
    model: str,
    msg: dict[str, Any],
    finish_reason: str,
    usage: dict[str, int],
    echo: list[str],
    lp_entries: list[dict[str, Any]] | None,
    reasoning_tokens: list[str],
    faults: set[str],
    body: dict[str, Any],
) -> list[str]:
    """The SSE ``data:`` payloads of a streamed chat answer carrying ``msg`` (vLLM's framing: a
    role chunk, the tool-call or reasoning and content deltas, the finish chunk, the usage chunk
    when asked, ``[DONE]``), bent per ``faults`` (``stream_differs``, ``no_usage_chunk``,
    ``usage_always``, ``usage_on_empty_options``, ``double_done``); ``lp_entries``: one logprobs
    entry per token (reasoning, then answer), ``None`` when not asked."""
    want_lp = lp_entries is not None
    lp_entries = list(lp_entries or [])
    fr = finish_reason
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model}
    lp_iter = iter(lp_entries)

    def with_lp(choice: dict[str, Any]) -> dict[str, Any]:
        if want_lp:
            entry = next(lp_iter, None)
            if entry is not None:
                choice["logprobs"] = {"content": [entry]}
        return choice

    out = [
        json.dumps(
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            }
        )
    ]
    if msg["tool_calls"]:
        call = msg["tool_calls"][0]
        out.append(
            json.dumps(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": call["id"],
                                        "type": "function",
                                        "function": {"name": call["function"]["name"], "arguments": ""},
                                    }
                                ]
                            },
                            "finish_reason": None,
                        }
                    ],
                }
            )
        )
        a = call["function"]["arguments"]
        for part in (a[: len(a) // 2], a[len(a) // 2 :]):
            out.append(
                json.dumps(
                    {
                        **base,
                        "choices": [
                            with_lp(
                                {
                                    "index": 0,
                                    "delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]},
                                    "finish_reason": None,
                                }
                            )
                        ],
                    }
                )
            )
    else:
        if msg.get("reasoning"):
            out.append(
                json.dumps(
                    {
                        **base,
                        "choices": [
                            with_lp(
                                {
                                    "index": 0,
                                    "delta": {"reasoning": msg["reasoning"]},
                                    "finish_reason": None,
                                }
                            )
                        ],
                    }
                )
            )
        said = msg["content"] or ""
        said = said[: len(said) - len("".join(echo))] if echo else said
        parts = pieces(said) + echo
        if "stream_differs" in faults and parts:
            parts[0] = parts[0].upper()
            if want_lp:  # the stream says another token than the answer's: its logprobs say so
                lp_entries[len(reasoning_tokens)] = entries([parts[0]], [parts[0]])[0]
        for w in parts:
            out.append(
                json.dumps(
                    {
                        **base,
                        "choices": [with_lp({"index": 0, "delta": {"content": w}, "finish_reason": None})],
                    },
                    ensure_ascii=False,
                )
            )
    out.append(json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": fr}]}))
    empty_opts = body.get("stream_options") == {} and "usage_on_empty_options" in faults
    if (include_usage and "no_usage_chunk" not in faults) or "usage_always" in faults or empty_opts:
        out.append(json.dumps({**base, "choices": [], "usage": usage}))
    out.append("[DONE]")
    if "double_done" in faults:
        out.append("[DONE]")
    return out
