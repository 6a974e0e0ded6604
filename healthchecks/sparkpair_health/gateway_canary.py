"""The gateway's canary: one greedy completion every ``canary_interval_s``, judged.

The canary *is* the readiness gate's decode test (:func:`sparkpair_health.suite.decode_probe`,
the same request and the same judgement of the answer, :func:`~sparkpair_health.suite.
judge_decode`), not a second copy; this module only adds what a repeated probe needs: which
answer is right (the profile's expected answer, or the reference recorded when the suite
passed) and how a failure reads in ``/readyz`` (engine died, wedged, server gone).

:class:`CanaryMixin` is a part of :class:`sparkpair_health.gateway.Gateway` (which holds the
settings, the key and the state these methods read), kept apart so each file reads as one
concern. Runs in the slim client.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from .apikey import redact
from .client import ENGINE_DEAD_MARKERS, HealthClient
from .gateway_settings import GatewaySettings
from .suite import DecodeAnswer

CANARY_HISTORY = 50
"""Canary results the gateway keeps for the status page (the newest last); one an interval,
50 cover 12.5 minutes at the default 15 s."""


class CanaryMixin:
    """The canary's request, probe and judgement (methods of the gateway).

    Attributes:
        reference: the answer recorded right after the suite passed (random-weight models),
            else ``None``.
        canary_history: the latest :data:`CANARY_HISTORY` canaries, dicts with ``ok``,
            ``latency_s``, ``at`` (unix seconds) and ``cause``.
    """

    s: GatewaySettings
    key: Any
    reference: DecodeAnswer | None
    canary_history: deque[dict[str, Any]]
    _client: HealthClient | None
    _prof: Any
    _suite_settings: Any

    def suite_settings(self) -> Any:  # the gateway's
        raise NotImplementedError

    def _red(self, text: str) -> str:
        return str(redact(text, self.key))

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
