"""The gateway's canary: what a real client sends, every ``canary_interval_s``, judged.

The contract (docs/health-verdict.md, "The canary"), in one place:

- **A tick** sends the canary request twice, one after the other, within one overall deadline
  of ``canary_timeout_s``: non-streamed, then streamed (``stream: true`` with
  ``stream_options.include_usage``), as most clients ask. Both are the readiness gate's decode
  probe (:func:`sparkpair_health.suite.decode_probe`) and both answers are judged the same way
  (:meth:`CanaryMixin.judge_tick`): decoded (:func:`~sparkpair_health.decode_answer.judge_decode`,
  :func:`~sparkpair_health.decode_answer.judge_stream`: a stream that ends without content fails
  here), fresh (:class:`Freshness`), right (:meth:`CanaryMixin.judge_canary`).
- **A nonce** (:func:`nonce`) goes with every request, as vLLM's ``request_id`` and the
  OpenAI ``user`` field: no cache can have seen the request before, and the model never sees
  it, so the judgement is insensitive to it (a random-weight model's greedy answer still
  equals the reference recorded once). vLLM names its answer after it (``id`` is
  ``chatcmpl-<request_id>``).
- **Freshness** (:class:`Freshness`): an answer's ``id`` must be one no earlier answer had and
  it must carry ``created``; when the server's answers named their request at the baseline,
  the ``id`` must name this one, else ``created`` must not go back more than
  :data:`CREATED_SKEW_S` behind the newest answer seen (a server clock stepped back is no
  replay when the id names the request). A cache or proxy replaying an answer fails here,
  whatever the answer says.
- **Right**: with a trained model (the profile's ``checks.semantic``), the first expected
  answer and its ``finish_reason``; otherwise the tokens, text and ``finish_reason`` that the
  baseline tick, right after the suite passed, gave (:meth:`CanaryMixin.record_reference`),
  compared with their logprobs: a parting at a near-tie is noise
  (:func:`~sparkpair_health.checks.compare.compare_greedy`).
- **The outcome** is a :class:`CanaryResult`: ``ok``, ``kind`` (:data:`CANARY_KINDS`),
  ``cause`` (which request, and why), the latency, and the answers.
- **Busy is not wedged**: a tick reads the engine's own counters
  (:mod:`sparkpair_health.engine_load`) beside its requests (:class:`CounterWatch`): once as it
  starts, then over and over once an answer is slow, so a ``/metrics`` that answers late under
  load still lands within the tick. A late answer on an engine with requests running (at some
  reading of the tick, or an answer the tick already got) whose step or token counters moved
  between the tick's first and latest reading (the last tick's when this one got only one) is
  ``busy`` (reported, not a 503); one whose counters stood still, or a
  server that gave no reading, is a ``timeout``. The gateway asks the peers first: a paused or
  frozen peer is never busy.
- **The bound**: each request is held to the tick's deadline whole (streams included), and
  ``/readyz`` follows the last successful tick, which is at most ``canary_interval_s +
  canary_timeout_s`` old on a healthy pair, plus a second for the tick's bookkeeping
  (:attr:`~sparkpair_health.gateway.settings.GatewaySettings.stale_after_s`); a backend gone
  bad in any way turns ``/readyz`` 503 within ``canary_interval_s + canary_timeout_s`` plus
  :data:`POLL_SLACK_S` (:func:`verdict_bound_s`).

:class:`CanaryMixin` is a part of :class:`sparkpair_health.gateway.Gateway` (which holds the
settings, the key and the state these methods read), kept apart so each file reads as one
concern. Runs in the slim client.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkpair_serving.apikey import redact

from ..checks.compare import LOGPROB_FIELDS, compare_greedy
from ..client import ENGINE_DEAD_MARKERS, HealthClient, RequestTimeout, within
from ..decode_answer import DecodeAnswer
from ..engine_load import EngineLoad, judge_slow, parse_engine_load
from .settings import GatewaySettings

CANARY_HISTORY = 50
"""Canary results the gateway keeps for the status page (the newest last); one an interval,
50 cover 12.5 minutes at the default 15 s."""

POLL_SLACK_S = 5.0
"""Seconds a poller of ``/readyz`` may add to ``canary_interval_s + canary_timeout_s`` (its poll
interval and scheduling, and the tick's own bookkeeping, ``gateway.settings.TICK_SLACK_S``;
docs/health-verdict.md, "The canary")."""

CREATED_SKEW_S = 2
"""How far (seconds) an answer's ``created`` may lie behind the newest one seen before it
counts as replayed: vLLM stamps ``created`` with whole seconds of the server's clock, and two
answers of one tick may cross a second boundary in either order."""

SEEN_IDS = 4096
"""Answer ids remembered (two a tick: 4.5 hours at the default 15 s interval)."""

CANARY_MODES: tuple[Literal["chat", "stream"], ...] = ("chat", "stream")
"""The requests of one tick, in order: non-streamed, then streamed."""

CANARY_KINDS = ("ok", "busy", "answer", "replayed", "timeout", "engine_died", "server_gone", "auth", "defect")
"""What a tick's outcome is: judged right; slow while the engine works (:func:`judge_slow`:
reported, not a failure); an answer judged wrong (not decoded, a stream without content, another
text); a replayed answer (:class:`Freshness`); no whole answer within the deadline while the
engine's counters stood still (or it exports none); the engine's dead error; the server gone;
the key refused; a defect of the gateway."""

PROGRESS_READ_S = 2.0
"""Seconds of ``canary_timeout_s`` kept after the tick's requests' deadline for a counter read
still in flight to land (at most a third of ``canary_timeout_s``): the requests get
``canary_timeout_s`` less this, so a tick still ends within ``canary_timeout_s`` (the staleness
bound of ``/readyz`` is unchanged)."""

TICK_MARGIN_S = 1.0
"""Seconds of ``canary_timeout_s`` (at most a tenth of it) a tick leaves unused: the last counter
read must land that long before the deadline, so the tick's own bookkeeping after it (judging,
the peers' look, recording) still fits the staleness bound (``GatewaySettings.stale_after_s``)
on a loaded host (the soak saw a busy tick end 9.9 s into a 10 s deadline and
one poll read the verdict stale)."""

WATCH_EVERY_S = 1.0
"""Seconds between the starts of two counter reads of one tick once its answer is slow (each
read may take until the tick's end); one ``GET /metrics`` a second at most, only while an
answer is late."""


def progress_read_s(settings: GatewaySettings) -> float:
    """Seconds kept after the requests' deadline for a counter read in flight
    (:data:`PROGRESS_READ_S`, capped at a third of ``canary_timeout_s``)."""
    return min(PROGRESS_READ_S, settings.canary_timeout_s / 3)


class CounterWatch:
    """The engine's counters read beside one tick's requests, in a thread of its own.

    One read as the tick starts; once the tick has run ``slow_after_s``, one every
    :data:`WATCH_EVERY_S` until :meth:`stop` or ``deadline`` (``time.monotonic()`` seconds),
    each read allowed until ``deadline``. Under load the API server may answer ``/metrics``
    seconds late: a read that lands while the requests wait still counts, where one read after
    the answer was late would have to fit the few seconds left.

    Args:
        read: ``timeout_s -> EngineLoad | None`` (:meth:`CanaryMixin.engine_load`); an exception
            counts as no reading.
        deadline: when the last read must have answered, ``time.monotonic()`` seconds.
        slow_after_s: seconds after the start from which the reads repeat.

    Attributes:
        first, latest: the first and the newest reading that answered (``None`` before one did).
        peak_running: the most requests running that any reading saw.
        tried, answered: reads started and reads that gave a reading.
    """

    def __init__(
        self, read: Callable[[float], EngineLoad | None], deadline: float, slow_after_s: float
    ) -> None:
        self._read = read
        self._deadline = deadline
        self._t0 = time.monotonic()
        self._slow_after_s = slow_after_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.first: EngineLoad | None = None
        self.latest: EngineLoad | None = None
        self.peak_running = 0.0
        self.tried = 0
        self.answered = 0
        self._thread = threading.Thread(target=self._run, name="sparkpair-canary-counters", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            left = self._deadline - started
            if left <= 0:
                return
            self.tried += 1
            try:
                got = self._read(left)
            except Exception:  # noqa: BLE001 - no reading this time, the tick judges the rest
                got = None
            if got is not None:
                with self._lock:
                    self.answered += 1
                    self.first = self.first or got
                    self.latest = got
                    self.peak_running = max(self.peak_running, got.running)
            next_at = max(self._t0 + self._slow_after_s, started + WATCH_EVERY_S)
            self._stop.wait(max(next_at - time.monotonic(), 0.0))

    def stop(self, wait_s: float = 0.0) -> tuple[EngineLoad | None, EngineLoad | None]:
        """Stop reading; wait up to ``wait_s`` for a read in flight to land. Returns
        ``(first, latest)``."""
        self._stop.set()
        if wait_s > 0:
            self._thread.join(wait_s)
        with self._lock:
            return self.first, self.latest


NONCE_PREFIX = "sparkpair-canary-"


def nonce() -> str:
    """A request id no server or cache has seen: ``sparkpair-canary-<32 hex digits>`` (uuid4)."""
    return NONCE_PREFIX + uuid.uuid4().hex


def verdict_bound_s(settings: GatewaySettings) -> float:
    """The longest ``/readyz`` may stay 200 after the backend went bad, seconds, as a poller
    sees it: ``canary_interval_s + canary_timeout_s`` plus :data:`POLL_SLACK_S` (which holds the
    staleness bound's ``TICK_SLACK_S``)."""
    return settings.canary_interval_s + settings.canary_timeout_s + POLL_SLACK_S


def mode_label(mode: str) -> str:
    """How a cause names the request: ``canary`` (non-streamed) or ``streamed canary``."""
    return "streamed canary" if mode == "stream" else "canary"


@dataclass
class CanaryResult:
    """One tick's outcome (see the module docstring).

    Attributes:
        ok: both answers judged right.
        kind: one of :data:`CANARY_KINDS`.
        cause: ``""`` when ok; else which request (``canary``, ``streamed canary``) and why
            (for ``busy``: what moved), key redacted.
        latency_s: seconds from the first request to the last answer (or the failure).
        answers: the decoded answers, in :data:`CANARY_MODES` order (fewer when one failed).
    """

    ok: bool
    kind: str
    cause: str
    latency_s: float
    answers: list[DecodeAnswer] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """Slow while the engine works: not ``ok``, and not a failure either."""
        return self.kind == "busy"


class Freshness:
    """Whether an answer was made for the request that got it, not replayed from memory.

    Attributes:
        names_requests: whether the server names each answer after its request's nonce (vLLM
            does: ``chatcmpl-<request_id>``), learnt from the baseline tick
            (:meth:`learn`); ``None`` before it.
        newest_created: the newest ``created`` seen, unix seconds.
    """

    def __init__(self) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self.names_requests: bool | None = None
        self.newest_created: int | None = None

    def problem(self, ans: DecodeAnswer, request_id: str) -> str:
        """Why ``ans`` (the answer to ``request_id``) is not fresh, or ``""``."""
        if ans.id is None:
            return "the answer carries no id; wanted a fresh one for each request"
        if ans.id in self._seen:
            ago = time.monotonic() - self._seen[ans.id]
            return (
                f"the answer's id {ans.id!r} is one an earlier answer had ({ago:.0f} s ago): an answer "
                "replayed from a cache, not made for this request"
            )
        if self.names_requests and request_id not in ans.id:
            return (
                f"the answer's id {ans.id!r} does not name this request ({request_id}), as the "
                "server's answers did when the canary started: not made for this request (a cache "
                "or proxy answered)"
            )
        if ans.created is None:
            return "the answer carries no created timestamp; wanted the time it was made"
        if self.names_requests:
            return ""  # named after this request's nonce: made for it (created may step with the clock)
        if self.newest_created is not None and ans.created < self.newest_created - CREATED_SKEW_S:
            return (
                f"the answer was created at {ans.created}, {self.newest_created - ans.created} s before an "
                f"earlier answer ({self.newest_created}): an answer replayed from a cache"
            )
        return ""

    def record(self, ans: DecodeAnswer) -> None:
        """Remember ``ans`` (judged or not): its id may not come again."""
        if ans.id is not None:
            self._seen[ans.id] = time.monotonic()
            while len(self._seen) > SEEN_IDS:
                self._seen.popitem(last=False)
        if ans.created is not None:
            self.newest_created = max(ans.created, self.newest_created or ans.created)

    def learn(self, pairs: list[tuple[DecodeAnswer, str]]) -> None:
        """From the baseline tick's (answer, request id) pairs: does the server name each answer
        after its request?"""
        self.names_requests = bool(pairs) and all(a.id is not None and rid in a.id for a, rid in pairs)


class CanaryMixin:
    """The canary's requests, judgement and outcome (methods of the gateway).

    Attributes:
        reference: the answer recorded by the baseline tick right after the suite passed
            (random-weight models), else ``None``.
        freshness: see :class:`Freshness`.
        canary_history: the latest :data:`CANARY_HISTORY` canaries, dicts with ``ok``,
            ``kind``, ``latency_s``, ``at`` (unix seconds) and ``cause``.
    """

    s: GatewaySettings
    key: Any
    reference: DecodeAnswer | None
    freshness: Freshness
    canary_history: deque[dict[str, Any]]
    _client: HealthClient | None
    last_engine_load: EngineLoad | None
    _prof: Any
    _suite_settings: Any

    def suite_settings(self) -> Any:  # the gateway's
        raise NotImplementedError

    def _red(self, text: str) -> str:
        return str(redact(text, self.key))

    def _profile(self) -> Any:
        if self._prof is None:
            from sparkpair_serving.profile import load_profile

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

    def _probe(self, mode: str, request_id: str, timeout_s: float) -> DecodeAnswer:
        from ..suite import decode_probe

        client = self._canary_client()
        if self._suite_settings is None:  # the profile loaded once, not on every canary
            self._suite_settings = self.suite_settings().model_copy(update={"profile": self._profile()})
        prompt, max_tokens, contains, _ = self.canary_request()
        # compared with a reference (a model without knowledge): the tokens with their logprobs,
        # so a near-tie parting is not taken for a wrong answer (checks.compare)
        extra = LOGPROB_FIELDS if contains is None else {}
        settings = self._suite_settings
        # Held to timeout_s whole: a stream checks its deadline only as each event comes, so one
        # whose events keep coming would end the tick after its deadline.
        return within(
            timeout_s,
            lambda: decode_probe(
                client,
                settings,
                prompt=prompt,
                max_tokens=max_tokens,
                timeout_s=timeout_s,
                fields={"request_id": request_id, "user": request_id, **extra},
                stream=mode == "stream",
            ),
            lambda: RequestTimeout(f"no whole answer within {timeout_s:.1f} s (the tick's deadline)"),
        )

    def _canary_client(self) -> HealthClient:
        """The canary's one HTTP client (its requests and its counter reads), made by the first tick."""
        if self._client is None:
            self._client = HealthClient(self.s.base_url, self.key, request_timeout_s=self.s.canary_timeout_s)
        return self._client

    def engine_load(self, timeout_s: float) -> EngineLoad | None:
        """The engine's counters now (``GET /metrics`` within ``timeout_s``), or ``None`` (no
        answer, not vLLM's metrics); never raises."""
        try:
            r = self._canary_client().get("/metrics", timeout_s=max(timeout_s, 0.05))
            return parse_engine_load(r.text) if r.status_code == 200 else None
        except Exception:  # noqa: BLE001 - no signal this tick: a slow answer stays a timeout
            return None

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
        if ref.steps is not None and ans.steps is not None:
            agree = compare_greedy(ref.steps, ans.steps, ("reference", "canary"))
            if not agree.ok:
                return (
                    f"greedy answer {ans.text[:80]!r} against the reference {ref.text[:80]!r}: "
                    f"{agree.problem}"
                )
            if agree.near_tie:
                return ""  # parted from the reference at a near-tie: noise, not a wrong answer
        if (ans.text, ans.finish_reason) != (ref.text, ref.finish_reason):
            return (
                f"greedy answer {ans.text[:80]!r} (finish_reason {ans.finish_reason!r}) differs from "
                f"{ref.text[:80]!r} (finish_reason {ref.finish_reason!r}) that the same request gave when "
                "the suite passed"
            )
        return ""

    def judge_tick(self, ans: DecodeAnswer, request_id: str) -> tuple[str, str]:
        """(kind, why) for one answer of a tick: ``("ok", "")``, or the first problem of:
        decoded, fresh, right. The answer is remembered either way (its id may not come again)."""
        try:
            if not ans.ok:
                return "answer", ans.problem
            stale = self.freshness.problem(ans, request_id)
            if stale:
                return "replayed", stale
            why = self.judge_canary(ans)
            return ("answer", why) if why else ("ok", "")
        finally:
            self.freshness.record(ans)

    def record_reference(self) -> str:
        """The baseline tick, right after the suite passed: records the reference answer
        (random-weight models: the non-streamed answer; the streamed one must equal it) and
        learns whether the server names answers after their requests (:meth:`Freshness.learn`).

        A baseline that is late on a busy engine (its counters moving: :func:`judge_slow`) is
        sent again, as a late tick on a busy engine is never a failure, for up to
        ``canary_busy_max_s`` in all; any other failure ends it.

        Returns ``""`` or why the baseline failed.
        """
        t0 = time.monotonic()
        while True:
            self.reference = None
            self.freshness = Freshness()
            res = self.canary_once(baseline=True)
            if res.ok:
                return ""
            if not (res.busy and time.monotonic() - t0 < self.s.canary_busy_max_s):
                self.reference = None
                return f"the reference canary failed: {res.cause}"

    def canary_once(self, baseline: bool = False) -> CanaryResult:
        """One tick (see the module docstring); never raises.

        Any exception (transport, a malformed answer, a bug) is a failed tick naming it. With
        ``baseline`` (:meth:`record_reference`), a random-weight model's non-streamed answer
        becomes the reference before it is judged.
        """
        from ..client import SuiteError
        from ..suite import NotReady

        t0 = time.monotonic()
        end = t0 + self.s.canary_timeout_s - progress_read_s(self.s)
        self._canary_client()  # made here, not raced for by the counter thread (httpx's is thread-safe)
        last_read = t0 + self.s.canary_timeout_s - min(TICK_MARGIN_S, self.s.canary_timeout_s / 10)
        watch = CounterWatch(self.engine_load, last_read, (end - t0) / 2)
        answers: list[DecodeAnswer] = []
        pairs: list[tuple[DecodeAnswer, str]] = []
        mode = CANARY_MODES[0]
        kind, cause = "ok", ""
        try:
            for mode in CANARY_MODES:
                left = end - time.monotonic()
                if left <= 0:
                    raise RequestTimeout(
                        f"the {mode_label(mode)} was not sent: the tick's deadline was spent"
                    )
                rid = nonce()
                ans = self._probe(mode, rid, left)
                answers.append(ans)
                pairs.append((ans, rid))
                if baseline and mode == "chat" and ans.ok and self.canary_request()[2] is None:
                    self.reference = ans
                kind, why = self.judge_tick(ans, rid)
                if why:
                    cause = f"{mode_label(mode)}: {why}"
                    if any(m in why for m in ENGINE_DEAD_MARKERS):
                        kind, cause = "engine_died", f"engine died: {cause}"
                    break
        except RequestTimeout as e:
            waited = time.monotonic() - t0
            # A read in flight may land until the last read's deadline.
            first, after = watch.stop(last_read - time.monotonic())
            # With one reading this tick, the last tick's stands in as before: the counters only
            # grow, so a move since it is still progress; the busy window stays bounded by
            # canary_busy_max_s.
            before = first if first is not None and first is not after else self.last_engine_load
            # An answer this tick got (the non-streamed one, before the stream ran out of time)
            # ran in the engine: a request ran during the wait even if no reading caught it.
            ran = max(watch.peak_running, 1.0 if any(a.ok for a in answers) else 0.0)
            busy, why = judge_slow(before, after, time.monotonic() - t0, ran)
            if after is None:
                why += f" (/metrics gave {watch.answered} of {watch.tried} reads this tick)"
            kind = "busy" if busy else "timeout"
            cause = (
                f"{'slow but busy' if busy else 'no whole answer'} within canary_timeout_s="
                f"{self.s.canary_timeout_s:g} s (waited {waited:.1f} s): {why}: {mode_label(mode)}: {e}"
            )
        except NotReady as e:  # AuthRefused: the key stopped working
            kind, cause = "auth", str(e)
        except SuiteError as e:
            kind = "server_gone"
            cause = (
                f"server went away: {mode_label(mode)}: {str(e).rstrip('.')}. vLLM stops its API server "
                "when the engine core dies, so the engine most likely died"
            )
        except Exception as e:  # noqa: BLE001 - no input may end the canary thread
            kind, cause = "defect", f"canary defect: {type(e).__name__}: {e}"
        latest = watch.stop()[1]
        if latest is not None:
            self.last_engine_load = latest
        if baseline and not cause:
            self.freshness.learn(pairs)
        return CanaryResult(not cause, kind, self._red(cause), time.monotonic() - t0, answers)
