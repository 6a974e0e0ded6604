"""The health gateway: a small FastAPI app that turns the health suite into ``/readyz``.

Endpoints:

- ``GET /livez``: 200 while the gateway's worker thread runs (its phase in the body); 503
  once that thread has ended (nothing judges any more, so the container must restart).
- ``GET /readyz``: 200 only after the server decoded (readiness gate), the suite passed, and
  while the periodic canary keeps succeeding *recently*: the last successful canary must be
  younger than :attr:`GatewaySettings.stale_after_s` (``canary_interval_s`` +
  ``canary_timeout_s``). Otherwise 503 with ``failing_check`` (the check id, ``canary``,
  ``peer``, ``readiness``, ``gateway``) and ``cause``.
- ``GET /report``: the latest suite report (JSON, as ``Report.to_json``) plus ``peer_down``
  when a dead peer was named; 503 before the first.
- ``GET /metrics``: Prometheus text, every name prefixed ``sparkpair_``.

Background (one daemon thread): wait for readiness -> run the suite (health v1 checks plus
the DeepSeek-V4 checks: :func:`sparkpair_health.checks.check_list`) -> record the canary's
reference answer -> a canary every ``canary_interval_s`` seconds: the readiness gate's
decode probe (:func:`sparkpair_health.suite.decode_probe`) whose answer is judged
(:meth:`Gateway.judge_canary`). Every exception in the suite or a canary is a verdict
(503 naming it), never the end of the thread. A peer node that dies is named from the
evidence :mod:`sparkpair_health.peers` reads. When the server never becomes ready within
``ready_timeout_s`` or refuses the API key, the gateway gives up: :func:`serve` returns
and the command exits non-zero (2), so compose's ``restart: on-failure`` applies.

Configuration: :class:`GatewaySettings`, from the environment (``SPARKPAIR_<FIELD>``, see
:meth:`GatewaySettings.from_env`) and the same fields as ``sparkpair gateway`` options.
Everything the gateway prints, serves or writes passes :func:`sparkpair_health.apikey.redact`.
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

from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from .apikey import api_key_source, redact, resolve_api_key
from .client import ENGINE_DEAD_MARKERS, HealthClient
from .inputs import check_base_url, check_output_file, check_plan_file
from .peers import (
    DEFAULT_HEAD_LOG,
    Peer,
    PeerDeath,
    PeerSettings,
    PeerWatch,
    check_unique_peers,
    peers_from_text,
)
from .stability import StabilityMonitor, StabilitySettings
from .suite import DecodeAnswer

ENV_PREFIX = "SPARKPAIR_"

HEAD_START_PERIOD_S = 2700.0
"""The head's health-check start period, seconds: compose.yaml ``services.head.healthcheck.
start_period`` (45m), the time a cold load of the checkpoint may take (a unit test keeps
the two equal)."""

JOIN_TIMEOUT_DEFAULT_S = 1800.0
"""``SPARKPAIR_JOIN_TIMEOUT_S``'s default (scripts/sparkpair_cli/deploy/nodeenv.py): how long
the head waits for the worker to join before it starts loading."""

JSON_FIELDS = ("dsv4", "only", "stability", "peers")
"""The only settings whose env value is parsed as JSON (when it starts with ``{`` or ``[``).
No other value is ever parsed: an API key that starts with ``{`` stays a string."""

SECRET_FIELDS = ("api_key",)

THREAD_ENDED = "the gateway's worker thread has ended: nothing judges (restart the container)"
"""Settings never shown in a message (the value is replaced by ``<hidden>``)."""


def default_ready_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """The readiness budget that follows the deployment: the worker's join timeout plus the
    head's start period, seconds.

    The head waits up to ``SPARKPAIR_JOIN_TIMEOUT_S`` for the worker, then loads (within its
    health check's start period, :data:`HEAD_START_PERIOD_S`); the gateway must not give up
    before the head would. A ``SPARKPAIR_JOIN_TIMEOUT_S`` that is not a number is left to
    the node's own validation and the default is used.
    """
    env = os.environ if env is None else env
    raw = env.get("SPARKPAIR_JOIN_TIMEOUT_S", "")
    try:
        join = float(raw) if raw.strip() else JOIN_TIMEOUT_DEFAULT_S
    except ValueError:
        join = JOIN_TIMEOUT_DEFAULT_S
    if not (0 < join < float("inf")):
        join = JOIN_TIMEOUT_DEFAULT_S
    return join + HEAD_START_PERIOD_S


class GatewaySettingsError(ValueError):
    """A gateway setting (env or option) has a value the schema refuses."""


class GatewaySettings(BaseModel):
    """Everything the gateway needs. Env: ``SPARKPAIR_`` + the field name in upper case.

    Attributes:
        base_url: the vLLM server, ``http://host:port``.
        profile: profile name or path (``configs/profiles``).
        served_model_name: default: the profile's.
        api_key: the server's key from ``SPARKPAIR_API_KEY`` (env only; never an option).
        api_key_file: a file holding it (``--api-key-file`` / ``SPARKPAIR_API_KEY_FILE``).
        host / port: where the gateway listens.
        ready_timeout_s: the readiness gate's budget, seconds; default
            :func:`default_ready_timeout_s` (join timeout + head start period, 4500 s with the
            defaults). After it the gateway exits 2 (compose restarts it).
        request_timeout_s: one ordinary suite request, seconds.
        long_prompt_timeout_s: one long-prompt request, seconds.
        canary_interval_s: seconds between canary completions.
        canary_timeout_s: the overall deadline of one canary request, seconds (connect to
            last byte, not per read).
        canary_max_tokens: tokens the canary asks for (when the profile has no expected answer).
        canary_prompt: the canary's user message (when the profile has no expected answer).
        peers / head_log / peer_probe_port: how a dead peer is named (:mod:`sparkpair_health.peers`).
        dsv4_checks: add the DeepSeek-V4 checks to the suite.
        dsv4: removed (refused when given): the model-check settings are the profile's ``checks.dsv4``.
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
    ready_timeout_s: float = Field(default_factory=default_ready_timeout_s, gt=0, allow_inf_nan=False)
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
    peers: list[Peer] = Field(default_factory=list)
    head_log: Path | None = DEFAULT_HEAD_LOG
    peer_probe_port: int | None = Field(None, ge=1, le=65535)

    @property
    def stale_after_s(self) -> float:
        """``/readyz`` answers 503 once the last successful canary is older than this, seconds:
        one canary interval plus one canary deadline (the longest a healthy pair goes
        between two successes)."""
        return self.canary_interval_s + self.canary_timeout_s

    def peer_settings(self) -> PeerSettings:
        """The :class:`~sparkpair_health.peers.PeerSettings` of these settings."""
        return PeerSettings(peers=self.peers, head_log=self.head_log, probe_port=self.peer_probe_port)

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            return check_base_url(v, "base_url")
        except ValueError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None

    @field_validator("peers")
    @classmethod
    def _peers(cls, v: list[Peer]) -> list[Peer]:
        return check_unique_peers(v)

    @field_validator("plan_file")
    @classmethod
    def _plan_file(cls, v: Path | None) -> Path | None:
        return check_plan_file(v)

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
        # Removed: the DeepSeek-V4 check settings are profile fields (checks.dsv4) now.
        from .profile import removed_dsv4_setting

        if v:
            raise ValueError("; ".join(removed_dsv4_setting(k, "SPARKPAIR_DSV4 / --dsv4") for k in v))
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

        Only the structured settings (:data:`JSON_FIELDS`) are parsed as JSON when they start
        with ``{`` or ``[``; every other value (the API key above all) is taken as the string
        it is. A plain comma list is accepted for ``only``, ``name=address,...`` for
        ``peers``; numbers and booleans (``true``/``false``/``1``/``0``) are converted by the
        schema. ``ready_timeout_s`` not set: :func:`default_ready_timeout_s` of ``env``.

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
            if name == "peers":
                try:
                    val = [p.model_dump() for p in peers_from_text(raw)]
                except ValueError as e:
                    raise GatewaySettingsError(f"{var}={raw[:200]!r}: {e}") from None
            elif name in JSON_FIELDS and raw.lstrip().startswith(("{", "[")):
                try:
                    val = json.loads(raw)
                except ValueError as e:
                    raise GatewaySettingsError(
                        f"{var}={raw!r}: not valid JSON ({e}); wanted a JSON value"
                    ) from None
            elif name == "only":
                val = [x.strip() for x in raw.split(",") if x.strip()]
            data[name], source[name] = val, var
        from .profile import removed_dsv4_env

        if stale := removed_dsv4_env(env):  # model-check settings are profile fields now
            raise GatewaySettingsError(stale)
        if "ready_timeout_s" not in data:
            data["ready_timeout_s"] = default_ready_timeout_s(env)
        for k, v in (overrides or {}).items():
            if v is not None:
                data[k], source[k] = v, f"--{k.replace('_', '-')}"
        try:
            out = cls.model_validate(data)
        except ValidationError as e:
            probs = []
            for err in e.errors():
                field = str(err["loc"][0]) if err["loc"] else "?"
                seen = "<hidden>" if field in SECRET_FIELDS else repr(err.get("input"))
                msg = str(err["msg"]).removeprefix("Value error, ")
                sub = ".".join(str(x) for x in err["loc"][1:])
                where = f"{source.get(field, field)}: {sub}" if sub else source.get(field, field)
                probs.append(f"{where}={seen}: {msg}")
            raise GatewaySettingsError("; ".join(probs)) from None
        out._key_source = api_key_source(
            out.api_key,
            out.api_key_file,
            env,
            value_from=source.get("api_key", "SPARKPAIR_API_KEY"),
            file_from=source.get("api_key_file", "api_key_file"),
        )
        return out

    _key_source: str = PrivateAttr(default="")

    @property
    def key_source(self) -> str:
        """Where the API key comes from (an env variable or file path), for messages."""
        return self._key_source or api_key_source(self.api_key, self.api_key_file)

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
        self.spec_acceptance = Gauge(  # from the spec_acceptance check (checks/speculation.py); NaN: no rate
            "sparkpair_spec_acceptance_rate", "accepted / drafted tokens, latest suite run", registry=r
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
            if c["id"] == "spec_acceptance":
                rate = (c.get("evidence") or {}).get("acceptance_rate")
                self.spec_acceptance.set(float("nan") if rate is None else float(rate))
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
        self.metrics = GatewayMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self.phase = "starting"
        self.failing: dict[str, str] | None = {"check": "readiness", "cause": "the gateway has just started"}
        self.suite_ok = False
        self.report_json: str | None = None
        self.last_canary: dict[str, Any] | None = None
        self.last_ok_at: float | None = None
        self.canary_failures = 0
        self.reference: DecodeAnswer | None = None
        self.peer_down: PeerDeath | None = None
        self.gave_up: str | None = None
        self.on_give_up: Callable[[str], None] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stability_thread: threading.Thread | None = None
        self._runner = suite_runner or self.run_suite
        self.monitor = StabilityMonitor(settings.stability) if settings.stability else None
        self.stability_failing: dict[str, str] | None = None
        self.peers = PeerWatch(settings.peer_settings()) if settings.peers else None
        self._client: HealthClient | None = None
        self._prof: Any = None
        self._suite_settings: Any = None
        self.app = self._make_app()

    # ---------------------------------------------------------------- state

    def _set(self, phase: str, failing: dict[str, str] | None) -> None:
        with self._lock:
            self.phase = phase
            self.failing = None if failing is None else {k: self._red(v) for k, v in failing.items()}

    def _red(self, text: str) -> str:
        return str(redact(text, self.key))

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
                            f"{self.s.canary_timeout_s:g})"
                        ),
                    }
            body: dict[str, Any] = {"ready": failing is None, "phase": self.phase}
            if failing:
                body["failing_check"] = failing["check"]
                body["cause"] = self._red(failing["cause"])
            if self.peer_down is not None:
                body["peer_down"] = redact(self.peer_down.to_dict(), self.key)
            if self.last_canary:
                body["last_canary"] = self.last_canary
            self.metrics.ready.set(1.0 if failing is None else 0.0)
            return failing is None, body

    # ---------------------------------------------------------------- suite

    def suite_settings(self) -> Any:
        """Health v1's ``SuiteSettings`` for this gateway."""
        from .suite import SuiteSettings, Timeouts

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
            plan_file=self.s.plan_file,
        )

    def run_suite(self, on_progress: Callable[[str, str], None]) -> Any:
        """Health v1's ``run_suite`` with its checks plus (``dsv4_checks``) the DeepSeek-V4 ones."""
        from .checks import check_list
        from .suite import run_suite

        settings = self.suite_settings()
        checks = check_list(settings.resolved_profile(), only=self.s.only, model_checks=self.s.dsv4_checks)
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

    def _profile(self) -> Any:
        if self._prof is None:
            from .profile import load_profile

            self._prof = load_profile(self.s.profile)
        return self._prof

    def canary_request(self) -> tuple[str, int, str | None, str | None]:
        """(prompt, max_tokens, expected substring, expected finish_reason) of the canary.

        A profile with semantic checks (a trained model) gives its first expected answer:
        the answer must contain it and end with its ``finish_reason``. Otherwise (the demo's
        random-weight model) the gateway's ``canary_prompt``; then the answer must equal the
        reference recorded right after the suite passed (:meth:`record_reference`).
        """
        sem = self._profile().checks.semantic
        if sem.enabled and sem.expected_answers:
            qa = sem.expected_answers[0]
            return qa.prompt, qa.max_tokens, qa.contains, qa.finish_reason
        return self.s.canary_prompt, self.s.canary_max_tokens, None, None

    def _probe(self) -> DecodeAnswer:
        from .suite import decode_probe

        if self._client is None:
            self._client = HealthClient(self.s.base_url, self.key, request_timeout_s=self.s.canary_timeout_s)
        if self._suite_settings is None:  # the profile loaded once, not on every canary
            self._suite_settings = self.suite_settings().model_copy(update={"profile": self._profile()})
        prompt, max_tokens, _, _ = self.canary_request()
        return decode_probe(
            self._client,
            self._suite_settings,
            prompt=prompt,
            max_tokens=max_tokens,
            timeout_s=self.s.canary_timeout_s,
        )

    def judge_canary(self, ans: DecodeAnswer) -> str:
        """Why a decoded canary answer is wrong, or ``""`` when it is right (see :meth:`canary_request`)."""
        if not ans.ok:
            return ans.problem
        _, _, contains, finish = self.canary_request()
        if contains is not None:
            probs = []
            if contains.lower() not in ans.text.lower():
                probs.append(f"answer {ans.text[:80]!r} lacks the profile's expected {contains!r}")
            if finish is not None and ans.finish_reason != finish:
                probs.append(f"finish_reason {ans.finish_reason!r}, wanted {finish!r} (a natural end)")
            return "; ".join(probs)
        ref = self.reference
        if ref is None:
            return "no reference answer recorded (the suite has not passed)"
        if (ans.text, ans.finish_reason) != (ref.text, ref.finish_reason):
            return (
                f"greedy answer {ans.text[:80]!r} (finish_reason {ans.finish_reason!r}) differs from "
                f"{ref.text[:80]!r} (finish_reason {ref.finish_reason!r}) that the same request gave when "
                "the suite passed"
            )
        return ""

    def record_reference(self) -> str:
        """Run the canary request once and keep its answer as the reference (random-weight models).

        Returns ``""`` or why no reference could be recorded.
        """
        self.reference = None
        if self.canary_request()[2] is not None:
            return ""
        ans = self._probe()
        if not ans.ok:
            return f"the reference canary failed: {ans.problem}"
        self.reference = ans
        return ""

    def canary_once(self) -> tuple[bool, str, float]:
        """One canary: (ok, cause when not ok, latency s). Never raises.

        Any exception (transport, a malformed answer, a bug) is a failed canary naming it.
        """
        from .client import RequestTimeout, SuiteError
        from .suite import NotReady

        t0 = time.monotonic()
        try:
            cause = self.judge_canary(self._probe())
            if cause:
                dead = any(m in cause for m in ENGINE_DEAD_MARKERS)
                cause = ("engine died: " if dead else "") + f"canary: {cause}"
        except RequestTimeout as e:
            cause = (
                f"no whole answer within canary_timeout_s={self.s.canary_timeout_s:g} s (engine wedged or "
                f"a peer gone?): {e}"
            )
        except NotReady as e:  # AuthRefused: the key stopped working
            cause = str(e)
        except SuiteError as e:
            cause = (
                f"server went away: {e}. vLLM stops its API server when the engine core "
                "dies, so the engine most likely died"
            )
        except Exception as e:  # noqa: BLE001 - no input may end the canary thread
            cause = f"canary defect: {type(e).__name__}: {e}"
        return not cause, self._red(cause), time.monotonic() - t0

    def _canary_tick(self) -> None:
        ok, cause, lat = self.canary_once()
        self.metrics.canary_last_latency.set(lat)
        self.metrics.canary_total.labels("ok" if ok else "fail").inc()
        peer = self.peers.look(ok) if self.peers is not None else None
        with self._lock:
            self.last_canary = {"ok": ok, "latency_s": round(lat, 3), "at": time.time(), "cause": cause}
            if ok and peer is None:
                self.last_ok_at = self._clock()
            self.peer_down = peer
        if ok and peer is None:
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
                if peer is not None:
                    what = f"; the canary saw: {cause}" if cause else ""
                    self._set("peer_down", {"check": "peer", "cause": peer.cause() + what})
                else:
                    self._set("canary_failing", {"check": "canary", "cause": cause})
        self.metrics.canary_consecutive_failures.set(self.canary_failures)

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
        why = self.record_reference()
        if why:
            self.suite_ok = False
            self._set("canary_failing", {"check": "canary", "cause": why})
            return
        if self.peers is not None:
            # The peers' baseline (their containers' lives) as the pair serves, before the
            # first canary tick: a peer may die before that tick.
            self.peers.look(canary_ok=True)
        with self._lock:
            self.last_ok_at = self._clock()

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
            self._guard("canary", self._canary_tick)

    def _stability_loop(self) -> None:
        # Its own thread: a slow Docker or journal look must not delay the canary (its age
        # is part of readiness).
        while not self._stop.wait(self.s.stability_interval_s):
            self._guard("stability", self.stability_tick)

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
        if self._client is not None:
            self._client.close()

    # ---------------------------------------------------------------- app

    def _make_app(self) -> FastAPI:
        app = FastAPI(title="sparkpair health gateway", docs_url=None, redoc_url=None)

        @app.get("/livez")
        def livez() -> JSONResponse:
            alive = self.thread_alive() and self.gave_up is None
            body: dict[str, Any] = {"alive": alive, "phase": self.phase}
            if self.gave_up is not None:
                body["cause"] = f"gave up: {self.gave_up}"
            elif not alive:
                body["cause"] = THREAD_ENDED
            return JSONResponse(body, status_code=200 if alive else 503)

        @app.get("/readyz")
        def readyz() -> JSONResponse:
            ok, body = self.readiness()
            return JSONResponse(body, status_code=200 if ok else 503)

        @app.get("/report")
        def report() -> Any:
            with self._lock:
                text = self.report_json
                peer = self.peer_down
            if text is None:
                return JSONResponse({"detail": "no report yet", "phase": self.phase}, status_code=503)
            if peer is not None:
                d = json.loads(text)
                d["peer_down"] = redact(peer.to_dict(), self.key)
                return JSONResponse(d)
            return PlainTextResponse(text, media_type="application/json")

        @app.get("/metrics")
        def metrics() -> PlainTextResponse:
            self.readiness()  # sparkpair_ready follows /readyz, canary age included
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
