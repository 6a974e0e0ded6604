"""The health tests' one way to wait for the gateway's ``/readyz`` verdict."""

from __future__ import annotations

import time

import httpx


def wait_readyz(
    url: str, code: int, timeout_s: float, what: str = "", containing: str = ""
) -> tuple[float, httpx.Response]:
    """Poll ``url``'s /readyz until it answers ``code`` (with ``containing`` in its body, when
    given: a 503 for a stalled machine's stale canary is not yet the cause a test waits for);
    give up (AssertionError naming ``what`` and the last answer) ``timeout_s`` plus a slow last
    answer after the start.

    Returns ``(held, answer)``: ``held`` is how long after the start the old state was still
    seen, the send time of the last poll answered otherwise (0 when the first poll already
    answered ``code``). The gateway judges a poll when it handles it, at or after its send time,
    so an old answer to a poll sent past a bound proves the bound broken, while a slow answer
    on a loaded machine (its arrival time) does not count against the gateway. A gateway not
    listening yet (a connection refused) counts as not ``code``."""
    t0 = time.monotonic()
    held = 0.0
    while True:
        sent = time.monotonic() - t0
        try:
            r: httpx.Response | None = httpx.get(url + "/readyz", timeout=5)
        except httpx.ConnectError:
            r = None
        if r is not None and r.status_code == code and containing in r.text:
            return held, r
        held = sent
        if time.monotonic() - t0 > timeout_s:
            last = "no answer (not listening)" if r is None else f"{r.status_code} {r.text[:400]}"
            want = f"{code}" + (f" with {containing!r}" if containing else "")
            raise AssertionError(f"{what}: /readyz not {want} within {timeout_s} s; last {last}")
        time.sleep(0.05)
