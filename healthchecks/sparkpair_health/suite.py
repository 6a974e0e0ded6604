"""The health suite's stable API: readiness gate, then the functional checks, then a report.

Callers (``sparkpair health``, ``sparkpair demo``, the gateway)::

    from sparkpair_health.suite import SuiteSettings, wait_ready, run_suite

    settings = SuiteSettings(base_url="http://127.0.0.1:8000", profile="tiny-demo")
    report = run_suite(settings, on_progress=print)   # runs wait_ready first
    report.passed, report.checks, report.to_json(), report.to_junit_xml()

Readiness means a decode succeeded: ``/health`` answers 200, then ``/v1/models`` lists
the served name, then a real chat completion returns at least one token (DESIGN.md, data
flow step 4). A server whose engine dies under the suite makes the run stop promptly with
``report.aborted`` saying so (``engine died: ...`` / ``server went away: ...``); the checks
not yet run are reported as ``error`` with that message, never as passes.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator
from rich.console import Console
from sparkpair_serving.apikey import redact
from sparkpair_serving.inputs import check_base_url, check_output_file, check_plan_file
from sparkpair_serving.profile import Profile, load_profile
from sparkpair_serving.waiting import PollTimeout, poll_until

from .checks import CHECKS, SWEEP_CHECKS, CheckContext, CheckSpec, Fail, Passed, Skip
from .client import (
    Deadline,
    HealthClient,
    RequestTimeout,
    ServerGone,
    SuiteError,
    diagnose_server,
    engine_dead_in,
)
from .decode_answer import DecodeAnswer, judge_decode, judge_stream
from .report import CheckResult, ReadyInfo, Report

ProgressFn = Callable[[str, str], None]
"""``on_progress(event, detail)``; events: ``ready-wait``, ``ready``, ``check-start``,
``check-done``, ``aborted``, ``done``. Called from the thread running the suite."""


MAX_TIMEOUTS_IN_A_ROW = 2
"""Checks that may time out in a row, while ``/health`` still answers, before the run stops."""


class NotReady(RuntimeError):
    """The server did not become ready (a decode did not succeed) within the ready timeout.

    Attributes:
        stage: the stage it was stuck at: ``health``, ``models`` or ``decode``.
    """

    def __init__(self, message: str, stage: str = "health") -> None:
        super().__init__(message)
        self.stage = stage


class Timeouts(BaseModel):
    """Time limits of the suite, seconds.

    Attributes:
        ready_s: the readiness gate as a whole (a DSv4 pair takes ~6-10 min to load).
        connect_s: one TCP connect.
        request_s: one ordinary request (read timeout; for streams: the gap between chunks).
        long_prompt_s: one long-prompt request (a full-length prefill).
        decode_probe_s: the gate's completion probe.
        check_scale: multiplies every check's own timeout (``CheckSpec.timeout_s``).
    """

    model_config = ConfigDict(extra="forbid")

    ready_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)
    connect_s: float = Field(default=5.0, gt=0, allow_inf_nan=False)
    request_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    long_prompt_s: float = Field(default=180.0, gt=0, allow_inf_nan=False)
    decode_probe_s: float = Field(default=60.0, gt=0, allow_inf_nan=False)
    check_scale: float = Field(default=1.0, gt=0, allow_inf_nan=False)


class SuiteSettings(BaseModel):
    """Everything one run of the suite needs.

    Attributes:
        base_url: the server, ``http://host:port`` (no ``/v1``).
        profile: a profile name (``configs/profiles/<name>.yaml``), a path, or a loaded :class:`Profile`.
        served_model_name: the model name to request; default: the profile's.
        api_key: sent as a bearer token when the server runs with an API key.
        api_key_source: where the key came from (see :func:`sparkpair_serving.apikey.api_key_source`);
            named when the server refuses it (HTTP 401/403), never the key.
        timeouts: see :class:`Timeouts`.
        report_json: where :func:`run_suite` writes the JSON report (``None``: not written).
        junit_xml: where :func:`run_suite` writes JUnit XML (``None``: not written).
        plan_file: the overlay's kernel-plan JSON (the server's ``SPARKPAIR_PLAN_PATH``);
            included in the report when the file exists.
        only: run only these check ids (default: all, in order).
        skip_ready: do not run the readiness gate (the caller already did).
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    base_url: str
    profile: Profile | str | Path = "tiny-demo"
    served_model_name: str | None = Field(default=None, min_length=1)
    api_key: SecretStr | None = None
    api_key_source: str = "no API key configured"
    timeouts: Timeouts = Field(default_factory=Timeouts)
    report_json: Path | None = None
    junit_xml: Path | None = None
    plan_file: Path | None = None
    only: list[str] | None = None
    skip_ready: bool = False

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_base_url(v, "base_url")

    @field_validator("report_json", "junit_xml")
    @classmethod
    def _writable(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        # Checked before the run: a report that cannot be written at the end would be lost.
        return None if v is None else check_output_file(v, str(info.field_name))

    @field_validator("plan_file")
    @classmethod
    def _plan_file(cls, v: Path | None) -> Path | None:
        return check_plan_file(v)

    @field_validator("only")
    @classmethod
    def _only(cls, v: list[str] | None) -> list[str] | None:
        known = [c.id for c in [*CHECKS, *SWEEP_CHECKS]]
        for x in v or []:
            if x not in known:
                raise ValueError(f"only={x!r}: no such check; known: {known}")
        return v

    def resolved_profile(self) -> Profile:
        """The :class:`Profile` (loaded when given by name or path).

        Raises:
            sparkpair_serving.profile.ProfileError: the profile cannot be loaded.
        """
        return self.profile if isinstance(self.profile, Profile) else load_profile(self.profile)

    def model_name(self) -> str:
        """The served model name every request uses."""
        return self.served_model_name or self.resolved_profile().served_model_name

    def client(self) -> HealthClient:
        """A :class:`HealthClient` for ``base_url`` with these timeouts and key."""
        return HealthClient(
            self.base_url,
            self.api_key,
            connect_timeout_s=self.timeouts.connect_s,
            request_timeout_s=self.timeouts.request_s,
        )


def _noop(event: str, detail: str) -> None:
    pass


class AuthRefused(NotReady):
    """The server answered HTTP 401/403: the API key is missing or wrong (waiting cannot help)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "auth")


def auth_refused_message(status: int, what: str, settings: SuiteSettings) -> str:
    """The message for a 401/403 answer: it names where the key came from, never the key."""
    return (
        f"{what} answered HTTP {status}: the server refuses the API key from "
        f"{settings.api_key_source}; wanted the key the server was started with "
        "(its VLLM_API_KEY: the compose secret sparkpair_api_key, mounted for head and health)"
    )


def decode_probe(
    client: HealthClient,
    settings: SuiteSettings,
    *,
    prompt: str = "Hi",
    max_tokens: int = 2,
    timeout_s: float | None = None,
    fields: dict[str, Any] | None = None,
    stream: bool = False,
) -> DecodeAnswer:
    """POST one greedy chat completion (the profile's request fields, plus ``fields``) and judge
    it (:func:`judge_decode`; streamed, with ``stream_options.include_usage``: :func:`judge_stream`).

    The readiness gate's decode test; the gateway's canary runs the same probe, both ways.

    Raises:
        AuthRefused: HTTP 401/403 (the message names the key's source).
        RequestTimeout: no whole answer within ``timeout_s`` (default ``timeouts.decode_probe_s``).
        SuiteError: the server cannot be reached.
    """
    body = {
        "model": settings.model_name(),
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "seed": 0,
        **settings.resolved_profile().checks.request_extra,
        **(fields or {}),
    }
    t = settings.timeouts.decode_probe_s if timeout_s is None else timeout_s
    path = "/v1/chat/completions"
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        got = client.stream(path, body, deadline=Deadline(t, "the streamed decode probe"), chunk_timeout_s=t)
        if got.response.status_code in (401, 403):
            raise AuthRefused(auth_refused_message(got.response.status_code, f"POST {path}", settings))
        return judge_stream(got)
    r = client.post(path, body, timeout_s=t)
    if r.status_code in (401, 403):
        raise AuthRefused(auth_refused_message(r.status_code, f"POST {path}", settings))
    return judge_decode(r.status_code, r.text)


def wait_ready(
    settings: SuiteSettings,
    on_progress: ProgressFn | None = None,
    *,
    poll_s: float = 1.0,
    client: HealthClient | None = None,
) -> ReadyInfo:
    """Wait until the server really decodes: ``/health`` 200, the name in ``/v1/models``, a completion.

    Polls every ``poll_s`` seconds (connection refused while the server starts is normal)
    and calls ``on_progress("ready-wait", "<stage>: <what was seen> (<s> s)")`` each poll.

    Returns:
        :class:`ReadyInfo` with ``ready=True`` and the seconds waited.

    Raises:
        NotReady: ``settings.timeouts.ready_s`` passed; the message names the stage reached
            (``health``, ``models`` or ``decode``) and what the last probe saw.
        AuthRefused: the server answered HTTP 401/403 (at once: waiting cannot fix a key).
    """
    progress = on_progress or _noop
    model = settings.model_name()
    own = client is None
    c = client or settings.client()
    t0 = time.monotonic()
    stage, seen = "health", "not probed yet"

    def probe() -> ReadyInfo | None:
        nonlocal stage, seen
        try:
            r = c.get("/health", timeout_s=min(10.0, settings.timeouts.request_s))
            if r.status_code != 200:
                stage, seen = "health", f"/health answered HTTP {r.status_code}, wanted 200"
                return None
            stage = "models"
            r = c.get("/v1/models", timeout_s=min(10.0, settings.timeouts.request_s))
            if r.status_code in (401, 403):
                raise AuthRefused(auth_refused_message(r.status_code, "GET /v1/models", settings))
            ids = [m.get("id") for m in (r.json().get("data") or [])] if r.status_code == 200 else []
            if model not in ids:
                seen = f"/v1/models answered HTTP {r.status_code} listing {ids}; waiting for {model!r}"
                return None
            stage = "decode"
            ans = decode_probe(c, settings)
            if ans.ok:
                return ReadyInfo(
                    ready=True,
                    stage="ready",
                    waited_s=time.monotonic() - t0,
                    detail=f"a {ans.completion_tokens}-token completion decoded",
                )
            seen = f"completion: {ans.problem}"
        except RequestTimeout as e:
            seen = f"timeout: {e}"
        except SuiteError as e:
            seen = f"not reachable: {e}"
        except (ValueError, AttributeError, TypeError) as e:
            seen = f"malformed answer: {e}"
        seen = redact(seen, settings.api_key)
        return None

    def waiting(waited_s: float) -> None:
        progress("ready-wait", f"{stage}: {seen} ({waited_s:.0f} s)")

    try:
        try:
            info = poll_until(
                probe, timeout_s=settings.timeouts.ready_s, interval_s=poll_s, on_wait=waiting
            ).value
        except PollTimeout:
            raise NotReady(
                f"{settings.base_url} not ready after {settings.timeouts.ready_s:.0f} s "
                f"(the readiness timeout: health --ready-timeout, gateway SPARKPAIR_READY_TIMEOUT_S): "
                f"stuck at stage {stage!r}: {seen}",
                stage,
            ) from None
        progress("ready", info.detail)
        return info
    finally:
        if own:
            c.close()


def _no_check(ctx: CheckContext, deadline: Deadline) -> Passed:  # pragma: no cover - never run
    raise Skip("not a server check")


def _result(spec: CheckSpec, **fields: Any) -> CheckResult:
    """A :class:`CheckResult` of ``spec`` (its id, title and what it catches) with ``fields``."""
    return CheckResult(id=spec.id, title=spec.title, catches=spec.catches, **fields)


def _load_plan(settings: SuiteSettings, report: Report) -> CheckResult:
    t0 = time.monotonic()
    base = CheckSpec("overlay_plan", "overlay kernel plan included", "silent kernel path", _no_check)
    p = settings.plan_file
    if p is None:
        report.overlay_plan_note = "no plan file given (--plan-file / SuiteSettings.plan_file)"
        return _result(base, status="skip", message=report.overlay_plan_note)
    if not Path(p).is_file():
        report.overlay_plan_note = (
            f"plan file {p} does not exist (the overlay writes it to SPARKPAIR_PLAN_PATH)"
        )
        return _result(base, status="skip", message=report.overlay_plan_note)
    from sparkpair_overlay.plan import KernelPlan, PlanError  # torch-free, vLLM-free

    try:
        report.overlay_plan = KernelPlan.load(p, "plan file").to_json()
    except PlanError as e:  # unreadable, not JSON, or not a kernel plan: names the file and key
        report.overlay_plan_note = str(e)
        return _result(
            base,
            status="fail",
            message=report.overlay_plan_note,
            evidence={"path": str(p)},
            latency_ms=(time.monotonic() - t0) * 1000,
        )
    report.overlay_plan_note = f"from {p}"
    return _result(
        base,
        status="pass",
        message=f"plan read from {p}",
        evidence={"path": str(p)},
        latency_ms=(time.monotonic() - t0) * 1000,
    )


def run_check(spec: CheckSpec, ctx: CheckContext, scale: float = 1.0) -> CheckResult:
    """Run one check within its timeout (``spec.timeout_s * scale`` seconds) and classify the outcome.

    Never raises: a :class:`~sparkpair_health.checks.Fail` is ``fail``, a ``Skip`` is ``skip``,
    a :class:`~sparkpair_health.client.SuiteError` (timeout, connection) is ``error``, and an
    unexpected exception is ``error`` naming it as a suite defect.
    """
    t0 = time.monotonic()
    deadline = Deadline(spec.timeout_s * scale, f"check {spec.id}")
    base = spec
    try:
        out: Passed = spec.fn(ctx, deadline)
        res = _result(base, status="pass", message=out.message, evidence=out.evidence)
    except Fail as f:
        res = _result(base, status="fail", message=f.message, evidence=f.evidence)
    except Skip as s:
        res = _result(base, status="skip", message=str(s))
    except SuiteError as e:
        kind = "timeout" if isinstance(e, RequestTimeout) else "suite error"
        res = _result(base, status="error", message=f"{kind}: {e}", evidence={"error": type(e).__name__})
    except Exception as e:  # noqa: BLE001 - a bug in a check must not pass or crash the run
        res = _result(
            base,
            status="error",
            message=f"suite defect in check {spec.id}: {type(e).__name__}: {e}",
            evidence={"traceback": traceback.format_exc()[-2000:]},
        )
    res.latency_ms = round((time.monotonic() - t0) * 1000, 1)
    return res


def run_suite(
    settings: SuiteSettings,
    on_progress: ProgressFn | None = None,
    *,
    console: Console | None = None,
    checks: list[CheckSpec] | None = None,
) -> Report:
    """Run the readiness gate (unless ``settings.skip_ready``) and every applicable check.

    Args:
        settings: see :class:`SuiteSettings`.
        on_progress: progress callback (see :data:`ProgressFn`).
        console: when given, live progress is shown on it and the result table is printed
            at the end (``on_progress`` is still called).
        checks: the check list (:func:`sparkpair_health.checks.check_list`, as ``health``, ``demo``
            and the gateway pass it); default: the protocol checks :data:`sparkpair_health.checks.CHECKS`.

    Returns:
        the :class:`Report`, also written to ``settings.report_json`` / ``settings.junit_xml``.
        A server that never becomes ready gives a report with ``ready.ready == False`` and no
        checks; it does not raise.

    Raises:
        sparkpair_serving.profile.ProfileError: the profile cannot be loaded.
    """
    if console is not None:
        from .render import live_progress, render_report

        with live_progress(console) as shown:

            def both(event: str, detail: str) -> None:
                shown(event, detail)
                if on_progress:
                    on_progress(event, detail)

            report = run_suite(settings, both, checks=checks)
        render_report(report, console)
        return report
    given = on_progress or _noop

    def progress(event: str, detail: str) -> None:
        given(event, redact(detail, settings.api_key))

    profile = settings.resolved_profile()
    model = settings.model_name()
    t0 = time.monotonic()
    report = Report(base_url=settings.base_url, served_model_name=model, profile=profile.name)
    with settings.client() as client:
        if settings.skip_ready:
            report.ready = ReadyInfo(
                ready=True, stage="ready", waited_s=0.0, detail="gate skipped by the caller"
            )
        else:
            try:
                report.ready = wait_ready(settings, progress, client=client)
            except NotReady as e:
                report.ready = ReadyInfo(
                    ready=False, stage=e.stage, waited_s=time.monotonic() - t0, detail=str(e)
                )
                report.duration_s = round(time.monotonic() - t0, 3)
                report = redact_report(report, settings.api_key)
                report.write(settings.report_json, settings.junit_xml)
                progress("done", f"not ready: {e}")
                return report
        try:
            r = client.get("/version", timeout_s=5.0)
            if r.status_code == 200:
                report.server_version = str(r.json().get("version"))
        except (SuiteError, ValueError):
            pass
        ctx = CheckContext(
            client=client,
            model=model,
            profile=profile,
            request_timeout_s=settings.timeouts.request_s,
            long_prompt_timeout_s=settings.timeouts.long_prompt_s,
        )
        todo = [c for c in (checks or CHECKS) if settings.only is None or c.id in settings.only]
        timeouts_in_a_row = 0
        for spec in todo:
            if report.aborted:
                report.checks.append(
                    CheckResult(
                        id=spec.id,
                        title=spec.title,
                        catches=spec.catches,
                        status="error",
                        message=f"not run: {report.aborted}",
                    )
                )
                continue
            progress("check-start", spec.id)
            res = run_check(spec, ctx, settings.timeouts.check_scale)
            if res.status in ("fail", "error"):
                # Was it the server? A dead engine or a vanished server ends the run now.
                gone = diagnose_server(client, timeout_s=min(5.0, settings.timeouts.request_s))
                saw_dead_engine = engine_dead_in(res.message) or res.message.startswith(
                    "suite error: engine died"
                )
                if gone or saw_dead_engine:
                    if saw_dead_engine and not (gone or "").startswith("engine died"):
                        # The check's own answer named the dead engine; /health may already be gone.
                        cause = "engine died: the server answered with vLLM's engine-dead error"
                        gone = f"{cause}; then {gone}" if gone else cause
                    res.status = "error"
                    res.message = f"{gone} (during check {spec.id}; the check saw: {res.message})"
                    report.aborted = f"{gone} (during check {spec.id})"
                    progress("aborted", report.aborted)
            timed_out = res.status == "error" and res.message.startswith("timeout")
            timeouts_in_a_row = timeouts_in_a_row + 1 if timed_out else 0
            if timeouts_in_a_row >= MAX_TIMEOUTS_IN_A_ROW and not report.aborted:
                # /health still answers but requests do not: a wedged engine (B08). Stop, do not crawl.
                report.aborted = (
                    f"server not answering: {timeouts_in_a_row} checks in a row timed out (last: {spec.id}) "
                    "while /health still answers 200: the engine is likely wedged (field-bugs B08)"
                )
                progress("aborted", report.aborted)
            report.checks.append(res)
            progress("check-done", f"{spec.id} {res.status} {res.latency_ms:.0f} ms")
        report.checks.append(_load_plan(settings, report))
    report.duration_s = round(time.monotonic() - t0, 3)
    report = redact_report(report, settings.api_key)
    report.write(settings.report_json, settings.junit_xml)
    progress("done", "passed" if report.passed else "failed")
    return report


def redact_report(report: Report, key: SecretStr | None) -> Report:
    """``report`` with :func:`~sparkpair_serving.apikey.redact` applied to every string in it.

    Everything printed or written from a report (the table, JSON, JUnit XML, the gateway's
    ``/report`` and ``/readyz``) comes from the redacted copy.
    """
    return Report.model_validate(redact(report.model_dump(), key))


def suite_exit_code(report: Report) -> int:
    """Process exit code for a report: 0 passed, 1 a check failed, 2 not ready or aborted."""
    if report.passed:
        return 0
    if report.ready is None or not report.ready.ready or report.aborted:
        return 2
    return 1


__all__ = [
    "AuthRefused",
    "DecodeAnswer",
    "NotReady",
    "decode_probe",
    "judge_decode",
    "judge_stream",
    "redact_report",
    "ProgressFn",
    "ServerGone",
    "SuiteSettings",
    "Timeouts",
    "run_check",
    "run_suite",
    "suite_exit_code",
    "wait_ready",
]
