"""The health gateway: a small FastAPI app that turns the health suite into ``/readyz``.

Endpoints:

- ``GET /livez``: 200 while the gateway process runs (its phase in the body).
- ``GET /readyz``: 200 only after the server decoded (readiness gate), the suite passed,
  and while the periodic canary completion keeps succeeding; otherwise 503 with
  ``failing_check`` (the check id, ``canary``, or ``readiness``) and ``cause``.
- ``GET /report``: the latest suite report (JSON, as ``Report.to_json``); 503 before the first.
- ``GET /metrics``: Prometheus text, every name prefixed ``sparkpair_``.

Background (one daemon thread): wait for readiness -> run the suite (health v1 checks plus
the DeepSeek-V4 checks of :mod:`sparkpair_health.checks_model`) -> a canary every
``canary_interval_s`` seconds: a real short chat completion. An engine that dies after ready
makes the next canary fail (HTTP 5xx or connection refused), so ``/readyz`` turns 503 within
one canary interval (plus ``canary_timeout_s`` at worst), naming the cause.

Configuration: :class:`GatewaySettings`, from the environment (``SPARKPAIR_<FIELD>``, see
:meth:`GatewaySettings.from_env`) and the same fields as ``sparkpair gateway`` options.
Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, ValidationInfo, field_validator

from .apikey import auth_headers, redact, resolve_api_key
from .inputs import check_base_url, check_output_file
from .stability import StabilityMonitor, StabilitySettings

ENV_PREFIX = "SPARKPAIR_"


class GatewaySettingsError(ValueError):
    """A gateway setting (env or option) has a value the schema refuses."""


class GatewaySettings(BaseModel):
    """Everything the gateway needs. Env: ``SPARKPAIR_`` + the field name in upper case.

    Attributes:
        base_url: the vLLM server, ``http://host:port``.
        profile: profile name or path (``configs/profiles``).
        served_model_name: default: the profile's.
        api_key / api_key_file: the server's ``--api-key`` (also ``SPARKPAIR_API_KEY(_FILE)``).
        host / port: where the gateway listens.
        ready_timeout_s: the readiness gate's budget, seconds.
        request_timeout_s: one ordinary suite request, seconds.
        long_prompt_timeout_s: one long-prompt request, seconds.
        canary_interval_s: seconds between canary completions.
        canary_timeout_s: one canary request, seconds.
        canary_max_tokens: tokens the canary asks for.
        canary_prompt: the canary's user message.
        dsv4_checks: add the DeepSeek-V4 checks to the suite.
        dsv4: :class:`~sparkpair_health.checks_model.DSV4CheckSettings` overrides (JSON in env).
        only: run only these health-v1 check ids.
        report_json / junit_xml: where each suite report is also written.
        stability: both nodes' containers and kernel logs to watch
            (:class:`~sparkpair_health.stability.StabilitySettings`, JSON in env); ``None``: off.
        stability_interval_s: seconds between stability looks after the suite.
        plan_file: the overlay's kernel-plan JSON as the head wrote it (its
            ``SPARKPAIR_PLAN_PATH``; compose shares it read-only at
            ``/var/lib/sparkpair/state/kernel-plan.json``), read by the ``overlay_plan`` check.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str = "http://127.0.0.1:8000"
    profile: str = "tiny-demo"
    served_model_name: str | None = Field(None, min_length=1)
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    ready_timeout_s: float = Field(900.0, gt=0, allow_inf_nan=False)
    request_timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    long_prompt_timeout_s: float = Field(180.0, gt=0, allow_inf_nan=False)
    canary_interval_s: float = Field(15.0, gt=0, allow_inf_nan=False)
    canary_timeout_s: float = Field(10.0, gt=0, allow_inf_nan=False)
    canary_max_tokens: int = Field(4, gt=0)
    canary_prompt: str = "Reply with OK."
    dsv4_checks: bool = True
    dsv4: dict[str, Any] = Field(default_factory=dict)
    only: list[str] | None = None
    report_json: Path | None = None
    junit_xml: Path | None = None
    stability: StabilitySettings | None = None
    stability_interval_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    plan_file: Path | None = None

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            return check_base_url(v, "base_url")
        except ValueError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        # Loaded now, not when the suite first runs: a bad profile must stop the gateway at
        # start (exit 3), not leave it answering 503 "suite defect" forever.
        from .profile import load_profile

        load_profile(v)
        return v

    @field_validator("only")
    @classmethod
    def _only(cls, v: list[str] | None) -> list[str] | None:
        from .checks import CHECKS

        known = [c.id for c in CHECKS]
        bad = [x for x in v or [] if x not in known]
        if bad:
            raise ValueError(f"no such check {bad}; wanted ids from {known}")
        return v

    @field_validator("dsv4")
    @classmethod
    def _dsv4(cls, v: dict[str, Any]) -> dict[str, Any]:
        from .checks_model import DSV4CheckSettings

        try:
            DSV4CheckSettings.model_validate({"base_url": "http://x", "served_model_name": "x", **v})
        except ValidationError as e:
            raise ValueError(
                "; ".join(
                    f"{'.'.join(str(x) for x in err['loc'])}={err.get('input')!r}: {err['msg']}"
                    for err in e.errors()
                )
                + "; wanted fields of sparkpair_health.checks_model.DSV4CheckSettings"
            ) from None
        return v

    @field_validator("report_json", "junit_xml")
    @classmethod
    def _writable(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return None if v is None else check_output_file(v, str(info.field_name))

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> GatewaySettings:
        """Settings from ``SPARKPAIR_<FIELD>`` variables, then ``overrides`` (CLI options, not None).

        Values starting with ``{`` or ``[`` are parsed as JSON (``SPARKPAIR_DSV4``,
        ``SPARKPAIR_ONLY``); a plain comma list is accepted for ``only``; numbers and
        booleans (``true``/``false``/``1``/``0``) are converted by the schema.

        Raises:
            GatewaySettingsError: a value does not fit; the message names the variable,
                the value seen (never the API key) and what was wanted.
        """
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        source: dict[str, str] = {}
        for name in cls.model_fields:
            var = ENV_PREFIX + name.upper()
            if var not in env or env[var] == "":
                continue
            raw = env[var]
            val: Any = raw
            if raw.lstrip().startswith(("{", "[")):
                try:
                    val = json.loads(raw)
                except ValueError as e:
                    raise GatewaySettingsError(
                        f"{var}={raw!r}: not valid JSON ({e}); wanted a JSON value"
                    ) from None
            elif name == "only":
                val = [x.strip() for x in raw.split(",") if x.strip()]
            data[name], source[name] = val, var
        for k, v in (overrides or {}).items():
            if v is not None:
                data[k], source[k] = v, f"--{k.replace('_', '-')}"
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            probs = []
            for err in e.errors():
                field = str(err["loc"][0]) if err["loc"] else "?"
                seen = "<hidden>" if field == "api_key" else repr(err.get("input"))
                msg = str(err["msg"]).removeprefix("Value error, ")
                sub = ".".join(str(x) for x in err["loc"][1:])
                where = f"{source.get(field, field)}: {sub}" if sub else source.get(field, field)
                probs.append(f"{where}={seen}: {msg}")
            raise GatewaySettingsError("; ".join(probs)) from None

    def resolved_api_key(self) -> SecretStr | None:
        """The key from ``api_key``, ``api_key_file`` or ``SPARKPAIR_API_KEY(_FILE)``."""
        return resolve_api_key(self.api_key, self.api_key_file)


# --------------------------------------------------------------------------- metrics


class GatewayMetrics:
    """The gateway's Prometheus metrics, in their own registry (all ``sparkpair_``-prefixed)."""

    STATUSES = ("pass", "fail", "skip", "error")

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.ready = Gauge("sparkpair_ready", "1 when /readyz answers 200", registry=r)
        self.check_status = Gauge(
            "sparkpair_check_status",
            "1 for the status of each check in the latest report",
            ["check", "status"],
            registry=r,
        )
        self.check_duration = Gauge(
            "sparkpair_check_duration_seconds",
            "wall time of each check in the latest report",
            ["check"],
            registry=r,
        )
        self.suite_runs = Counter("sparkpair_suite_runs", "suite runs started", registry=r)
        self.suite_passed = Gauge("sparkpair_suite_passed", "1 when the latest report passed", registry=r)
        self.suite_duration = Gauge(
            "sparkpair_suite_duration_seconds", "latest suite run, seconds", registry=r
        )
        self.canary_latency = Histogram(
            "sparkpair_canary_latency_seconds",
            "latency of successful canary completions",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )
        self.canary_last_latency = Gauge(
            "sparkpair_canary_last_latency_seconds", "latency of the latest canary (ok or not)", registry=r
        )
        self.canary_total = Counter(
            "sparkpair_canary", "canary completions by result", ["result"], registry=r
        )
        self.canary_consecutive_failures = Gauge(
            "sparkpair_canary_consecutive_failures", "canary failures since the last success", registry=r
        )

        self.stability_findings = Gauge(
            "sparkpair_stability_findings",
            "findings of the latest stability look",
            ["node", "severity"],
            registry=r,
        )
        self.container_restarts = Gauge(
            "sparkpair_container_restart_count",
            "Docker RestartCount of each serving container",
            ["node", "container"],
            registry=r,
        )
        self.container_oom_killed = Gauge(
            "sparkpair_container_oom_killed",
            "1 when Docker says the container was OOM-killed",
            ["node", "container"],
            registry=r,
        )

    def record_stability(self, rep: Any) -> None:
        self.stability_findings.clear()
        counts: dict[tuple[str, str], int] = {}
        for f in rep.findings:
            counts[(f.node, f.severity)] = counts.get((f.node, f.severity), 0) + 1
        for (node, sev), n in counts.items():
            self.stability_findings.labels(node, sev).set(n)
        for c in rep.containers:
            self.container_restarts.labels(c.node, c.name).set(c.restart_count)
            self.container_oom_killed.labels(c.node, c.name).set(1.0 if c.oom_killed else 0.0)

    def record_report(self, checks: list[dict[str, Any]], passed: bool, duration_s: float) -> None:
        self.check_status.clear()
        self.check_duration.clear()
        for c in checks:
            for st in self.STATUSES:
                self.check_status.labels(c["id"], st).set(1.0 if c["status"] == st else 0.0)
            self.check_duration.labels(c["id"]).set(float(c.get("latency_ms", 0.0)) / 1000.0)
        self.suite_passed.set(1.0 if passed else 0.0)
        self.suite_duration.set(duration_s)


# --------------------------------------------------------------------------- the gateway


SuiteRunner = Callable[[Callable[[str, str], None]], Any]
"""``runner(on_progress) -> Report`` (health v1's :class:`~sparkpair_health.report.Report`)."""


class Gateway:
    """Readiness state, the background worker and the FastAPI app.

    Args:
        settings: see :class:`GatewaySettings`.
        suite_runner: overrides how the suite runs (tests); default: :meth:`run_suite`.
    """

    def __init__(self, settings: GatewaySettings, suite_runner: SuiteRunner | None = None) -> None:
        self.s = settings
        self.key = settings.resolved_api_key()
        self.metrics = GatewayMetrics()
        self._lock = threading.Lock()
        self.phase = "starting"
        self.failing: dict[str, str] | None = {"check": "readiness", "cause": "the gateway has just started"}
        self.suite_ok = False
        self.report_json: str | None = None
        self.last_canary: dict[str, Any] | None = None
        self.canary_failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runner = suite_runner or self.run_suite
        self.monitor = StabilityMonitor(settings.stability) if settings.stability else None
        self.stability_failing: dict[str, str] | None = None
        self._model: str | None = None
        self.app = self._make_app()

    # ---------------------------------------------------------------- state

    def _set(self, phase: str, failing: dict[str, str] | None) -> None:
        with self._lock:
            self.phase = phase
            self.failing = None if failing is None else {k: self._red(v) for k, v in failing.items()}
            self.metrics.ready.set(1.0 if self.failing is None else 0.0)

    def _red(self, text: str) -> str:
        return str(redact(text, self.key))

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """(ready, body of /readyz)."""
        with self._lock:
            body: dict[str, Any] = {"ready": self.failing is None, "phase": self.phase}
            if self.failing:
                body["failing_check"] = self.failing["check"]
                body["cause"] = self.failing["cause"]
            if self.last_canary:
                body["last_canary"] = self.last_canary
            return self.failing is None, body

    # ---------------------------------------------------------------- suite

    def suite_settings(self) -> Any:
        """Health v1's ``SuiteSettings`` for this gateway."""
        from .suite import SuiteSettings, Timeouts

        return SuiteSettings(
            base_url=self.s.base_url,
            profile=self.s.profile,
            served_model_name=self.s.served_model_name,
            api_key=self.key,
            timeouts=Timeouts(
                ready_s=self.s.ready_timeout_s,
                request_s=self.s.request_timeout_s,
                long_prompt_s=self.s.long_prompt_timeout_s,
            ),
            report_json=self.s.report_json,
            junit_xml=self.s.junit_xml,
            only=self.s.only,
            plan_file=self.s.plan_file,
        )

    def run_suite(self, on_progress: Callable[[str, str], None]) -> Any:
        """Health v1's ``run_suite`` with its checks plus (``dsv4_checks``) the DeepSeek-V4 ones."""
        from .checks import CHECKS
        from .suite import run_suite

        settings = self.suite_settings()
        checks = [c for c in CHECKS if self.s.only is None or c.id in self.s.only]
        if self.s.dsv4_checks:
            from .checks_model import dsv4_check_specs

            checks += dsv4_check_specs(self.key, **self.s.dsv4)
        if self.monitor is not None:
            from .stability import stability_check_spec

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
            self._set("ready", None)
            return
        self.suite_ok = False
        if not ready.get("ready"):
            self._set("not_ready", {"check": "readiness", "cause": ready.get("detail", "not ready")})
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

    # ---------------------------------------------------------------- canary

    def canary_once(self) -> tuple[bool, str, float]:
        """One real short completion: (ok, cause when not ok, latency s)."""
        model = self.s.served_model_name or self._profile_model()
        body = {
            "model": model,
            "messages": [{"role": "user", "content": self.s.canary_prompt}],
            "max_tokens": self.s.canary_max_tokens,
            "temperature": 0,
        }
        t0 = time.monotonic()
        url = self.s.base_url + "/v1/chat/completions"
        try:
            r = httpx.post(url, json=body, headers=auth_headers(self.key), timeout=self.s.canary_timeout_s)
        except httpx.TimeoutException:
            return (
                False,
                f"no answer within canary_timeout_s={self.s.canary_timeout_s:g} s (engine wedged?)",
                (time.monotonic() - t0),
            )
        except httpx.HTTPError as e:
            return (
                False,
                (
                    f"server went away: POST {url}: {type(e).__name__}: {e}. vLLM stops its API server when "
                    "the engine core dies, so the engine most likely died"
                ),
                time.monotonic() - t0,
            )
        lat = time.monotonic() - t0
        if r.status_code != 200:
            dead = any(m in r.text for m in ("EngineDeadError", "EngineCore", "engine core"))
            what = "engine died: " if dead else ""
            return False, f"{what}canary answered HTTP {r.status_code}, wanted 200: {r.text[:300]}", lat
        try:
            d = r.json()
            n = (d.get("usage") or {}).get("completion_tokens")
            ok = bool(d.get("choices")) and isinstance(n, int) and n >= 1
        except ValueError:
            ok, n = False, None
        if not ok:
            return False, f"canary answered 200 without a decoded token (completion_tokens={n!r})", lat
        return True, "", lat

    def _profile_model(self) -> str:
        if self._model is None:
            from .profile import load_profile

            self._model = load_profile(self.s.profile).served_model_name
        return self._model

    def _canary_tick(self) -> None:
        ok, cause, lat = self.canary_once()
        self.metrics.canary_last_latency.set(lat)
        self.metrics.canary_total.labels("ok" if ok else "fail").inc()
        with self._lock:
            self.last_canary = {
                "ok": ok,
                "latency_s": round(lat, 3),
                "at": time.time(),
                "cause": self._red(cause),
            }
        if ok:
            self.canary_failures = 0
            self.metrics.canary_latency.observe(lat)
            if self.suite_ok:
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
                self._set("canary_failing", {"check": "canary", "cause": cause})
        self.metrics.canary_consecutive_failures.set(self.canary_failures)

    # ---------------------------------------------------------------- worker

    def work(self) -> None:
        """Run the suite once, then the canary until :meth:`stop`; never raises."""
        self.metrics.suite_runs.inc()
        self._set("waiting_ready", {"check": "readiness", "cause": "waiting for the server to decode"})
        try:
            report = self._runner(self._on_progress)
            self._take_report(report)
        except Exception as e:  # noqa: BLE001 - a suite defect must show in /readyz, not kill the thread
            self.suite_ok = False
            self._set("suite_failed", {"check": "suite", "cause": f"suite defect: {type(e).__name__}: {e}"})
        next_look = time.monotonic() + self.s.stability_interval_s
        while not self._stop.wait(self.s.canary_interval_s):
            self._canary_tick()
            if self.monitor is not None and time.monotonic() >= next_look:
                next_look = time.monotonic() + self.s.stability_interval_s
                self.stability_tick()

    def stability_tick(self) -> None:
        """Look at both nodes once; a fatal finding makes /readyz 503 (``failing_check: stability``)."""
        assert self.monitor is not None
        rep = self.monitor.check()
        self.metrics.record_stability(rep)
        if rep.status == "fail":
            self.stability_failing = {"check": "stability", "cause": rep.message()}
            if self.suite_ok:
                self._set("stability_failing", self.stability_failing)
        else:
            self.stability_failing = None
            if self.suite_ok and self.canary_failures == 0:
                self._set("ready", None)

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

    # ---------------------------------------------------------------- app

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="sparkpair health gateway", docs_url=None, redoc_url=None)

        @app.get("/livez")
        def livez() -> JSONResponse:
            return JSONResponse({"alive": True, "phase": self.phase})

        @app.get("/readyz")
        def readyz() -> JSONResponse:
            ok, body = self.readiness()
            return JSONResponse(body, status_code=200 if ok else 503)

        @app.get("/report")
        def report() -> Any:
            with self._lock:
                text = self.report_json
            if text is None:
                return JSONResponse({"detail": "no report yet", "phase": self.phase}, status_code=503)
            return PlainTextResponse(text, media_type="application/json")

        @app.get("/metrics")
        def metrics() -> PlainTextResponse:
            return PlainTextResponse(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

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


def serve(settings: GatewaySettings) -> None:
    """Run the gateway in this process until interrupted (uvicorn on ``host:port``).

    The address is bound before anything starts, so a port in use or a host that is not
    local ends the command at once instead of leaving the suite running with no listener.

    Raises:
        GatewaySettingsError: ``host:port`` cannot be bound (see :func:`listen_socket`).
    """
    import uvicorn

    sock = listen_socket(settings.host, settings.port)
    gw = Gateway(settings).start()
    try:
        server = uvicorn.Server(
            uvicorn.Config(gw.app, host=settings.host, port=settings.port, log_level="warning")
        )
        server.run(sockets=[sock])
    finally:
        gw.stop()
        sock.close()
