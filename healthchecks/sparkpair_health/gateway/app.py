"""The gateway's HTTP side: the FastAPI app (``/livez``, ``/readyz``, ``/report``, ``/metrics``,
``/status``) and the listening socket. The state it serves lives in
:class:`sparkpair_health.gateway.Gateway`. Runs in the slim client.
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sparkpair_serving.apikey import redact

from .settings import GatewaySettingsError

if TYPE_CHECKING:
    from .view import GatewayView

THREAD_ENDED = "the gateway's worker thread has ended: nothing judges (restart the container)"
"""``/livez``'s cause once the worker thread has ended."""


def make_app(gw: GatewayView) -> FastAPI:
    """The FastAPI app of the gateway ``gw``: the endpoints listed in :mod:`sparkpair_health.gateway`."""
    app = FastAPI(title="sparkpair health gateway", docs_url=None, redoc_url=None)

    @app.get("/livez")
    def livez() -> JSONResponse:
        alive = gw.thread_alive() and gw.gave_up is None
        body: dict[str, Any] = {"alive": alive, "phase": gw.phase}
        if gw.gave_up is not None:
            body["cause"] = f"gave up: {gw.gave_up}"
        elif not alive:
            body["cause"] = THREAD_ENDED
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        ok, body = gw.readiness()
        return JSONResponse(body, status_code=200 if ok else 503)

    @app.get("/report")
    def report() -> Any:
        with gw._lock:
            text = gw.report_json
            peer = gw.peer_down
        if text is None:
            return JSONResponse({"detail": "no report yet", "phase": gw.phase}, status_code=503)
        if peer is not None:
            d = json.loads(text)
            d["peer_down"] = redact(peer.to_dict(), gw.key)
            return JSONResponse(d)
        return PlainTextResponse(text, media_type="application/json")

    @app.get("/status")
    def status() -> HTMLResponse:
        from .status import status_page

        return HTMLResponse(status_page(gw))

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        gw.readiness()  # sparkpair_ready follows /readyz, canary age included
        return PlainTextResponse(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def listen_socket(host: str, port: int) -> socket.socket:
    """Bind a TCP socket on ``host:port`` (not yet listening) for the gateway's HTTP server.

    Raises:
        GatewaySettingsError: the address does not resolve or cannot be bound (in use, not
            local, no permission); the message names host, port and the reason.
    """
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as e:
        raise GatewaySettingsError(
            f"host={host!r} (SPARKPAIR_HOST/--host): cannot resolve it ({e.strerror or e}); "
            "wanted a local address such as 127.0.0.1 or 0.0.0.0"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as e:
        sock.close()
        raise GatewaySettingsError(
            f"host={host!r} port={port} (SPARKPAIR_HOST/--host, SPARKPAIR_PORT/--port): cannot listen "
            f"there ({e.strerror or e}); wanted a free port on a local address"
        ) from None
    return sock
