"""Logprobs for the fault servers, shaped as vLLM's (``choices[0].logprobs.content``), and batch noise.

A fault server's answer is a list of tokens (its stream's pieces, one token each). Every token
gets a confident logprob (:data:`SURE`) and four alternatives well below it, except at the
answer's tie position (:func:`tie_position`), where the model's two best tokens are nearly
tied: the token and its :func:`variant` at :data:`TIE` and :data:`TIE - 0.01`.

:class:`BatchNoise` decides, per answer, what a real pair's batch does to it: served alone,
nothing; served while another request is in flight, every other such answer to the same request takes
the variant at the tie (``noise="flip"``, its logprobs showing the tie from the other side), or a token the
model does not consider, outside the top 5 (``noise="garbage"``).
"""

from __future__ import annotations

import json
import threading
from typing import Any

SURE = -0.02
"""Logprob (nats) of a token the model is sure of."""

TIE = -0.69
"""Logprob of the chosen token at the tie position; its variant gets ``TIE - 0.01`` (a gap of
0.01 nats, far under the suite's bound)."""

GARBAGE = "\u00a7\u00a7junk"
"""The token ``noise="garbage"`` puts at the tie position, after the original's leading
spaces (never among the top 5)."""

NOISES = ("flip", "garbage")


def variant(token: str) -> str:
    """The runner-up at a tie: the token with its first letter's case swapped (or a period added)."""
    for i, ch in enumerate(token):
        if ch.isalpha():
            return token[:i] + ch.swapcase() + token[i + 1 :]
    return token + "."


def tie_position(tokens: list[str]) -> int | None:
    """Where an answer's near-tie lies: its middle token (``None`` for no token)."""
    return (len(tokens) - 1) // 2 if tokens else None


def _entry(token: str, lp: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": lp,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top],
    }


def entries(tokens: list[str], original: list[str]) -> list[dict[str, Any]]:
    """``logprobs.content`` for ``tokens`` (as served), given the ``original`` tokens of the
    answer: at the tie position the served token is the original, its variant, or garbage."""
    out = []
    tie = tie_position(original)
    for i, tok in enumerate(tokens):
        others = [(f"{tok}~{j}", -4.0 - j) for j in range(1, 4)]
        if i == tie:
            o, v = original[i], variant(original[i])
            if tok == o:
                out.append(_entry(tok, TIE, [(o, TIE), (v, TIE - 0.01), *others]))
            elif tok == v:
                out.append(_entry(tok, TIE, [(v, TIE), (o, TIE - 0.01), *others]))
            else:  # garbage: the model's own top 5 lies elsewhere (vLLM lists the sampled token first)
                out.append(_entry(tok, -11.0, [(tok, -11.0), (o, TIE), (v, TIE - 0.01), *others[:2]]))
        else:
            out.append(_entry(tok, SURE, [(tok, SURE), *others, (f"{tok}~x", -6.0)]))
    return out


PER_REQUEST = ("stream", "stream_options", "request_id", "user", "logprobs", "top_logprobs")
"""Body fields that make no other request (streamed or not, whatever its nonce)."""


def request_key(body: dict[str, Any]) -> str:
    """What identifies a request across its repeats: its body less :data:`PER_REQUEST`."""
    return json.dumps({k: v for k, v in body.items() if k not in PER_REQUEST}, sort_keys=True, default=str)


class BatchNoise:
    """What a batch does to greedy answers (see the module docstring).

    Args:
        noise: ``None`` (bit-identical, what vLLM's CPU build gives), ``"flip"`` or ``"garbage"``.
        hold_s: seconds every answer is held, so that requests overlap.
    """

    def __init__(self, noise: str | None = None, hold_s: float = 0.05) -> None:
        if noise not in (None, *NOISES):
            raise ValueError(f"noise={noise!r}; wanted None or one of {NOISES}")
        self.noise = noise
        self.hold_s = hold_s
        self.in_flight = 0
        self.arrivals = 0
        self.crowded_answers: dict[str, int] = {}
        self.changed = 0
        """Answers the noise changed (a test wants > 0: the noise was really injected)."""
        self.lock = threading.Lock()

    def enter(self) -> tuple[bool, int]:
        """A request arrives; the ticket it returns goes to :meth:`leave`."""
        with self.lock:
            company = self.in_flight > 0
            self.in_flight += 1
            self.arrivals += 1
            return company, self.arrivals

    def leave(
        self, ticket: tuple[bool, int], tokens: list[str], body: dict[str, Any] | None = None
    ) -> list[str]:
        """The request (``body``, its :meth:`enter` ``ticket``) is answered: ``tokens`` as the
        batch leaves them. An answer is crowded when another request was in flight at any time
        during its own (at its arrival, arriving during it, or at its answer) -- not only at the
        instant it is answered, which a starved load generator can miss. Crowded answers to the
        same request (:func:`request_key`) alternate: unchanged, changed, ..."""
        company, arrival = ticket
        with self.lock:
            crowded = company or self.arrivals > arrival or self.in_flight > 1
            self.in_flight -= 1
            if not crowded or self.noise is None or not tokens:
                return tokens
            key = request_key(body or {})
            self.crowded_answers[key] = n = self.crowded_answers.get(key, 0) + 1
            if n % 2:
                return tokens
            self.changed += 1
        out = list(tokens)
        p = tie_position(tokens)
        assert p is not None
        lead = tokens[p][: len(tokens[p]) - len(tokens[p].lstrip())]
        out[p] = variant(tokens[p]) if self.noise == "flip" else lead + GARBAGE
        return out
