"""The one HTTP client reads a bounded answer: a backend answering 200 with a body that never
ends (``tests/faults/health_fault_server.py``'s ``endless`` modes) is read up to
``client.MAX_BODY_BYTES`` or up to the request's deadline, and then no further: the reader left
behind at the deadline closes the connection instead of draining the body (it once grew the
gateway to ~4.9 GB in 15 s while ``/readyz`` said "no complete answer within 3.0 s")."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from sparkpair_health.client import MAX_BODY_BYTES, HealthClient, RequestTimeout, SuiteError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from health_fault_server import FaultServer  # noqa: E402

SOCKET_SLACK = 16 * 1024 * 1024
"""Bytes the server may write beyond what the client read: the kernel's loopback send and
receive buffers (``net.ipv4.tcp_wmem`` / ``tcp_rmem`` maxima are 4 and 6 MiB by default)."""

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def settled_bytes(srv: FaultServer, quiet_s: float = 1.0, within_s: float = 30.0) -> int:
    """``srv.body_bytes_sent`` once it has not grown for ``quiet_s``; fails if it still grows
    after ``within_s`` (a client that keeps reading an endless answer)."""
    t_end = time.monotonic() + within_s
    sent, since = srv.body_bytes_sent, time.monotonic()
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < t_end, f"the client kept reading: {srv.body_bytes_sent} bytes and growing"
        time.sleep(0.1)
        if srv.body_bytes_sent != sent:
            sent, since = srv.body_bytes_sent, time.monotonic()
    return sent


@pytest.mark.parametrize(
    ("mode", "error", "fragment", "deadline_s"),
    [
        # The cap: a deadline long enough to read 8 MiB on a loaded 2-core machine (under two
        # concurrent test runs it once took over 1 s), so the cap is what stops the read.
        ("endless", SuiteError, f"answer body larger than {MAX_BODY_BYTES} bytes", 30.0),
        ("endless_slow", RequestTimeout, "no complete answer within 1.0 s", 1.0),
    ],
)
def test_an_endless_answer_is_read_no_further_than_the_cap_or_the_deadline(
    mode: str, error: type[Exception], fragment: str, deadline_s: float
) -> None:
    with FaultServer() as srv, HealthClient(srv.base_url, request_timeout_s=5.0) as client:
        srv.chat_mode = mode
        t0 = time.monotonic()
        with pytest.raises(error, match=fragment):
            client.post("/v1/chat/completions", CHAT, timeout_s=deadline_s)
        # The answer never ends: any bound proves the cut; this one leaves room for a stalled machine.
        assert time.monotonic() - t0 < deadline_s + 15
        sent = settled_bytes(srv)  # the reader left behind at the deadline has stopped
        assert 0 < sent <= MAX_BODY_BYTES + SOCKET_SLACK, sent


def test_an_ordinary_answer_still_reads_whole() -> None:
    with FaultServer() as srv, HealthClient(srv.base_url) as client:
        r = client.post("/v1/chat/completions", CHAT, timeout_s=5.0)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text


def test_the_fault_server_is_quiet_about_a_client_that_hangs_up_and_loud_about_anything_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The health client hangs up on answers it has judged; the stand-in says nothing then, and
    still prints socketserver's traceback for an error of its own."""
    with FaultServer() as srv:
        for quiet in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset")):
            try:
                raise quiet
            except OSError:
                srv._httpd.handle_error(None, ("127.0.0.1", 1))
        assert "Traceback" not in capsys.readouterr().err
        try:
            raise KeyError("a bug in the stand-in")
        except KeyError:
            srv._httpd.handle_error(None, ("127.0.0.1", 1))
        err = capsys.readouterr().err
        assert "Traceback" in err and "a bug in the stand-in" in err
