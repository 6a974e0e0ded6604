"""Speculative-decoding checks of the health suite, in the :mod:`.checks` framework.

They apply when the profile sets ``server.speculation`` and skip otherwise:

* ``spec_active`` (first in the suite): the server's ``/metrics`` counts draft tokens, and one
  greedy request raises the count; it also records the counters the suite starts from.
* ``spec_batch_greedy``: ``concurrency`` greedy requests (default the profile's
  ``--max-num-seqs``) sent at once, so every verify step scores ``max_num_seqs * (k + 1)``
  tokens, the largest captured CUDA-graph size, give the same tokens as each request served
  alone, or part from them only at a near-tie (:mod:`.compare`); with a model that knows
  (``checks.semantic``), every answer also carries its expected text. Invalid text at the
  largest capture size fails here (docs/reference/speculation.md, "The capture-size cap of 12").
* ``spec_acceptance`` (last): accepted / drafted tokens over every request of the suite is at
  least the profile's ``checks.speculation.acceptance_floor``.

Counter names are vLLM's (``vllm/v1/spec_decode/metrics.py``, 0.32 and 0.33, proven in
``tests/stack/test_speculation_config.py`` and ``tests/vllm_real/test_speculation_ngram.py``).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from ..client import Deadline
from .base import (
    JSON,
    STATE_GENERATED,
    CheckContext,
    CheckSpec,
    Fail,
    Passed,
    Skip,
    base_chat,
    content_of,
    message_of,
    post_chat,
    raise_for_status,
)
from .compare import LOGPROB_FIELDS, compare_answers

SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
"""Short name -> Prometheus sample name of vLLM's speculation counters (the counter
``vllm:spec_decode_num_drafts`` is exposed as ``..._total``)."""


@dataclass(frozen=True)
class SpecCounters:
    """vLLM's speculation counters at one moment, summed over engines and models (counts)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float

    def minus(self, start: SpecCounters) -> SpecCounters:
        """Counts since ``start``."""
        return SpecCounters(
            self.drafts - start.drafts,
            self.draft_tokens - start.draft_tokens,
            self.accepted_tokens - start.accepted_tokens,
        )

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (0..1); ``None`` with no draft token."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens emitted per verify step, ``1 + accepted / drafts`` (vLLM's "mean acceptance
        length", ``vllm/v1/spec_decode/metrics.py``); ``None`` with no draft."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    def implausible(self, start: SpecCounters | None = None) -> str | None:
        """Why these counters (and the counts since ``start``) cannot be believed, else ``None``:
        a counter missing or not a finite number, a negative count, a counter that went down
        since ``start`` (the server restarted, or lies), more tokens accepted than drafted."""
        for key, name in SPEC_COUNTERS.items():
            v = getattr(self, key)
            if not math.isfinite(v):
                return f"{name} is {v} (missing or not a number); wanted a finite count"
            if v < 0:
                return f"{name} is {v:g}; wanted a count >= 0"
            if start is not None and v < getattr(start, key):
                return (
                    f"{name} went down from {getattr(start, key):g} to {v:g} during the suite "
                    "(the server restarted, or its counters are wrong); wanted a counter that only grows"
                )
        d = self if start is None else self.minus(start)
        if d.accepted_tokens > d.draft_tokens:
            return (
                f"{d.accepted_tokens:g} tokens accepted of {d.draft_tokens:g} drafted; wanted "
                "accepted <= drafted (the counters disagree)"
            )
        return None

    def as_dict(self) -> dict[str, Any]:
        """Counts, rate and mean accepted length, for evidence and metrics."""
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
        }


def parse_spec_counters(text: str) -> SpecCounters | None:
    """The speculation counters in Prometheus text, or ``None`` when the server exports none
    (vLLM registers them only when speculative decoding is configured).

    Raises:
        ValueError: the text is not Prometheus exposition format.
    """
    wanted = {v: k for k, v in SPEC_COUNTERS.items()}
    got: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is not None:
                got[key] = got.get(key, 0.0) + float(sample.value)
    if not got:
        return None
    nan = float("nan")  # a counter missing beside the others: SpecCounters.implausible names it
    return SpecCounters(got.get("drafts", nan), got.get("draft_tokens", nan), got.get("accepted_tokens", nan))


def read_spec_counters(ctx: CheckContext, deadline: Deadline) -> SpecCounters | None:
    """``GET /metrics`` and parse the speculation counters.

    Raises:
        Fail: ``/metrics`` answers other than 200 or with text that is not Prometheus format.
        ServerGone, RequestTimeout: from the client.
    """
    r = ctx.client.get("/metrics", timeout_s=min(ctx.request_timeout_s, deadline.left()))
    raise_for_status(r, "GET /metrics")
    try:
        return parse_spec_counters(r.text)
    except ValueError as e:
        raise Fail(f"GET /metrics: not Prometheus text ({e}): {r.text[:200]!r}") from None


def _speculation(ctx: CheckContext) -> tuple[str, int]:
    spec = ctx.profile.server.speculation
    if spec is None:
        raise Skip(f"profile {ctx.profile.name} sets no server.speculation")
    return spec.method, spec.num_speculative_tokens


STATE_START = "spec_counters_at_start"
"""``CheckContext.state`` key: the counters ``spec_active`` read before the suite's requests."""

STATE_RESULT = "spec_acceptance"
"""``CheckContext.state`` key: the acceptance result of ``spec_acceptance`` (a dict)."""

ACTIVE_PROMPT = "Repeat after me, twice: red green blue red green blue red green blue red green blue."
"""A prompt whose continuation repeats it, so prompt-lookup (ngram) drafting finds matches too."""


def check_spec_active(ctx: CheckContext, deadline: Deadline) -> Passed:
    """The server exports speculation counters and one greedy request raises the draft count."""
    method, k = _speculation(ctx)
    want = ctx.profile.checks.speculation.min_draft_tokens
    before = read_spec_counters(ctx, deadline)
    if before is None:
        raise Fail(
            f"/metrics has no {SPEC_COUNTERS['draft_tokens']}; the profile sets speculation "
            f"method {method!r} with k={k}, so the server must count draft tokens "
            "(is --speculative-config missing from the serve command?)",
            {"method": method, "k": k},
        )
    ctx.state[STATE_START] = before
    body = base_chat(ctx, prompt=ACTIVE_PROMPT, max_tokens=max(ctx.profile.checks.max_tokens, 48))
    post_chat(ctx, body, deadline, "greedy request for the draft count")
    after = read_spec_counters(ctx, deadline)
    delta = (after or before).minus(before)
    ev = {"method": method, "k": k, "before": before.as_dict(), "delta": delta.as_dict()}
    bad = before.implausible() or (after.implausible(before) if after is not None else None)
    if bad is not None:
        raise Fail(f"/metrics speculation counters: {bad}", ev)
    if not delta.draft_tokens >= want:
        raise Fail(
            f"one greedy request raised {SPEC_COUNTERS['draft_tokens']} by {delta.draft_tokens:g}; "
            f"wanted at least {want} (profile checks.speculation.min_draft_tokens): speculation "
            f"method {method!r} is configured but not drafting",
            ev,
        )
    return Passed(f"{method} k={k} drafting: {delta.draft_tokens:g} draft tokens for one request", ev)


BATCH_PROMPTS = (
    "List three colours.",
    "Count from one to ten.",
    "Name a large city.",
    "Say hello to the pair of Sparks.",
    "What is two plus two?",
    "Describe the sea in one sentence.",
    "Spell the word spark.",
    "Name three animals.",
)
"""Prompts of the batch check for a model without knowledge, one per concurrent request
(cycled past eight)."""

BATCH_QUESTIONS = (
    ("What is 17 + 25? Answer with the number only.", "42"),
    ("What is the capital of France? Answer in one word.", "Paris"),
    ("What is 9 times 8? Answer with the number only.", "72"),
    ("What is the chemical symbol for gold? Answer with the symbol only.", "Au"),
    ("How many days are in a week? Answer with the number only.", "7"),
    ("What is the capital of Japan? Answer in one word.", "Tokyo"),
    ("What is 100 minus 37? Answer with the number only.", "63"),
    ("Which planet is known as the red planet? Answer in one word.", "Mars"),
)
"""(prompt, expected text) of the batch check where the model has knowledge
(``checks.semantic.enabled``): each batched answer must also contain its answer, so invalid
text at the largest capture size fails even where it starts after a near-tie."""


def check_spec_batch_greedy(ctx: CheckContext, deadline: Deadline) -> Passed:
    """``n`` concurrent greedy requests give each the tokens it gets alone, or part from them only
    at a near-tie (:func:`~sparkpair_health.checks.compare.compare_greedy`); with a model that
    knows, each answer, alone and batched, also contains its expected text (n = concurrency or
    ``--max-num-seqs``; verify steps of ``n * (k + 1)`` tokens)."""
    method, k = _speculation(ctx)
    sc = ctx.profile.checks.speculation
    n = sc.concurrency or ctx.profile.server.max_num_seqs() or 4
    knows = ctx.profile.checks.semantic.enabled
    prompts: list[tuple[str, str | None]] = [
        (
            BATCH_QUESTIONS[i % len(BATCH_QUESTIONS)]
            if knows
            else (BATCH_PROMPTS[i % len(BATCH_PROMPTS)] + ("" if i < 8 else f" ({i})"), None)
        )
        for i in range(n)
    ]
    bodies = [{**base_chat(ctx, prompt=p, max_tokens=sc.max_tokens), **LOGPROB_FIELDS} for p, _ in prompts]

    def answer(i: int) -> JSON:
        return post_chat(ctx, bodies[i], deadline, f"greedy request {i}")

    alone = [answer(i) for i in range(n)]
    with ThreadPoolExecutor(max_workers=n) as pool:
        together = list(pool.map(answer, range(n)))
    verify = n * (k + 1)
    text = [content_of(message_of(d)[0]) for d in alone]
    ev: dict[str, Any] = {
        "concurrency": n,
        "k": k,
        "verify_tokens": verify,
        "alone": [t[:120] for t in text],
        "batched": [content_of(message_of(d)[0])[:120] for d in together],
    }
    probs: list[str] = []
    ties: list[str] = []
    ev["differences"] = {}
    for i in range(n):
        agree = compare_answers(alone[i], together[i], ("alone", "batched"))
        if agree.evidence is not None:
            ev["differences"][str(i)] = agree.evidence
        if not agree.ok:
            probs.append(f"request {i}: {agree.problem}")
        elif agree.identical and text[i] != content_of(message_of(together[i])[0]):
            probs.append(f"request {i}: the same tokens alone and batched but different text")
        elif agree.near_tie:
            ties.append(f"request {i} at token {agree.position}")
        want = prompts[i][1]
        for where, d in (("alone", alone[i]), ("batched", together[i])):
            got = content_of(message_of(d)[0])
            if want is not None and want.lower() not in got.lower():
                probs.append(f"request {i} ({where}): answer {got[:60]!r} lacks {want!r}")
    if probs:
        raise Fail(
            f"{len(probs)} problem(s) with {n} greedy requests sent together (verify steps of {n} x "
            f"({k} + 1) = {verify} tokens) against each alone: " + "; ".join(probs[:4]),
            {**ev, "problems": probs},
        )
    if not any(text):
        raise Fail(f"all {n} greedy requests gave empty text; wanted text", ev)
    tie = f"; parted at a near-tie: {', '.join(ties)}" if ties else ""
    judged = ", each with its expected answer" if knows else ""
    return Passed(
        f"{n} concurrent greedy requests agree with each alone{judged} ({method}, verify steps of "
        f"{verify} tokens){tie}",
        ev,
    )


def acceptance_floor(ctx: CheckContext) -> tuple[float, str]:
    """(floor, how it was set) of ``spec_acceptance``.

    With the profile's ``chat_acceptance`` and ``tool_acceptance``, derived from the suite's own
    mix: ``floor_margin`` x the two rates weighted by the completion tokens the suite's chat and
    tool-call requests generated (:data:`~sparkpair_health.checks.base.STATE_GENERATED`); else
    the profile's ``acceptance_floor``.
    """
    sc = ctx.profile.checks.speculation
    mix = ctx.state.get(STATE_GENERATED) or {}
    chat, tool = int(mix.get("chat", 0)), int(mix.get("tool", 0))
    if sc.chat_acceptance is None or sc.tool_acceptance is None or chat + tool == 0:
        return sc.acceptance_floor, "the profile's checks.speculation.acceptance_floor"
    expected = (chat * sc.chat_acceptance + tool * sc.tool_acceptance) / (chat + tool)
    return sc.floor_margin * expected, (
        f"floor_margin {sc.floor_margin:g} x {expected:.3f} expected on the suite's mix: {chat} chat tokens "
        f"at {sc.chat_acceptance:g}, {tool} tool-call tokens at {sc.tool_acceptance:g} (checks.speculation)"
    )


def check_spec_acceptance(ctx: CheckContext, deadline: Deadline) -> Passed:
    """Acceptance rate (accepted / drafted tokens) over the suite's requests >= the profile's floor."""
    method, k = _speculation(ctx)
    floor, derived = acceptance_floor(ctx)
    now = read_spec_counters(ctx, deadline)
    if now is None:
        raise Fail(
            f"/metrics has no {SPEC_COUNTERS['draft_tokens']}; the profile sets speculation {method!r}"
        )
    start = ctx.state.get(STATE_START)
    since = "the suite's requests" if isinstance(start, SpecCounters) else "the server's start"
    delta = now.minus(start) if isinstance(start, SpecCounters) else now
    ev = {"method": method, "k": k, "floor": floor, "floor_from": derived, "over": since, **delta.as_dict()}
    bad = now.implausible(start if isinstance(start, SpecCounters) else None)
    if bad is not None:
        ctx.state[STATE_RESULT] = {**ev, "acceptance_rate": None}
        raise Fail(f"/metrics speculation counters: {bad}", ev)
    ctx.state[STATE_RESULT] = ev
    rate = delta.acceptance_rate
    if rate is None:
        raise Fail(f"no draft tokens over {since}; speculation {method!r} k={k} never drafted", ev)
    length = delta.mean_accepted_length
    counts = f"{delta.accepted_tokens:g} of {delta.draft_tokens:g} draft tokens accepted"
    if rate < floor:
        raise Fail(
            f"acceptance rate {rate:.3f} over {since} ({counts}) is below the floor {floor:.3f} ({derived})",
            ev,
        )
    return Passed(
        f"acceptance rate {rate:.3f} >= floor {floor:.3g} over {since} ({counts}; "
        f"mean accepted length {length:.2f})"
        if length is not None
        else f"acceptance rate {rate:.3f}",
        ev,
    )


SPEC_FIRST: list[CheckSpec] = [
    CheckSpec(
        "spec_active",
        "speculation on: /metrics counts draft tokens for a request",
        "speculation silently off (serve command without --speculative-config)",
        check_spec_active,
        90,
    ),
]
"""Runs before every other check: it records the counters the acceptance rate starts from."""

SPEC_LAST: list[CheckSpec] = [
    CheckSpec(
        "spec_batch_greedy",
        "concurrent greedy requests at the largest capture size agree with each alone (near-ties aside)",
        "invalid text at large CUDA-graph capture sizes (docs/reference/speculation.md)",
        check_spec_batch_greedy,
        300,
    ),
    CheckSpec(
        "spec_acceptance",
        "acceptance rate over the suite's requests >= profile floor",
        "acceptance collapse (tool grammars: 0.73 -> 0.15-0.22, docs/reference/speculation.md)",
        check_spec_acceptance,
        30,
    ),
]
"""Runs after every other check, so the acceptance rate covers the whole suite."""
