"""Server-sent events parsed from raw lines, keeping every framing detail visible.

An OpenAI-style stream is a sequence of SSE events whose ``data`` field is a JSON chunk,
ending with one ``data: [DONE]``. SDKs hide framing errors (a second ``[DONE]``, data after
``[DONE]``, a chunk that is not JSON), which are exactly what the health suite must see
(``docs/reference/field-bugs.md`` B11), so this module works on the raw lines.

Framing follows the WHATWG HTML "server-sent events" parsing rules: a line ``field: value``
(one optional space after the colon is dropped), a line starting with ``:`` is a comment,
an empty line dispatches the event being built; several ``data`` lines of one event are
joined with ``\\n``.

Secrets: a server may repeat the API key across many chunks (a model echoing it token by
token), so no single line holds it. :func:`parse_openai_stream` takes the one redaction
(``scrub``) and applies it where the stream is assembled: to every stored chunk and payload,
and to the joined content, reasoning and tool-call arguments after joining, before anything
stores or cuts them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"
"""The OpenAI stream terminator carried as the last event's data."""


@dataclass(frozen=True)
class SSEEvent:
    """One dispatched SSE event.

    Attributes:
        data: the event's data lines joined with ``\\n``.
        event: the ``event`` field, ``""`` when absent.
        id: the ``id`` field, ``None`` when absent.
        line_no: 1-based number of the line that ended the event (for evidence).
    """

    data: str
    event: str = ""
    id: str | None = None
    line_no: int = 0


def iter_sse_events(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Yield the SSE events framed by ``lines`` (each line without its line terminator).

    A trailing event without its closing empty line is still yielded (a server that drops
    the connection right after the last ``data`` line should not hide that line); callers
    that care can compare with :func:`parse_openai_stream`'s ``unterminated_tail``.
    Lines with a ``\\r`` ending (CRLF framing) are accepted.
    """
    data: list[str] = []
    event = ""
    ev_id: str | None = None
    have_field = False
    n = 0
    for n, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if line == "":
            if data:
                yield SSEEvent("\n".join(data), event, ev_id, n)
            data, event, have_field = [], "", False
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        have_field = True
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id":
            ev_id = value
        # "retry" and unknown fields are ignored, as the spec says.
    if have_field and data:
        yield SSEEvent("\n".join(data), event, ev_id, n)


@dataclass
class OpenAIStream:
    """An OpenAI chat/completions stream decoded from SSE events.

    Attributes:
        chunks: the JSON chunks, in order (``[DONE]`` excluded).
        done_count: how many ``data: [DONE]`` events came.
        events_after_done: data events that came after the first ``[DONE]``.
        non_json: data payloads that were neither ``[DONE]`` nor JSON objects.
        usage_chunks: the chunks that carry a non-null ``usage``.
        error_chunks: chunks with an ``error`` key (vLLM streams errors this way).
        content: concatenated ``choices[0].delta.content`` (chat) or ``choices[0].text``.
        reasoning: concatenated ``delta.reasoning_content`` / ``delta.reasoning``.
        mixed_chunks: indices of chunks whose delta carries both reasoning and content (B11).
        finish_reasons: every non-null ``finish_reason`` seen, in order.
        tool_call_deltas: ``delta.tool_calls`` entries, in order (each fragment as sent).
        tool_calls: the calls joined from the fragments (:func:`assemble_tool_calls`).
        raw_line_count: lines read.
    """

    chunks: list[dict[str, Any]] = field(default_factory=list)
    done_count: int = 0
    events_after_done: list[str] = field(default_factory=list)
    non_json: list[str] = field(default_factory=list)
    usage_chunks: list[dict[str, Any]] = field(default_factory=list)
    error_chunks: list[dict[str, Any]] = field(default_factory=list)
    content: str = ""
    reasoning: str = ""
    mixed_chunks: list[int] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    tool_call_deltas: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, str]] = field(default_factory=list)
    raw_line_count: int = 0

    def framing_problems(self, *, want_usage: bool | None = None) -> list[str]:
        """Describe every framing defect; an empty list means the framing is sound.

        Args:
            want_usage: ``True``: exactly one usage chunk, with empty ``choices``, must come
                last before ``[DONE]``; ``False``: no chunk may carry usage; ``None``: not
                judged.
        """
        out: list[str] = []
        if self.done_count != 1:
            out.append(f"stream ended with {self.done_count} 'data: [DONE]' events; wanted exactly 1")
        if self.events_after_done:
            out.append(
                f"{len(self.events_after_done)} data event(s) after [DONE]: {self.events_after_done[:2]!r}"
            )
        if self.non_json:
            out.append(f"{len(self.non_json)} data payload(s) are not JSON objects: {self.non_json[:2]!r}")
        if self.error_chunks:
            out.append(f"stream carried an error chunk: {json.dumps(self.error_chunks[0])[:300]}")
        if not self.chunks:
            out.append("stream carried no JSON chunk")
        if want_usage is True:
            if len(self.usage_chunks) != 1:
                out.append(
                    f"stream_options.include_usage=true but {len(self.usage_chunks)} chunks carry usage; "
                    "wanted exactly 1"
                )
            else:
                u = self.usage_chunks[0]
                if u.get("choices"):
                    out.append("the usage chunk has non-empty choices; wanted choices == []")
                if self.chunks and self.chunks[-1] is not u:
                    out.append("the usage chunk is not the last chunk before [DONE]")
        elif want_usage is False and self.usage_chunks:
            out.append(
                f"include_usage not requested but {len(self.usage_chunks)} chunk(s) carry usage "
                f"(first: {json.dumps(self.usage_chunks[0].get('usage'))})"
            )
        return out


def _keep(obj: Any) -> Any:
    return obj


def parse_openai_stream(lines: Iterable[str], scrub: Callable[[Any], Any] | None = None) -> OpenAIStream:
    """Decode an OpenAI-style SSE stream from raw lines (see :class:`OpenAIStream`).

    ``scrub`` (the client's redaction, :meth:`sparkpair_health.client.HealthClient.redact`) is
    applied to every chunk and payload as it is stored, and to ``content``, ``reasoning`` and
    each call's ``arguments`` once joined: a key split across chunks is whole there. The
    joining itself reads the chunks as sent. Never raises on bad framing: every defect is
    recorded for the caller to judge.
    """
    scrub = scrub or _keep
    s = OpenAIStream()
    counted: list[str] = []
    content: list[str] = []
    reasoning: list[str] = []
    deltas: list[dict[str, Any]] = []

    def counting() -> Iterator[str]:
        for ln in lines:
            counted.append("")
            yield ln

    for ev in iter_sse_events(counting()):
        payload = ev.data
        if payload.strip() == DONE:
            s.done_count += 1
            continue
        if s.done_count:
            s.events_after_done.append(scrub(payload)[:200])
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            s.non_json.append(scrub(payload)[:200])
            continue
        if not isinstance(obj, dict):
            s.non_json.append(scrub(payload)[:200])
            continue
        kept = scrub(obj)
        s.chunks.append(kept)
        if "error" in obj:
            s.error_chunks.append(kept)
        if obj.get("usage"):
            s.usage_chunks.append(kept)
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                c = delta.get("content")
                r = delta.get("reasoning_content") or delta.get("reasoning")
                if isinstance(c, str) and c:
                    content.append(c)
                if isinstance(r, str) and r:
                    reasoning.append(r)
                if c and r:
                    s.mixed_chunks.append(len(s.chunks) - 1)
                for tc in delta.get("tool_calls") or []:
                    if isinstance(tc, dict):
                        deltas.append(tc)
                        s.tool_call_deltas.append(scrub(tc))
            elif isinstance(choice.get("text"), str):
                content.append(choice["text"])
            fr = choice.get("finish_reason")
            if fr:
                s.finish_reasons.append(fr)
    s.raw_line_count = len(counted)
    s.content = scrub("".join(content))
    s.reasoning = scrub("".join(reasoning))
    s.tool_calls = [scrub(c) for c in assemble_tool_calls(deltas)]
    return s


def assemble_tool_calls(deltas: Iterable[dict[str, Any]]) -> list[dict[str, str]]:
    """Join streamed ``delta.tool_calls`` fragments into ``[{id, name, arguments}]`` by index.

    ``arguments`` is the concatenation of the fragments (a JSON text, not parsed here).
    """
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        i = int(d.get("index", 0))
        c = calls.setdefault(i, {"id": "", "name": "", "arguments": ""})
        if d.get("id"):
            c["id"] = d["id"]
        fn = d.get("function") or {}
        if fn.get("name"):
            c["name"] += fn["name"]
        if fn.get("arguments"):
            c["arguments"] += fn["arguments"]
    return [calls[i] for i in sorted(calls)]
