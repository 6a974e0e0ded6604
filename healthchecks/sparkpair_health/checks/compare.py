"""One comparison of two greedy generations: token by token, tolerant of numerics, not of garbage.

A real pair does not give bit-identical greedy text whatever the batch: a request alone and
the same request in a batch run different kernel configurations (docs/reference/numerics.md,
"Batch noise"), and where the model's two best tokens are nearly tied, the last bits decide.
So every check that compares two greedy generations (``determinism``, ``dsv4.greedy_sanity``,
``stream``, ``dsv4.stream_equality``, the thinking and tool checks' streamed-vs-non-streamed
comparison, ``spec_batch_greedy``, the gateway's reference canary) asks for
``logprobs: true, top_logprobs: 5`` and judges with :func:`compare_greedy`, the rule vLLM's own
model tests use (``tests/models/utils.py`` ``check_logprobs_close``), with a gap bound added:

- the token sequences are walked together; where they first differ (position ``p``), each
  side's token must be among the other side's :data:`TOP_LOGPROBS` alternatives at ``p``, and
  on each side the logprob gap between its own token and the other side's must be at most
  :data:`TIE_GAP` nats (a near-tie); then the comparison stops (the texts diverge from there);
- anything else (a token outside the other's top 5, a gap above the bound, one side ending
  where the other goes on) is a difference that is not noise, named with the position, both
  tokens and their logprobs.

Runs in the slim client: no vLLM, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOP_LOGPROBS = 5
"""Alternatives asked per position (``top_logprobs``), as vLLM's model tests compare
(``check_logprobs_close`` with ``num_logprobs=5``)."""

TIE_GAP = 1.0
"""Largest logprob gap, nats, between the two tokens at the first differing position that
still counts as a near-tie (each side's own token minus the other side's, on each side).
Provisional, from public bf16 measurements until owners' GB10 reports give the pair's own
(docs/reference/numerics.md, "The tie bound"): batch shape alone moves 5-10 % of tokens' logprobs
by more than 0.1 nats on 0.5-7B models in bf16, and a bf16 logit of magnitude 16-32 moves in
steps of 0.125, so flips happen at gaps up to a few tenths; 1.0 nats (the runner-up at least
37 % as likely as the chosen token) is that with a margin of about 2, while garbage (a token
the model does not consider) lies outside the top 5 or several nats down."""

LOGPROB_FIELDS: dict[str, Any] = {"logprobs": True, "top_logprobs": TOP_LOGPROBS}
"""Request fields that make an OpenAI-compatible server return what :func:`compare_greedy` reads."""


@dataclass(frozen=True)
class Step:
    """One generated token: its text (as the server names it), its logprob (nats, ``None`` when
    the server gave none) and the top alternatives ``((token, logprob), ...)``, best first."""

    token: str
    logprob: float | None
    top: tuple[tuple[str, float], ...]

    def logprob_of(self, token: str) -> float | None:
        """The logprob of ``token`` at this position: its own, or from the alternatives; ``None``
        when it is not among them."""
        if token == self.token and self.logprob is not None:
            return self.logprob
        return next((lp for t, lp in self.top if t == token), None)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def steps_from(entries: Any) -> list[Step] | None:
    """:class:`Step` list from an OpenAI ``logprobs.content`` list; ``None`` when it is not one
    (a server that returned no logprobs)."""
    if not isinstance(entries, list):
        return None
    out: list[Step] = []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("token"), str):
            return None
        top = []
        for alt in e.get("top_logprobs") or []:
            lp = _num(alt.get("logprob")) if isinstance(alt, dict) else None
            if lp is not None and isinstance(alt.get("token"), str):
                top.append((alt["token"], lp))
        out.append(Step(e["token"], _num(e.get("logprob")), tuple(top)))
    return out


def steps_of_answer(answer: Any) -> list[Step] | None:
    """The generated tokens of a non-streamed chat completion (``choices[0].logprobs.content``)."""
    try:
        return steps_from(answer["choices"][0]["logprobs"]["content"])
    except (KeyError, IndexError, TypeError):
        return None


def steps_of_chunks(chunks: Sequence[dict[str, Any]]) -> list[Step] | None:
    """The generated tokens of a streamed chat completion: every chunk's
    ``choices[0].logprobs.content`` joined in order (vLLM sends a chunk for every token when
    logprobs are asked, even one whose text the parser holds back:
    ``chat_completion/serving.py``, 0.32 and 0.33); ``None`` when no chunk carries logprobs."""
    out: list[Step] = []
    seen = False
    for c in chunks:
        for ch in c.get("choices") or []:
            if (
                not isinstance(ch, dict)
                or ch.get("index", 0) != 0
                or not isinstance(ch.get("logprobs"), dict)
            ):
                continue
            got = steps_from(ch["logprobs"].get("content"))
            if got is None:
                return None
            seen = True
            out += got
    return out if seen else None


@dataclass(frozen=True)
class Agreement:
    """What :func:`compare_greedy` found.

    Attributes:
        ok: the same tokens, or a first difference that is a near-tie.
        identical: the same tokens throughout (lengths too).
        position: the first differing position (token index), ``None`` when identical.
        compared: tokens the two agree on before the first difference (all when identical).
        problem: ``""`` when ok; else what differs and why it is not noise.
        evidence: the difference (position, tokens, logprobs, gaps) for reports.
    """

    ok: bool
    identical: bool
    position: int | None
    compared: int
    problem: str = ""
    evidence: dict[str, Any] | None = None

    @property
    def near_tie(self) -> bool:
        """A first difference that was judged noise."""
        return self.ok and not self.identical

    def note(self, labels: tuple[str, str]) -> str:
        """A short line for a pass message: ``""`` when identical."""
        if self.identical or self.evidence is None:
            return ""
        e = self.evidence
        return (
            f"{labels[0]} and {labels[1]} part at token {self.position} on a near-tie "
            f"({e[labels[0]]['token']!r} vs {e[labels[1]]['token']!r}, gaps {e['gaps'][0]:.3f} and "
            f"{e['gaps'][1]:.3f} nats <= {TIE_GAP:g})"
        )


def _fmt(lp: float | None) -> str:
    return "none" if lp is None else f"{lp:.3f}"


def compare_greedy(
    a: Sequence[Step],
    b: Sequence[Step],
    labels: tuple[str, str] = ("first", "second"),
    *,
    tie_gap: float = TIE_GAP,
) -> Agreement:
    """Compare two greedy generations token by token (see the module docstring).

    Args:
        a, b: the generated tokens of each (:func:`steps_of_answer`, :func:`steps_of_chunks`).
        labels: how the message names each side.
        tie_gap: the near-tie bound, nats (default :data:`TIE_GAP`).

    Returns:
        the :class:`Agreement`; never raises.
    """
    la, lb = labels
    n = min(len(a), len(b))
    p = next((i for i in range(n) if a[i].token != b[i].token), None)
    if p is None:
        if len(a) == len(b):
            return Agreement(True, True, None, n)
        longer, name, other = (a, la, lb) if len(a) > len(b) else (b, lb, la)
        nxt = longer[n]
        return Agreement(
            False,
            False,
            n,
            n,
            f"{other} ends after {n} tokens where {name} goes on with {nxt.token!r} (logprob "
            f"{_fmt(nxt.logprob)}): a difference in length, not a near-tie",
            {"position": n, name: {"token": nxt.token, "logprob": nxt.logprob}, other: {"ended": True}},
        )
    sa, sb = a[p], b[p]
    # each side: its own token's logprob, and the other side's token's logprob there
    own_a, alt_a = sa.logprob_of(sa.token), sa.logprob_of(sb.token)
    own_b, alt_b = sb.logprob_of(sb.token), sb.logprob_of(sa.token)
    gaps = (
        None if own_a is None or alt_a is None else own_a - alt_a,
        None if own_b is None or alt_b is None else own_b - alt_b,
    )
    ev = {
        "position": p,
        la: {"token": sa.token, "logprob": own_a, "other_token_logprob": alt_a, "top": list(sa.top)},
        lb: {"token": sb.token, "logprob": own_b, "other_token_logprob": alt_b, "top": list(sb.top)},
        "gaps": [g if g is not None else float("nan") for g in gaps],
        "tie_gap": tie_gap,
    }
    head = (
        f"token {p} differs: {la} {sa.token!r} (logprob {_fmt(own_a)}; {sb.token!r} there: "
        f"{_fmt(alt_a)}), {lb} {sb.token!r} (logprob {_fmt(own_b)}; {sa.token!r} there: {_fmt(alt_b)})"
    )
    why = []
    if alt_a is None:
        why.append(f"{sb.token!r} is not among {la}'s top {TOP_LOGPROBS} at token {p}")
    if alt_b is None:
        why.append(f"{sa.token!r} is not among {lb}'s top {TOP_LOGPROBS} at token {p}")
    for side, g in zip((la, lb), gaps, strict=True):
        if g is not None and not g <= tie_gap:
            why.append(f"{side}'s gap {g:.3f} nats is above the near-tie bound {tie_gap:g}")
    if why:
        return Agreement(False, False, p, p, f"{head}: not a near-tie ({'; '.join(why)})", ev)
    return Agreement(True, False, p, p, "", ev)


def missing_logprobs(label: str) -> Agreement:
    """The :class:`Agreement` of a comparison one side of which carried no logprobs."""
    return Agreement(
        False,
        False,
        None,
        0,
        f"the {label} answer carries no logprobs.content although the request asked "
        f"logprobs=true, top_logprobs={TOP_LOGPROBS}; wanted the generated tokens with their logprobs",
    )


def compare_answers(
    a: Any, b: Any, labels: tuple[str, str] = ("first", "second"), *, tie_gap: float = TIE_GAP
) -> Agreement:
    """:func:`compare_greedy` of two non-streamed chat completions (their ``logprobs.content``)."""
    sa, sb = steps_of_answer(a), steps_of_answer(b)
    if sa is None or sb is None:
        return missing_logprobs(labels[0] if sa is None else labels[1])
    return compare_greedy(sa, sb, labels, tie_gap=tie_gap)


def compare_stream(answer: Any, chunks: Sequence[dict[str, Any]], *, tie_gap: float = TIE_GAP) -> Agreement:
    """:func:`compare_greedy` of a non-streamed answer (``non-streamed``) and the same request
    streamed (``streamed``: its chunks' logprobs joined)."""
    sa, sb = steps_of_answer(answer), steps_of_chunks(chunks)
    if sa is None or sb is None:
        return missing_logprobs("non-streamed" if sa is None else "streamed")
    return compare_greedy(sa, sb, ("non-streamed", "streamed"), tie_gap=tie_gap)


READ_FIELDS = (("content", "content"), ("reasoning", "reasoning"), ("reasoning_content", "reasoning"))
"""(delta key, field) a stream's text is read from (vLLM names reasoning ``reasoning``; older
servers ``reasoning_content``)."""


def stream_text_before(chunks: Sequence[dict[str, Any]], position: int) -> dict[str, str]:
    """What a stream said before its token ``position``: ``content``, ``reasoning`` and the tool
    calls' ``arguments`` joined from the chunks whose tokens (their ``logprobs.content``) all lie
    before it. Where a stream and the non-streamed answer part at a near-tie, each field of the
    answer must begin with this (the parser saw the same tokens up to there)."""
    out = {"content": "", "reasoning": "", "arguments": ""}
    seen = 0
    for c in chunks:
        for ch in c.get("choices") or []:
            if not isinstance(ch, dict) or ch.get("index", 0) != 0:
                continue
            lp = ch.get("logprobs")
            n = len(lp.get("content") or []) if isinstance(lp, dict) else 0
            if seen + n > position:
                return out
            seen += n
            d = ch.get("delta")
            if not isinstance(d, dict):
                continue
            for key, fld in (
                ("content", "content"),
                ("reasoning", "reasoning"),
                ("reasoning_content", "reasoning"),
            ):
                if isinstance(d.get(key), str):
                    out[fld] += d[key]
            for tc in d.get("tool_calls") or []:
                args = ((tc or {}).get("function") or {}).get("arguments") if isinstance(tc, dict) else None
                if isinstance(args, str):
                    out["arguments"] += args
    return out


def prefix_problems(
    where: str, agreement: Agreement, chunks: Sequence[dict[str, Any]], fields: dict[str, str]
) -> list[str]:
    """After a near-tie parting at ``agreement.position``: the non-streamed ``fields``
    (``content``, ``reasoning``, ``arguments``) that do not begin with what the stream said
    before the parting (:func:`stream_text_before`), named."""
    if agreement.position is None:
        return []
    said = stream_text_before(chunks, agreement.position)
    out = []
    for fld, text in fields.items():
        want = said.get(fld, "")
        if not text.startswith(want):
            k = next((i for i, (x, y) in enumerate(zip(text, want, strict=False)) if x != y), len(text))
            out.append(
                f"{where} streamed {fld} before the near-tie at token {agreement.position} "
                f"({want[max(0, k - 20) : k + 20]!r} at char {k}) is not how the non-streamed {fld} "
                f"begins ({text[max(0, k - 20) : k + 20]!r})"
            )
    return out
