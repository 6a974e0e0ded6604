"""HTTP client of the health suite (httpx), with errors that say whose fault a problem is.

Transport problems are the suite's own failures, not the model's: they raise
:class:`SuiteError` subclasses, which the runner reports as ``error`` (see
:mod:`sparkpair_health.report`). When a request fails, :func:`diagnose_server` tells a dead
engine or a vanished server apart from a slow one, so the suite stops promptly with a
message that says so instead of hanging or passing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from pydantic import SecretStr
from sparkpair_serving.apikey import redact

from .sse import OpenAIStream, parse_openai_stream

T = TypeVar("T")

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest answer body the client reads (bytes, after content decoding), and the longest SSE
line. The suite's answers are small: chat/completion JSON of at most a few thousand tokens
(the long-context checks send long prompts as token ids but get short answers; ``/tokenize``
is asked about one sentence, ``checks/long_context.py``), ``/v1/models``, and ``/metrics``
text. A backend answering with an endless body once grew the gateway to ~4.9 GB in 15 s; a
body over this cap is a :class:`SuiteError`, read no further."""


def _with_body(resp: httpx.Response, content: bytes) -> httpx.Response:
    """A copy of ``resp`` (status, headers, request) holding ``content``: the decoded body
    read by the client, so the headers that described the encoded one are dropped."""
    drop = ("content-length", "content-encoding", "transfer-encoding")
    headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in drop]
    return httpx.Response(resp.status_code, headers=headers, content=content, request=resp.request)


def _past_deadline(where: str, timeout_s: float) -> RequestTimeout:
    """The error of a request whose whole answer did not arrive within ``timeout_s`` seconds."""
    return RequestTimeout(f"{where}: no complete answer within {timeout_s:.1f} s (overall deadline)")


class SuiteError(Exception):
    """The suite could not judge: the server could not be reached or did not answer in time."""


class RequestTimeout(SuiteError):
    """A request did not complete within its timeout (seconds, named in the message)."""


class ServerGone(SuiteError):
    """The server or its engine went away (connection refused or reset, engine dead)."""


ENGINE_DEAD_MARKERS = (
    "EngineDeadError",
    "EngineCore encountered",
    "engine core",
    "died unexpectedly",
)
"""Fragments vLLM writes when its engine core is dead, in HTTP error bodies and in its log
(vllm/v1/engine/exceptions.py, vllm/v1/engine/core_client.py). The one list: the suite and the
gateway's canary match HTTP bodies case-insensitively (:func:`engine_dead_in`), ``logscan``
matches log lines with it case-sensitively. Each one is shown present in the image's vLLM by
tests/stack/test_stack_vllm_messages.py."""


class Deadline:
    """A wall-clock budget for one check.

    Args:
        seconds: the budget, seconds.
        what: what the budget is for (used in the timeout message).
    """

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.t_end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left (never below 0.05, so a request still gets a tiny timeout).

        Raises:
            RequestTimeout: the budget is spent.
        """
        left = self.t_end - time.monotonic()
        if left <= 0:
            raise RequestTimeout(f"{self.what}: check timeout of {self.seconds:.0f} s spent")
        return max(left, 0.05)


def within(seconds: float, fn: Callable[[], T], on_late: Callable[[], BaseException]) -> T:
    """Run ``fn()`` and return its result, or raise ``on_late()`` once ``seconds`` have passed.

    An overall deadline, which httpx's timeouts are not (they bound each socket read, so a
    server that drips one byte every 2 s holds a request open forever). ``fn`` runs on a
    daemon thread; when the deadline passes first, that thread is left to end on its own
    per-read timeout (the caller passes one no longer than ``seconds``) and its result is
    dropped. Exceptions of ``fn`` are re-raised here.
    """
    results: list[T] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            results.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            errors.append(e)
        finally:
            done.set()

    threading.Thread(target=run, name="sparkpair-request", daemon=True).start()
    if not done.wait(max(seconds, 0.0)):
        raise on_late()
    if errors:
        raise errors[0]
    return results[0]


@dataclass
class Streamed:
    """A streaming request's answer (:meth:`HealthClient.stream`).

    Attributes:
        response: status and headers; when ``stream`` is ``None`` also the whole body, read
            (at most :data:`MAX_BODY_BYTES`) and scrubbed.
        stream: the parsed, scrubbed SSE stream when the answer was HTTP 200
            ``text/event-stream``; else ``None``.
    """

    response: httpx.Response
    stream: OpenAIStream | None


class HealthClient:
    """A thin httpx client for an OpenAI-compatible vLLM server.

    Every request has an overall deadline (:func:`within`), and every answer the caller sees
    has the API key removed (:func:`sparkpair_serving.apikey.redact`) where it is assembled: a
    body as read and as its JSON decodes (escapes can spell the key), a stream once its
    chunks are joined. A server or proxy that echoes the ``Authorization`` header, or a model
    that repeats the key token by token, cannot bring it into a message or a report.

    Args:
        base_url: ``http://host:port`` (no trailing ``/v1``).
        api_key: sent as ``Authorization: Bearer ...`` when given.
        connect_timeout_s: TCP connect timeout, seconds.
        request_timeout_s: default timeout per request (a whole non-streamed answer), seconds.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | SecretStr | None = None,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        if isinstance(api_key, str):
            api_key = SecretStr(api_key) if api_key else None
        self.key: SecretStr | None = api_key
        headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key else {}
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=self._timeout(None))
        self.requests = 0
        """Requests sent so far (plain and streamed)."""

    def _timeout(self, read_s: float | None) -> httpx.Timeout:
        r = self.request_timeout_s if read_s is None else read_s
        return httpx.Timeout(connect=min(self.connect_timeout_s, r), read=r, write=r, pool=r)

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> HealthClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _translate(self, e: httpx.HTTPError, method: str, path: str, timeout_s: float) -> SuiteError:
        where = f"{method} {self.base_url}{path}"
        what = redact(str(e), self.key)
        if isinstance(e, httpx.TimeoutException):
            return RequestTimeout(f"{where}: no answer within {timeout_s:.1f} s ({type(e).__name__})")
        if isinstance(e, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return ServerGone(f"{where}: {type(e).__name__}: {what}")
        return SuiteError(f"{where}: {type(e).__name__}: {what}")

    def redact(self, obj: Any) -> Any:
        """``obj`` with this client's key removed (:func:`sparkpair_serving.apikey.redact`)."""
        return redact(obj, self.key)

    def redact_body(self, text: str) -> str:
        """An answer body with the key removed from its text and from every string its JSON
        decodes to (a body may spell the key in ``\\u`` escapes); a JSON body whose decoded
        strings held it is re-encoded from the redacted values."""
        clean = self.redact(text)
        try:
            obj = json.loads(text)
        except ValueError:
            return str(clean)
        red = self.redact(obj)
        if red == obj:
            return str(clean)
        return str(self.redact(json.dumps(red, ensure_ascii=False)))

    def scrub(self, resp: httpx.Response) -> httpx.Response:
        """``resp`` (already read) with the API key and any ``Bearer`` token removed from its body
        (:meth:`redact_body`).

        The status, headers (less content-length/-encoding: the body is decoded) and request
        are kept; a body with nothing to remove is returned as is.
        """
        text = resp.text
        clean = self.redact_body(text)
        if clean == text:
            return resp
        return _with_body(resp, clean.encode())

    def _read_bounded(self, resp: httpx.Response, where: str, t: float, end: float) -> httpx.Response:
        """The streamed ``resp`` read whole into a new response, stopping (and so closing the
        connection, as the caller's ``with`` ends) once more than :data:`MAX_BODY_BYTES` arrived
        or the monotonic time ``end`` passed: a thread left behind by :func:`within` stops
        reading at the deadline instead of draining an endless body.

        Raises:
            SuiteError: the body is larger than :data:`MAX_BODY_BYTES`.
            RequestTimeout: ``end`` passed before the last byte.
        """
        body = bytearray()
        for chunk in resp.iter_bytes():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise SuiteError(
                    f"{where}: HTTP {resp.status_code} answer body larger than {MAX_BODY_BYTES} bytes "
                    "(client.MAX_BODY_BYTES); read no further; wanted an answer of the size an "
                    "OpenAI-compatible server sends"
                )
            if time.monotonic() > end:
                raise _past_deadline(where, t)
        return _with_body(resp, bytes(body))

    def request(
        self, method: str, path: str, *, json: Any = None, timeout_s: float | None = None
    ) -> httpx.Response:
        """Send one request and return the whole response (key scrubbed), whatever its status.

        ``timeout_s`` (default: the client's) bounds the whole exchange, connect to last body
        byte, not each read: a server that drips bytes is cut at the deadline, and the
        abandoned read stops there too (the connection is closed). At most
        :data:`MAX_BODY_BYTES` of the body are read.

        Raises:
            RequestTimeout: no complete answer within ``timeout_s``.
            ServerGone: connection refused, reset or closed mid-answer.
            SuiteError: a body larger than :data:`MAX_BODY_BYTES`, or any other transport error.
        """
        t = self.request_timeout_s if timeout_s is None else timeout_s
        where = f"{method} {self.base_url}{path}"
        self.requests += 1
        end = time.monotonic() + t

        def send() -> httpx.Response:
            try:
                with self._http.stream(method, path, json=json, timeout=self._timeout(t)) as resp:
                    return self._read_bounded(resp, where, t, end)
            except httpx.HTTPError as e:
                raise self._translate(e, method, path, t) from e

        resp = within(
            t,
            send,
            lambda: _past_deadline(where, t),
        )
        return self.scrub(resp)

    def get(self, path: str, *, timeout_s: float | None = None) -> httpx.Response:
        """``GET path`` (see :meth:`request`)."""
        return self.request("GET", path, timeout_s=timeout_s)

    def post(self, path: str, body: Any, *, timeout_s: float | None = None) -> httpx.Response:
        """``POST path`` with a JSON body (see :meth:`request`)."""
        return self.request("POST", path, json=body, timeout_s=timeout_s)

    def stream(
        self, path: str, body: Any, *, deadline: Deadline, chunk_timeout_s: float | None = None
    ) -> Streamed:
        """POST ``body`` and read the SSE answer into a parsed, scrubbed :class:`Streamed`.

        The stream is read until it ends, stopping with :class:`RequestTimeout` when the
        ``deadline`` is spent (checked on every chunk of bytes, not only on whole lines, so a
        server dripping bytes without a newline is cut within one chunk gap) or no byte
        arrives for ``chunk_timeout_s`` seconds (default: the client's request timeout), and
        with :class:`ServerGone` when the connection drops mid-stream. The raw lines never
        leave this method: the key is removed where the stream is assembled
        (:func:`~sparkpair_health.sse.parse_openai_stream` with :meth:`redact`). An answer that
        is not HTTP 200 ``text/event-stream`` is read whole (bounded) and scrubbed instead.

        Raises:
            RequestTimeout / ServerGone / SuiteError: as above, and an SSE line longer than
                :data:`MAX_BODY_BYTES`.
        """
        t = min(chunk_timeout_s or self.request_timeout_s, deadline.left())
        where = f"POST {self.base_url}{path}"
        self.requests += 1
        try:
            with self._http.stream("POST", path, json=body, timeout=self._timeout(t)) as resp:
                ctype = resp.headers.get("content-type", "")
                if resp.status_code != 200 or "text/event-stream" not in ctype:
                    read = self._read_bounded(resp, where, t, min(time.monotonic() + t, deadline.t_end))
                    return Streamed(self.scrub(read), None)

                def lines() -> Iterator[str]:
                    buf = ""
                    try:
                        for chunk in resp.iter_text():
                            deadline.left()
                            buf += chunk
                            *done, buf = buf.splitlines(keepends=True) or [""]
                            if buf.endswith(("\n", "\r")):
                                done, buf = [*done, buf], ""
                            if len(buf) > MAX_BODY_BYTES:
                                raise SuiteError(
                                    f"{where}: an SSE line longer than {MAX_BODY_BYTES} characters "
                                    "(client.MAX_BODY_BYTES); read no further; wanted `data: ...` lines"
                                )
                            for ln in done:
                                yield ln.rstrip("\r\n")
                        if buf:
                            yield buf
                    except httpx.HTTPError as e:
                        raise self._translate(e, "POST", path, t) from e

                return Streamed(resp, parse_openai_stream(lines(), scrub=self.redact))
        except httpx.HTTPError as e:
            raise self._translate(e, "POST", path, t) from e


def engine_dead_in(text: str) -> bool:
    """True when an HTTP error body carries one of :data:`ENGINE_DEAD_MARKERS`."""
    low = text.lower()
    return any(m.lower() in low for m in ENGINE_DEAD_MARKERS)


def diagnose_server(client: HealthClient, timeout_s: float = 5.0) -> str | None:
    """Probe ``/health`` and say whether the server or its engine is gone.

    Returns:
        ``None`` when ``/health`` answers 200 within ``timeout_s`` seconds (the server is up);
        otherwise a message starting with ``engine died`` (``/health`` answers 5xx, which vLLM
        does once its engine core is dead) or ``server went away`` (connection refused or
        reset: the API server process is gone, which vLLM does shortly after its engine dies),
        or ``server not answering`` (``/health`` timed out).
    """
    try:
        r = client.get("/health", timeout_s=timeout_s)
    except RequestTimeout as e:
        return f"server not answering: /health gave no answer within {timeout_s:.0f} s ({e})"
    except SuiteError as e:
        return (
            f"server went away: {e}. The API server is no longer listening; vLLM shuts its API "
            "server down when the engine core dies, so the engine most likely died"
        )
    if r.status_code == 200:
        return None
    return (
        f"engine died: GET {client.base_url}/health answered HTTP {r.status_code}, wanted 200: "
        f"{r.text[:300]!r}"
    )
