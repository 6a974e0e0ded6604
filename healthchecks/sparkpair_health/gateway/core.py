"""The health gateway: a small FastAPI app that turns the health suite into ``/readyz``.

Endpoints:

- ``GET /livez``: 200 while the gateway's worker thread runs (its phase in the body); 503
  once that thread has ended (nothing judges any more, so the container must restart).
- ``GET /readyz``: 200 only after the server decoded (readiness gate), the suite passed, and
  while the periodic canary keeps succeeding *recently*: the last successful canary must be
  younger than :attr:`GatewaySettings.stale_after_s` (``canary_interval_s`` +
  ``canary_timeout_s``). Otherwise 503 with ``failing_check`` (the check id, ``canary``,
  ``peer``, ``readiness``, ``gateway``, ``stability``, ``recovery``) and ``cause``.
- ``GET /report``: the latest suite report (JSON, as ``Report.to_json``) plus ``peer_down``
  while a peer is named down (dead, paused, frozen, ...); 503 before the first.
- ``GET /metrics``: Prometheus text, every name prefixed ``sparkpair_``
  (:mod:`sparkpair_health.gateway.metrics`).
- ``GET /status``: an HTML page for people: verdict, failing check with evidence, kernel
  plan, canary history (:mod:`sparkpair_health.gateway.status`).

Modules: settings (:mod:`~sparkpair_health.gateway.settings`), metrics, canary
(:mod:`~sparkpair_health.gateway.canary`), HTTP app (:mod:`~sparkpair_health.gateway.app`),
status page; this one holds the state and the worker thread.

Background (one daemon thread): wait for readiness -> run the suite (health v1 checks plus
the DeepSeek-V4 checks: :func:`sparkpair_health.checks.check_list`) -> the baseline canary
tick (the reference answer) -> a canary tick every ``canary_interval_s`` seconds: the
readiness gate's decode probe sent non-streamed and streamed, each with a nonce, each answer
judged decoded, fresh and right; a slow answer judged busy or wedged from the engine's own
counters (the contract: :mod:`sparkpair_health.gateway.canary`).
Every exception in the suite or a canary is a verdict (503 naming it), never the end of the
thread. A peer node that dies, freezes or restarts is named, with its state, from the
evidence :mod:`sparkpair_health.peers` reads. With ``recovery`` on, each canary tick is also
shown to the wedge recovery (:mod:`sparkpair_health.recovery`), which may restart the pair
within its budget (docs/observability.md). When the server never becomes ready within
``ready_timeout_s`` or refuses the API key, the gateway gives up: :func:`serve` returns
and the command exits non-zero (2), so compose's ``restart: on-failure`` applies.

Configuration: :class:`GatewaySettings`, from the environment (``SPARKPAIR_<FIELD>``, see
:meth:`GatewaySettings.from_env`) and the same fields as ``sparkpair gateway`` options.
Everything the gateway prints, serves or writes passes :func:`sparkpair_serving.apikey.redact`.
Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from sparkpair_serving.apikey import redact

from ..client import HealthClient
from ..decode_answer import DecodeAnswer
from ..engine_load import EngineLoad
from ..peers import PeerDown, PeerWatch
from ..recovery import Recovery, RestartBudget, TokenProgress, restart_pair
from ..stability import StabilityMonitor
from .app import THREAD_ENDED, listen_socket
from .canary import CANARY_HISTORY, CanaryMixin, Freshness
from .metrics import GatewayMetrics
from .settings import (
    ENV_PREFIX,
    HEAD_START_PERIOD_S,
    JOIN_TIMEOUT_DEFAULT_S,
    JSON_FIELDS,
    SECRET_FIELDS,
    TICK_SLACK_S,
    GatewaySettings,
    GatewaySettingsError,
    default_ready_timeout_s,
)

__all__ = [
    "ENV_PREFIX",
    "HEAD_START_PERIOD_S",
    "JOIN_TIMEOUT_DEFAULT_S",
    "JSON_FIELDS",
    "SECRET_FIELDS",
    "THREAD_ENDED",
    "Gateway",
    "GatewayGaveUp",
    "GatewayMetrics",
    "GatewaySettings",
    "GatewaySettingsError",
    "default_ready_timeout_s",
    "listen_socket",
    "serve",
]

SuiteRunner = Callable[[Callable[[str, str], None]], Any]
"""``runner(on_progress) -> Report`` (health v1's :class:`~sparkpair_health.report.Report`)."""


def recovery_of(settings: GatewaySettings, clock: Callable[[], float] = time.monotonic) -> Recovery:
    """The :class:`~sparkpair_health.recovery.Recovery` the settings describe (``recovery`` on)."""
    assert settings.stability is not None  # GatewaySettings refuses recovery without it
    nodes = list(settings.stability.nodes)
    return Recovery(
        budget=RestartBudget(settings.recovery_max_restarts, settings.recovery_window_s, clock),
        after_failures=settings.recovery_after_failures,
        restart=lambda: restart_pair(nodes, timeout_s=settings.recovery_stop_timeout_s),
        progress=TokenProgress(settings.recovery_stall_s, clock),
        grace_s=settings.ready_timeout_s,
        clock=clock,
    )


class Gateway(CanaryMixin):
    """Readiness state, the background worker and the FastAPI app.

    Args:
        settings: see :class:`GatewaySettings`.
        suite_runner: overrides how the suite runs (tests); default: :meth:`run_suite`.
        clock: seconds, monotonic (tests); default :func:`time.monotonic`.

    Attributes:
        gave_up: why the gateway stopped judging for good (the server never became ready, or
            it refuses the API key), else ``None``; :func:`serve` exits non-zero on it.
    """

    def __init__(
        self,
        settings: GatewaySettings,
        suite_runner: SuiteRunner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.s = settings
        self.key = settings.resolved_api_key()
        self.metrics = GatewayMetrics(self.key)
        self._clock = clock
        self._lock = threading.Lock()
        self.phase = "starting"
        self.failing: dict[str, str] | None = {"check": "readiness", "cause": "the gateway has just started"}
        self.suite_ok = False
        self.report_json: str | None = None
        self.last_canary: dict[str, Any] | None = None
        self.last_ok_at: float | None = None
        self.canary_failures = 0
        self.busy_since: float | None = None
        """When the canary's current run of busy ticks began (monotonic s), else ``None``."""
        self.reference: DecodeAnswer | None = None
        self.freshness = Freshness()
        self.canary_history: deque[dict[str, Any]] = deque(maxlen=CANARY_HISTORY)
        self.peer_down: PeerDown | None = None
        self.gave_up: str | None = None
        self.on_give_up: Callable[[str], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stability_thread: threading.Thread | None = None
        self._runner = suite_runner or self.run_suite
        self.monitor = StabilityMonitor(settings.stability) if settings.stability else None
        self._stability_lock = threading.Lock()
        self.stability_failing: dict[str, str] | None = None
        self.peers = PeerWatch(settings.peer_settings()) if settings.peers else None
        self.recovery = recovery_of(settings, clock) if settings.recovery else None
        self._client: HealthClient | None = None
        self.baseline_failed = False
        self.last_engine_load: EngineLoad | None = None  # the canary's last /metrics reading
        self._prof: Any = None
        self._suite_settings: Any = None
        self.app = self._make_app()

    # ---------------------------------------------------------------- state

    def _set(self, phase: str, failing: dict[str, str] | None) -> None:
        with self._lock:
            self.phase = phase
            self.failing = None if failing is None else {k: self._red(v) for k, v in failing.items()}

    def thread_alive(self) -> bool:
        """False once the worker thread was started and has ended (nothing judges any more)."""
        return self._thread is None or self._thread.is_alive()

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, body of /readyz).

        Ready only when nothing fails, the worker thread runs, and the last successful canary
        (or the suite's pass) is younger than ``stale_after_s``.
        """
        with self._lock:
            failing = self.failing
            if failing is None and not self.thread_alive():
                failing = {
                    "check": "gateway",
                    "cause": "the gateway's worker thread has ended: nothing judges",
                }
            if failing is None:
                age = None if self.last_ok_at is None else self._clock() - self.last_ok_at
                if age is None or age > self.s.stale_after_s:
                    seen = (
                        "no successful canary yet"
                        if age is None
                        else f"the last one succeeded {age:.1f} s ago"
                    )
                    failing = {
                        "check": "canary",
                        "cause": (
                            f"canary stale: {seen}; wanted one within "
                            f"stale_after_s={self.s.stale_after_s:g} s "
                            f"(canary_interval_s {self.s.canary_interval_s:g} + canary_timeout_s "
                            f"{self.s.canary_timeout_s:g} + {TICK_SLACK_S:g} s for the tick's bookkeeping)"
                        ),
                    }
            phase = self.phase
            if failing is not None and phase == "ready":
                # judged at this call (a stale canary, an ended thread): the phase says so too
                phase = "canary_stale" if failing["check"] == "canary" else "worker_ended"
            body: dict[str, Any] = {"ready": failing is None, "phase": phase}
            if failing:
                body["failing_check"] = failing["check"]
                body["cause"] = self._red(failing["cause"])
            if self.peer_down is not None:
                body["peer_down"] = redact(self.peer_down.to_dict(), self.key)
            if self.last_canary:
                body["last_canary"] = self.last_canary
                if self.last_canary.get("kind") == "busy" and failing is None:
                    body["busy"] = self.last_canary.get("cause", "")
            self.metrics.ready.set(1.0 if failing is None else 0.0)
            return failing is None, body

    # ---------------------------------------------------------------- suite

    def suite_settings(self) -> Any:
        """Health v1's ``SuiteSettings`` for this gateway."""
        from ..suite import SuiteSettings, Timeouts

        return SuiteSettings(
            base_url=self.s.base_url,
            profile=self.s.profile,
            served_model_name=self.s.served_model_name,
            api_key=self.key,
            api_key_source=self.s.key_source,
            timeouts=Timeouts(
                ready_s=self.s.ready_timeout_s,
                request_s=self.s.request_timeout_s,
                long_prompt_s=self.s.long_prompt_timeout_s,
            ),
            report_json=self.s.report_json,
            junit_xml=self.s.junit_xml,
            only=self.s.only,
            plan_file=self.s.plan_path,
        )

    def run_suite(self, on_progress: Callable[[str, str], None]) -> Any:
        """Health v1's ``run_suite`` with its checks plus the DeepSeek-V4 ones where
        :meth:`GatewaySettings.runs_model_checks`."""
        from ..checks import check_list
        from ..suite import run_suite

        settings = self.suite_settings()
        model_checks = self.s.runs_model_checks()
        checks = check_list(settings.resolved_profile(), only=self.s.only, model_checks=model_checks)
        if self.monitor is not None:
            from ..stability import stability_check_spec

            checks.append(stability_check_spec(self.monitor))
        return run_suite(settings.model_copy(update={"only": None}), on_progress, checks=checks)

    def _on_progress(self, event: str, detail: str) -> None:
        if event == "ready-wait":
            self._set("waiting_ready", {"check": "readiness", "cause": detail})
        elif event in ("ready", "check-start", "check-done"):
            self._set(
                "running_suite", {"check": "suite", "cause": f"the suite is running ({event}: {detail})"}
            )

    def _take_report(self, report: Any) -> None:
        text = self._red(report.to_json())
        d = json.loads(text)
        self.metrics.record_report(d.get("checks", []), bool(d.get("passed")), float(d.get("duration_s", 0)))
        with self._lock:
            self.report_json = text
        ready = d.get("ready") or {}
        if d.get("passed"):
            self.suite_ok = True
            self._set(
                "baseline_canary", {"check": "canary", "cause": "the suite passed; the baseline canary runs"}
            )
            return
        self.suite_ok = False
        if not ready.get("ready"):
            cause = ready.get("detail", "not ready")
            self._set("not_ready", {"check": "readiness", "cause": cause})
            self.give_up(f"{'API key refused' if ready.get('stage') == 'auth' else 'not ready'}: {cause}")
            return
        bad = next((c for c in d.get("checks", []) if c.get("status") in ("fail", "error")), None)
        if bad:
            self._set(
                "suite_failed", {"check": bad["id"], "cause": f"{bad['status']}: {bad.get('message', '')}"}
            )
        else:
            self._set(
                "suite_failed", {"check": "suite", "cause": d.get("aborted") or "the suite did not pass"}
            )

    def give_up(self, why: str) -> None:
        """Stop judging for good: record ``why``, stop the loop, tell :func:`serve` (exit 2)."""
        self.gave_up = self._red(why)
        self._stop.set()
        if self.on_give_up is not None:
            self.on_give_up(self.gave_up)

    # ---------------------------------------------------------------- canary

    def _canary_tick(self) -> None:
        res = self.canary_once()
        done_at = self._clock()
        cause, lat = res.cause, res.latency_s
        self.metrics.canary_last_latency.set(lat)
        self.metrics.canary_total.labels("ok" if res.ok else "busy" if res.busy else "fail").inc()
        # a slow answer asks the peers too (canary_ok=False): a paused or frozen peer is never busy
        peer = self.peers.look(res.ok) if self.peers is not None else None
        self.metrics.record_peer(peer)
        busy = res.busy and peer is None
        if not busy:
            self.busy_since = None
        elif self.busy_since is None:
            self.busy_since = done_at - lat
        busy_for = 0.0 if self.busy_since is None else done_at - self.busy_since
        if busy and busy_for > self.s.canary_busy_max_s:
            busy, res.kind = False, "timeout"
            cause = (
                f"the canary has been slow on a busy engine for {busy_for:.0f} s, longer than "
                f"canary_busy_max_s={self.s.canary_busy_max_s:g} s (starved, or the server never "
                f"answers it): {cause}"
            )
        self.metrics.engine_busy.set(1.0 if busy else 0.0)
        ok = res.ok or busy  # busy: reported, not a failure
        with self._lock:
            self.last_canary = {
                "ok": ok,
                "kind": res.kind,
                "latency_s": round(lat, 3),
                "at": time.time(),
                "cause": cause,
            }
            self.canary_history.append(self.last_canary)
            if ok and peer is None:
                self.last_ok_at = done_at
            self.peer_down = peer
        if ok and peer is None:
            self.canary_failures = 0
            if res.ok:
                self.metrics.canary_latency.observe(lat)
            if self.suite_ok and not self.recovery_exhausted():
                self._set(
                    *(
                        ("stability_failing", self.stability_failing)
                        if self.stability_failing
                        else ("ready", None)
                    )
                )
        else:
            self.canary_failures += 1
            if self.suite_ok:
                if peer is not None:
                    what = f"; the canary saw: {cause}" if cause else ""
                    self._set("peer_down", {"check": "peer", "cause": peer.cause() + what})
                else:
                    self._set("canary_failing", {"check": "canary", "cause": cause})
        self.metrics.canary_consecutive_failures.set(self.canary_failures)
        self._recover(ok, "" if ok else cause, peer)

    def _recover(self, ok: bool, cause: str, peer: PeerDown | None) -> None:
        """Wedge recovery's look at this canary tick (only once the pair has served: suite passed)."""
        rec = self.recovery
        if rec is None or not self.suite_ok:
            return
        metrics = None
        if rec.progress is not None and self._client is not None:
            try:
                metrics = self._client.get("/metrics", timeout_s=self.s.canary_timeout_s).text
            except Exception:  # noqa: BLE001 - no counters this tick: the other signals still judge
                metrics = None
        ev = rec.observe(ok, cause, self.canary_failures, peer.cause() if peer else None, metrics)
        if rec.exhausted is not None:
            self.metrics.recovery_exhausted.set(1.0)
            self._set("recovery_exhausted", {"check": "recovery", "cause": rec.exhausted})
        elif ev is not None and ev.action == "recovered":
            # The restarts and the wedge's log lines are in recovery's events now: judge the
            # reloaded pair afresh, at once, rather than on the next stability tick.
            if self.monitor is not None:
                self.monitor.new_epoch()
                self._guard("stability", self.stability_tick)
        elif ev is not None and ev.action == "restarted":
            self.metrics.recovery_restarts.inc()
            self._set(
                "recovering",
                {"check": "recovery", "cause": f"restarted the pair after a wedge ({ev.cause}): {ev.detail}"},
            )
        elif ev is not None:
            self._set(
                "recovery_failed",
                {"check": "recovery", "cause": f"a wedge ({ev.cause}); the restart failed: {ev.detail}"},
            )

    # ---------------------------------------------------------------- worker

    def _guard(self, what: str, fn: Callable[[], None]) -> None:
        """Run ``fn``; an exception becomes a 503 naming it, never the end of the thread."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the verdict must show it; the thread goes on
            self.suite_ok = self.suite_ok and what != "suite"
            self._set(f"{what}_defect", {"check": what, "cause": f"{what} defect: {type(e).__name__}: {e}"})

    def _after_suite(self) -> None:
        if not self.suite_ok:
            return
        self._baseline()

    def _baseline(self) -> None:
        """The baseline tick (:meth:`record_reference`) after the suite passed. A failed baseline
        leaves ``/readyz`` 503 naming why and is sent again at the next canary interval (one slow
        answer on a loaded machine must not leave a working pair unready for good); the pair is
        ready once one succeeds."""
        why = self.record_reference()
        if why:
            self.suite_ok = False
            self.baseline_failed = True
            self._set("canary_failing", {"check": "canary", "cause": why})
            return
        self.baseline_failed = False
        self.suite_ok = True
        if self.peers is not None:
            # The peers' baseline (their containers' lives) as the pair serves, before the
            # first canary tick: a peer may die before that tick.
            self.peers.look(canary_ok=True)
        with self._lock:
            self.last_ok_at = self._clock()
        self._set(
            *(("stability_failing", self.stability_failing) if self.stability_failing else ("ready", None))
        )

    def work(self) -> None:
        """Run the suite once, then the canary until :meth:`stop` or :meth:`give_up`; never raises."""
        self.metrics.suite_runs.inc()
        self._set("waiting_ready", {"check": "readiness", "cause": "waiting for the server to decode"})
        try:
            self._take_report(self._runner(self._on_progress))
        except Exception as e:  # noqa: BLE001 - a suite defect must show in /readyz, not kill the thread
            self.suite_ok = False
            self._set("suite_failed", {"check": "suite", "cause": f"suite defect: {type(e).__name__}: {e}"})
        self._guard("canary", self._after_suite)
        if self.monitor is not None and not self._stop.is_set():
            self._stability_thread = threading.Thread(
                target=self._stability_loop, name="sparkpair-stability", daemon=True
            )
            self._stability_thread.start()
        while not self._stop.wait(self.s.canary_interval_s):
            self._guard("canary", self._baseline if self.baseline_failed else self._canary_tick)

    def _stability_loop(self) -> None:
        # Its own thread: a slow Docker or journal look must not delay the canary (its age
        # is part of readiness).
        while not self._stop.wait(self.s.stability_interval_s):
            self._guard("stability", self.stability_tick)

    def stability_tick(self) -> None:
        """Look at both nodes once; a fatal finding makes /readyz 503 (``failing_check: stability``)."""
        assert self.monitor is not None
        with self._stability_lock:  # the stability thread and recovery's fresh look
            rep = self.monitor.check()
        self.metrics.record_stability(rep)
        if rep.status == "fail":
            self.stability_failing = {"check": "stability", "cause": rep.message()}
            if self.suite_ok and not self.recovery_exhausted():
                self._set("stability_failing", self.stability_failing)
        else:
            self.stability_failing = None
            if self.suite_ok and self.canary_failures == 0 and not self.recovery_exhausted():
                self._set("ready", None)

    def recovery_exhausted(self) -> bool:
        """True once wedge recovery spent its budget: the verdict stays 503 naming it for good."""
        return self.recovery is not None and self.recovery.exhausted is not None

    def start(self) -> Gateway:
        """Start the background worker thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.work, name="sparkpair-gateway", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the canary loop (a running suite finishes on its own timeouts)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._client is not None:
            self._client.close()

    def _make_app(self) -> FastAPI:
        from .app import make_app

        return make_app(self)


class GatewayGaveUp(RuntimeError):
    """The gateway stopped judging for good (never ready, or the API key refused)."""


def serve(settings: GatewaySettings) -> None:
    """Run the gateway in this process until interrupted or until it gives up (uvicorn on ``host:port``).

    The address is bound before anything starts, so a port in use or a host that is not
    local ends the command at once instead of leaving the suite running with no listener.

    Raises:
        GatewaySettingsError: ``host:port`` cannot be bound (see :func:`listen_socket`).
        GatewayGaveUp: the server never became ready within ``ready_timeout_s`` or refused
            the API key (the command exits 2, so ``restart: on-failure`` restarts it).
    """
    import uvicorn

    sock = listen_socket(settings.host, settings.port)
    gw = Gateway(settings)
    server = uvicorn.Server(
        uvicorn.Config(gw.app, host=settings.host, port=settings.port, log_level="warning")
    )

    def stop_serving(why: str) -> None:
        server.should_exit = True

    gw.on_give_up = stop_serving
    gw.start()
    try:
        server.run(sockets=[sock])
    finally:
        gw.stop()
        sock.close()
    if gw.gave_up is not None:
        raise GatewayGaveUp(gw.gave_up)
