"""One wait loop: call a probe until it answers or a deadline passes.

Standard library only, so every package may use it (the slim client, the node entrypoint).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class PollTimeout(TimeoutError):
    """The probe never answered within the deadline.

    Attributes:
        waited_s: seconds from the first probe to the last one (>= the deadline).
        probes: how many times the probe ran.
    """

    def __init__(self, waited_s: float, probes: int) -> None:
        super().__init__(f"no answer within {waited_s:.1f} s ({probes} probes)")
        self.waited_s = waited_s
        self.probes = probes


@dataclass(frozen=True)
class Polled(Generic[T]):
    """What :func:`poll_until` returns: the probe's answer and the seconds waited for it."""

    value: T
    waited_s: float


def poll_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    interval_s: float = 1.0,
    backoff: float = 1.0,
    max_interval_s: float | None = None,
    on_wait: Callable[[float], None] | None = None,
) -> Polled[T]:
    """Call ``probe()`` until it returns something other than ``None``.

    The probe runs at once, then after each pause. The first pause is ``interval_s`` seconds;
    each next one is ``backoff`` times longer, capped at ``max_interval_s`` (no cap when None;
    ``backoff=1`` keeps a fixed interval). A pause never runs past the deadline: the last probe
    runs at ``timeout_s`` (seconds after the first probe, on :func:`time.monotonic`), so a
    ``timeout_s`` of 0 probes exactly once. ``on_wait(waited_s)`` runs after every probe that
    did not answer, before the pause (progress display).

    An exception raised by the probe (a server that exited, a refused credential) is not caught:
    it ends the wait at once.

    Returns:
        :class:`Polled` with the probe's answer and the seconds from the first probe to it.

    Raises:
        PollTimeout: no answer by the deadline (a :class:`TimeoutError`; callers re-raise it as
            their own error naming what they waited for).
        ValueError: ``timeout_s`` < 0, ``interval_s`` <= 0 or ``backoff`` < 1.
    """
    if timeout_s < 0 or interval_s <= 0 or backoff < 1:
        raise ValueError(
            f"poll_until: timeout_s={timeout_s}, interval_s={interval_s}, backoff={backoff}; "
            "wanted timeout_s >= 0, interval_s > 0, backoff >= 1"
        )
    t0 = time.monotonic()
    pause = interval_s
    probes = 0
    while True:
        got = probe()
        probes += 1
        waited = time.monotonic() - t0
        if got is not None:
            return Polled(got, waited)
        if waited >= timeout_s:
            raise PollTimeout(waited, probes)
        if on_wait is not None:
            on_wait(waited)
        time.sleep(min(pause, timeout_s - waited))
        pause = pause * backoff if max_interval_s is None else min(pause * backoff, max_interval_s)
