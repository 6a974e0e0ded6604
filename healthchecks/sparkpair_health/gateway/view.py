"""What the gateway's HTTP app (:mod:`sparkpair_health.gateway.app`) and its status page
(:mod:`sparkpair_health.gateway.status`) read of a running gateway
(:class:`sparkpair_health.gateway.Gateway` satisfies it). They are typed against this protocol
rather than the class, so neither imports the module that imports them."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Protocol

from pydantic import SecretStr

from ..peers import PeerDown
from .metrics import GatewayMetrics
from .settings import GatewaySettings

__all__ = ["GatewayView"]


class GatewayView(Protocol):
    """The gateway's state as its endpoints read it.

    Attributes:
        s: the gateway's settings; key: the resolved API key (``None``: none set), redacted from
            every page; metrics: its Prometheus metrics; phase: where the worker is
            (``starting`` .. ``ready``); report_json: the last suite report, JSON text; canary_history:
            the last canary results (:data:`sparkpair_health.gateway.canary.CANARY_HISTORY`);
            peer_down: the peer's death, when seen; gave_up: why the worker stopped, when it did.
        _lock: guards ``report_json``, ``canary_history`` and ``peer_down`` (the worker thread writes
            them while the endpoints read).
    """

    s: GatewaySettings
    key: SecretStr | None
    metrics: GatewayMetrics
    phase: str
    report_json: str | None
    canary_history: deque[dict[str, Any]]
    peer_down: PeerDown | None
    gave_up: str | None
    _lock: threading.Lock

    def thread_alive(self) -> bool:
        """Whether the worker thread runs."""
        ...

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """``/readyz``'s verdict and body."""
        ...

    def _red(self, text: str) -> str:
        """``text`` with the key redacted."""
        ...
