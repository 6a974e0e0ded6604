"""HTTP client of the health suite (httpx), with errors that say whose fault a problem is.

Transport problems are the suite's own failures, not the model's: they raise
:class:`SuiteError` subclasses, which the runner reports as ``error`` (see
:mod:`sparkpair_health.report`). When a request fails, :func:`diagnose_server` tells a dead
engine or a vanished server apart from a slow one, so the suite stops promptly with a
message that says so instead of hanging or passing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx


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
)
"""Fragments of vLLM's HTTP error bodies when the engine core is dead (vllm/v1/engine/exceptions.py);
each one is shown present in the image's vLLM by tests/stack/test_stack_vllm_messages.py."""


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


class HealthClient:
    """A thin httpx client for an OpenAI-compatible vLLM server.

    Args:
        base_url: ``http://host:port`` (no trailing ``/v1``).
        api_key: sent as ``Authorization: Bearer ...`` when given.
        connect_timeout_s: TCP connect timeout, seconds.
        request_timeout_s: default read timeout per request, seconds.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        connect_timeout_s: float = 5.0,
        request_timeout_s: float = 60.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=self._timeout(None))

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
        if isinstance(e, httpx.TimeoutException):
            return RequestTimeout(f"{where}: no answer within {timeout_s:.1f} s ({type(e).__name__})")
        if isinstance(e, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return ServerGone(f"{where}: {type(e).__name__}: {e}")
        return SuiteError(f"{where}: {type(e).__name__}: {e}")

    def request(
        self, method: str, path: str, *, json: Any = None, timeout_s: float | None = None
    ) -> httpx.Response:
        """Send one request and return the response, whatever its status.

        Raises:
            RequestTimeout: no complete answer within ``timeout_s`` (default: the client's).
            ServerGone: connection refused, reset or closed mid-answer.
            SuiteError: any other transport error.
        """
        t = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            return self._http.request(method, path, json=json, timeout=self._timeout(t))
        except httpx.HTTPError as e:
            raise self._translate(e, method, path, t) from e

    def get(self, path: str, *, timeout_s: float | None = None) -> httpx.Response:
        """``GET path`` (see :meth:`request`)."""
        return self.request("GET", path, timeout_s=timeout_s)

    def post(self, path: str, body: Any, *, timeout_s: float | None = None) -> httpx.Response:
        """``POST path`` with a JSON body (see :meth:`request`)."""
        return self.request("POST", path, json=body, timeout_s=timeout_s)

    @contextmanager
    def stream_lines(
        self, path: str, body: Any, *, deadline: Deadline, chunk_timeout_s: float | None = None
    ) -> Iterator[tuple[httpx.Response, Iterator[str]]]:
        """POST ``body`` and yield ``(response, raw line iterator)`` for an SSE answer.

        The iterator stops with :class:`RequestTimeout` when the check's ``deadline`` is spent
        or no byte arrives for ``chunk_timeout_s`` seconds, and with :class:`ServerGone` when the
        connection drops mid-stream.
        """
        t = min(chunk_timeout_s or self.request_timeout_s, deadline.left())
        try:
            with self._http.stream("POST", path, json=body, timeout=self._timeout(t)) as resp:

                def lines() -> Iterator[str]:
                    try:
                        for ln in resp.iter_lines():
                            deadline.left()
                            yield ln
                    except httpx.HTTPError as e:
                        raise self._translate(e, "POST", path, t) from e

                yield resp, lines()
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
