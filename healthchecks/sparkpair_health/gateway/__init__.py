"""The health gateway: a small FastAPI app that turns the health suite into ``/readyz``.

Modules, each one part of the gateway:

- :mod:`.core`: :class:`Gateway`, its state and worker thread (readiness, suite, canary ticks,
  peers, recovery), and :func:`serve`.
- :mod:`.settings`: :class:`GatewaySettings` (pydantic-settings, ``SPARKPAIR_<FIELD>``).
- :mod:`.canary`: the periodic canary and its contract (what ``/readyz`` promises and how soon).
- :mod:`.app`: the HTTP app (``/livez``, ``/readyz``, ``/report``, ``/metrics``, ``/status``).
- :mod:`.metrics`: the Prometheus metrics (every name prefixed ``sparkpair_``).
- :mod:`.status`: the ``/status`` HTML page.
- :mod:`.view`: what the app and the page read of a running gateway (a Protocol, so neither
  imports :mod:`.core`).

The engine-load reading (:mod:`sparkpair_health.engine_load`) stays beside the package: the
wedge recovery (:mod:`sparkpair_health.recovery`) reads it too. Callers import from here
(``from sparkpair_health.gateway import Gateway, GatewaySettings, serve``).
Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

from .core import *  # noqa: F403 - the package's names are core's public ones
from .core import __all__ as __all__
