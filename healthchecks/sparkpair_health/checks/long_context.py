"""Long prompts: near and over ``max_model_len`` (``long_prompt_*``) and the needle probe of
the model checks (``dsv4.long_context``: exact retrieval with the needle at the very start,
the middle and the very end of prompts of exactly chosen lengths -- every residue modulo 4,
and one token either side of multiples of 64 and 128 -- each length asserted from ``usage``).

The lengths follow DeepSeek-V4's attention: it compresses its KV cache at ratios 4 and 128
and DSpark aligns its sliding-window index to 64
(docs/reference/vllm-code-paths.md#kv-compression-and-alignment), so an off-by-one at a block
edge shows at one length residue or one side of such a multiple.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

from ..client import Deadline, RequestTimeout, ServerGone, SuiteError, engine_dead_in
from .base import (
    NO_THINKING,
    CheckContext,
    Fail,
    Passed,
    Skip,
    answer_json,
    content_of,
    message_of,
    model_checks_reason,
    post_chat,
    raise_for_status,
    short,
    user_chat,
)


def _max_model_len(ctx: CheckContext, deadline: Deadline) -> int:
    if "max_model_len" not in ctx.state:
        r = ctx.client.get("/v1/models", timeout_s=min(ctx.request_timeout_s, deadline.left()))
        raise_for_status(r, "GET /v1/models")
        for m in answer_json(r, "GET /v1/models").get("data") or []:
            if m.get("id") == ctx.model and isinstance(m.get("max_model_len"), int):
                ctx.state["max_model_len"] = m["max_model_len"]
    return int(ctx.state.get("max_model_len") or ctx.profile.server.max_model_len)


def _prompt_ids(ctx: CheckContext, deadline: Deadline, n: int) -> list[int]:
    """``n`` token ids of ordinary text, from the server's own ``/tokenize``."""
    if "unit_ids" not in ctx.state:
        r = ctx.client.post(
            "/tokenize",
            {
                "model": ctx.model,
                "prompt": "The quick brown fox jumps over the lazy dog. ",
                "add_special_tokens": False,
            },
            timeout_s=min(ctx.request_timeout_s, deadline.left()),
        )
        raise_for_status(r, "POST /tokenize")
        ids = answer_json(r, "POST /tokenize").get("tokens") or []
        if not ids or not all(isinstance(t, int) for t in ids):
            raise Fail(f"POST /tokenize returned {short(ids)} for an ordinary sentence; wanted token ids")
        ctx.state["unit_ids"] = ids
    unit: list[int] = ctx.state["unit_ids"]
    return (unit * (n // len(unit) + 1))[:n]


def check_long_prompt_accepted(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A prompt close to max_model_len is served and usage.prompt_tokens equals its length."""
    spec = ctx.profile.checks.long_prompt
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables long-prompt checks")
    mml = _max_model_len(ctx, deadline)
    n = spec.accept_tokens or (mml - spec.margin_tokens)
    max_tokens = min(4, mml - n)
    if max_tokens < 1:
        raise Fail(f"checks.long_prompt.accept_tokens={n} leaves no room below max_model_len={mml}")
    body = {
        "model": ctx.model,
        "prompt": _prompt_ids(ctx, deadline, n),
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }
    r = ctx.client.post("/v1/completions", body, timeout_s=min(ctx.long_prompt_timeout_s, deadline.left()))
    raise_for_status(r, f"POST /v1/completions with a {n}-token prompt (max_model_len {mml})")
    d = answer_json(r, "long prompt")
    u = d.get("usage") or {}
    ev = {"prompt_len": n, "max_model_len": mml, "max_tokens": max_tokens, "usage": u}
    if u.get("prompt_tokens") != n:
        raise Fail(
            f"usage.prompt_tokens is {u.get('prompt_tokens')!r} for a {n}-token prompt; wanted {n}", ev
        )
    if not (isinstance(u.get("completion_tokens"), int) and 1 <= u["completion_tokens"] <= max_tokens):
        raise Fail(f"usage.completion_tokens is {u.get('completion_tokens')!r}, wanted 1..{max_tokens}", ev)
    return Passed(f"{n}-token prompt served (max_model_len {mml}), prompt_tokens consistent", ev)


def check_long_prompt_rejected(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A prompt one token over max_model_len is rejected with HTTP 400, promptly (not a hang)."""
    spec = ctx.profile.checks.long_prompt
    if not spec.enabled:
        raise Skip(spec.skip_reason or "profile disables long-prompt checks")
    mml = _max_model_len(ctx, deadline)
    n = mml + 1
    body = {"model": ctx.model, "prompt": _prompt_ids(ctx, deadline, n), "max_tokens": 1, "temperature": 0.0}
    t = min(ctx.request_timeout_s, deadline.left())
    try:
        r = ctx.client.post("/v1/completions", body, timeout_s=t)
    except RequestTimeout as e:
        raise Fail(
            f"a {n}-token prompt (max_model_len {mml}) hung: no answer within {t:.0f} s; wanted HTTP 400",
            {"prompt_len": n, "error": str(e)},
        ) from None
    ev = {"prompt_len": n, "max_model_len": mml, "status": r.status_code, "body": r.text[:300]}
    if r.status_code != 400:
        if r.status_code >= 500 and engine_dead_in(r.text):
            raise ServerGone(f"engine died: over-long prompt answered HTTP {r.status_code}: {r.text[:300]!r}")
        raise Fail(f"a {n}-token prompt (max_model_len {mml}) answered HTTP {r.status_code}; wanted 400", ev)
    return Passed(f"{n}-token prompt rejected with 400", ev)


# ---- the needle probe (dsv4.long_context)

_FILLER = (
    "Line {i:05d}: the river keeps its slow course past the mill, and the miller counts "
    "the sacks of grain before the evening bell."
)
_QUESTION = "What is the secret code mentioned above? Reply with the code only, exactly as written."


def needle_code(rng: random.Random) -> str:
    """A needle like ``K7QX-3941-ZB2M`` (no 0/O, 1/I/L to keep it unambiguous)."""
    alphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
    return "-".join("".join(rng.choice(alphabet) for _ in range(4)) for _ in range(3))


_PAD = "and the sacks of grain wait by the mill door for the cart "


def build_haystack(n_lines: int, depth: float | None, code: str, pad: int = 0, variant: int = 0) -> str:
    """``n_lines`` filler lines, then a line of ``pad`` characters of plain words (they set the
    prompt's length to the token: one more character is mostly one more token or none), with
    ``The secret code is <code>.`` at fraction ``depth`` of it all: ``0`` before the first
    filler line (the very start), ``1`` after the pad (the very end, just before the question).
    ``variant`` starts the pad's words elsewhere (another place for the tokenizer to cut them).
    """
    lines = [_FILLER.format(i=i) for i in range(n_lines)]
    if pad:
        words = _PAD[variant * 7 % len(_PAD) :] + _PAD * (pad // len(_PAD) + 1)
        lines.append(words[:pad].rstrip() + ".")
    if depth is not None:
        at = len(lines) if depth >= 1 else min(n_lines, round(depth * n_lines))
        lines.insert(at, f"The secret code is {code}.")
    return "\n".join(lines) + "\n\n" + _QUESTION


def probe_lengths(target: int) -> list[int]:
    """The prompt lengths (tokens) the needle probe uses near ``target``: with ``m`` the largest
    multiple of 128 not above it, ``m - 1, m, m + 1, m + 2`` (every residue modulo 4; one token
    either side of a multiple of 128) and ``m - 65, m - 64, m - 63`` (either side of an odd
    multiple of 64).

    Raises:
        ValueError: ``target`` below 192 (no odd multiple of 64 below a multiple of 128 fits).
    """
    m = target // 128 * 128
    if m < 192:
        raise ValueError(f"long_context_tokens={target} is below 192; wanted a longer prompt")
    return [m - 1, m, m + 1, m + 2, m - 65, m - 64, m - 63]


NEEDLE_NORMALISATION = (
    "surrounding whitespace, then one pair of surrounding quotes or backticks, then one trailing "
    "period, removed; nothing else"
)
"""What :func:`normalise_needle_answer` removes before the exact comparison (stated in messages)."""


def normalise_needle_answer(text: str) -> str:
    """The answer as compared with the needle: :data:`NEEDLE_NORMALISATION`, no more.

    ``" `K7QX-3941-ZB2M`. "`` -> ``"K7QX-3941-ZB2M"``; ``"The code is K7QX-3941-ZB2M"`` is
    left as it is (and so is not the needle).
    """
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "\"'`":
        t = t[1:-1]
    elif len(t) >= 3 and t.endswith(".") and t[0] == t[-2] and t[0] in "\"'`":
        t = t[1:-2]
    t = t.removesuffix(".")
    return t.strip()


def server_max_model_len(ctx: CheckContext, deadline: Deadline) -> int:
    """``max_model_len`` of the served model as ``/v1/models`` reports it now.

    Raises:
        Fail: the served model name is not listed.
        SuiteError: the entry carries no positive ``max_model_len`` (the probe cannot be bounded).
    """
    r = ctx.client.get("/v1/models", timeout_s=min(ctx.request_timeout_s, deadline.left()))
    raise_for_status(r, "GET /v1/models")
    d = answer_json(r, "GET /v1/models")
    data = [m for m in (d.get("data") or [] if isinstance(d, dict) else []) if isinstance(m, dict)]
    entry = next((m for m in data if m.get("id") == ctx.model), None)
    if entry is None:
        raise Fail(f"/v1/models lists {[m.get('id') for m in data]}, not the served_model_name {ctx.model!r}")
    mml = entry.get("max_model_len")
    if not isinstance(mml, int) or mml <= 0:
        raise SuiteError(
            f"/v1/models entry {ctx.model!r} has max_model_len={mml!r}; wanted a positive int "
            "to bound the long-context probe"
        )
    return mml


def _haystack_of(n_lines: int, depth: float, code: str) -> Callable[[int, int], str]:
    def make(pad: int, variant: int) -> str:
        return build_haystack(n_lines, depth, code, pad, variant)

    return make


FIT_TRIES = 16
"""``/tokenize`` calls allowed to size one prompt to its exact length with one pad variant
(typically 3 to 7: the count grows about linearly with the pad, so interpolation finds it)."""

FIT_VARIANTS = 4
"""Pad variants tried when one skips the length (one more character made two more tokens)."""


def check_long_context(ctx: CheckContext, deadline: Deadline) -> Passed:
    """The readiness needle probe: each length of :func:`probe_lengths` once, the needle at the
    depths of ``checks.dsv4.long_context_depths`` in turn (see :func:`needle_probe`)."""
    return needle_probe(ctx, deadline, every=False)


def check_long_context_sweep(ctx: CheckContext, deadline: Deadline) -> Passed:
    """The sweep: every length of :func:`probe_lengths` at every depth (see :func:`needle_probe`)."""
    return needle_probe(ctx, deadline, every=True)


def needle_probe(ctx: CheckContext, deadline: Deadline, *, every: bool) -> Passed:
    """Needles in prompts of exact lengths: each prompt is sized with the server's own
    ``/tokenize`` (the chat template applied) to exactly one of :func:`probe_lengths` of
    ``long_context_tokens``, sent as a chat request, and ``usage.prompt_tokens`` must equal that
    length exactly; with a trained model the answer must be exactly the needle (after
    :data:`NEEDLE_NORMALISATION`). The needle sits at each of ``long_context_depths`` (0: the
    very start, 1: the very end), so a server that drops or alters the head, the middle or the
    tail of a prompt fails, as does one that mangles a single length residue.

    Raises:
        SuiteError: the longest length does not fit the server's ``max_model_len`` (nothing is
            sent), ``/tokenize`` gives no count, or no prompt of the exact length could be built.
    """
    s = ctx.profile.checks.dsv4
    if not s.long_context_depths:
        raise Skip("no depths configured (checks.dsv4.long_context_depths=[])")
    mml = server_max_model_len(ctx, deadline)
    try:
        lengths = probe_lengths(s.long_context_tokens)
    except ValueError as e:
        raise SuiteError(f"checks.dsv4.{e}") from None
    need = max(lengths) + s.long_context_answer_tokens
    if need > mml:
        raise SuiteError(
            f"checks.dsv4.long_context_tokens={s.long_context_tokens} gives prompts up to {max(lengths)} "
            f"tokens + answer {s.long_context_answer_tokens} = {need} tokens, which exceeds the server's "
            f"max_model_len {mml}; wanted long_context_tokens <= {mml - s.long_context_answer_tokens - 2} "
            "(refusing to send it)"
        )
    extra = NO_THINKING if ctx.profile.checks.thinking.enabled else {}
    t = ctx.long_prompt_timeout_s

    def count(text: str) -> int:
        body = {"model": ctx.model, "messages": [{"role": "user", "content": text}], **extra}
        r = ctx.client.post("/tokenize", body, timeout_s=min(ctx.request_timeout_s, deadline.left()))
        raise_for_status(r, "POST /tokenize (chat messages)")
        n = (answer_json(r, "POST /tokenize") or {}).get("count")
        if not isinstance(n, int) or n <= 0:
            raise SuiteError(
                f"POST /tokenize gave count={n!r} for a chat prompt; wanted a positive token count"
            )
        return n

    # Tokens per filler line and for the needle, from the server's tokenizer; enough lines to
    # come just below the shortest length, the pad then takes up the rest exactly.
    c8, c24 = count(build_haystack(8, None, "")), count(build_haystack(24, None, ""))
    per_line = (c24 - c8) / 16
    if per_line <= 0:
        raise Fail(f"/tokenize counts did not grow with the prompt: {c8} for 8 lines, {c24} for 24")
    needle = count(build_haystack(8, 1.0, "XXXX-XXXX-XXXX")) - c8
    n_lines = max(1, math.floor((min(lengths) - c8 - needle - 4) / per_line) + 8)
    rng = random.Random(s.seed)
    depths = list(s.long_context_depths)
    plan = (
        [(n, d) for n in lengths for d in depths]
        if every
        else [(n, depths[i % len(depths)]) for i, n in enumerate(lengths)]
    )
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    not_judged = model_checks_reason(ctx.profile)
    for n, depth in plan:
        code = needle_code(rng)
        text = fit_prompt(_haystack_of(n_lines, depth, code), count, n)
        t0 = time.monotonic()
        body = user_chat(ctx, text, s.long_context_answer_tokens, temperature=0, **extra)
        resp = post_chat(ctx, body, deadline, "long-context prompt", timeout_s=t)
        lat = time.monotonic() - t0
        msg, finish = message_of(resp)
        got = content_of(msg)
        norm = normalise_needle_answer(got)
        pt = (resp.get("usage") or {}).get("prompt_tokens")
        where = f"[{n} tokens (= {n % 4} mod 4), needle at depth {depth:g}]"
        if pt != n:
            probs.append(
                f"{where} usage.prompt_tokens={pt!r}, wanted exactly {n} (the server's /tokenize count of "
                "the prompt sent): the prompt served is not the prompt sent"
            )
        if not_judged is None and norm != code:
            probs.append(
                f"{where} answer {short(got, 60)!r} (normalised: {short(norm, 60)!r}) is not the "
                f"needle {code!r}; compared exactly after {NEEDLE_NORMALISATION}"
            )
        seen.append(
            {
                "prompt_tokens_sent": n,
                "prompt_tokens_served": pt,
                "depth": depth,
                "needle": code,
                "answer": short(got, 80),
                "normalised": short(norm, 80),
                "exact": norm == code,
                "finish_reason": finish,
                "latency_s": round(lat, 3),
            }
        )
    ev = {
        "max_model_len": mml,
        "target_tokens": s.long_context_tokens,
        "lengths": lengths,
        "depths": depths,
        "tokens_per_line": per_line,
        "lines": n_lines,
        "normalisation": NEEDLE_NORMALISATION,
        "probes": seen,
    }
    if probs:
        raise Fail(
            "; ".join(probs[:4]) + (f" (+{len(probs) - 4} more)" if len(probs) > 4 else ""),
            {"problems": probs, **ev},
        )
    judged = (
        f"answer == needle exactly (after {NEEDLE_NORMALISATION}) at every probe"
        if not_judged is None
        else f"needle retrieval not judged ({not_judged})"
    )
    return Passed(
        f"{len(seen)} prompt(s) of exactly {lengths} tokens, needle at depths {depths} "
        f"({'every depth at every length' if every else 'in turn'}), usage.prompt_tokens exact "
        f"(max_model_len {mml}); {judged}",
        ev,
    )


def fit_prompt(make: Callable[[int, int], str], count: Callable[[str], int], n: int) -> str:
    """``make(pad, variant)`` for a ``pad`` (characters) whose prompt is exactly ``n`` tokens by
    ``count``: for each variant up to :data:`FIT_VARIANTS`, the smallest such pad, found by
    bracketing ``n`` between a pad that counts fewer tokens and one that counts as many or
    more, then narrowing the bracket by interpolation (bisecting when that stalls), at most
    :data:`FIT_TRIES` counts a variant.

    Raises:
        SuiteError: the prompt without pad is already longer than ``n``, or no pad of any
            variant gives exactly ``n`` tokens (the message lists the counts seen).
    """
    seen: list[dict[int, int]] = []
    for variant in range(FIT_VARIANTS):
        tried: dict[int, int] = {}
        seen.append(tried)

        def at(pad: int, variant: int = variant, tried: dict[int, int] = tried) -> int:
            if pad not in tried:
                if len(tried) >= FIT_TRIES:
                    raise _Skipped
                tried[pad] = count(make(pad, variant))
            return tried[pad]

        try:
            lo = 0
            if at(lo) >= n:
                if at(lo) == n:
                    return make(lo, variant)
                raise SuiteError(f"the prompt without pad is {at(lo)} tokens already; wanted at most {n}")
            hi = 4 * (n - at(lo)) + 4  # at most 4 characters a token on the tokenizers seen
            while at(hi) < n:
                lo, hi = hi, 2 * hi
            # at(lo) < n <= at(hi); the count grows with the pad
            while hi - lo > 1 and at(hi) != n:
                span = hi - lo
                guess = lo + round((n - at(lo)) * span / max(at(hi) - at(lo), 1))
                for mid in (min(max(guess, lo + 1), hi - 1), (lo + hi) // 2):
                    if lo < mid < hi and hi - lo > span // 2:  # the second: bisect if that did not halve it
                        if at(mid) < n:
                            lo = mid
                        else:
                            hi = mid
            if at(hi) == n:
                return make(hi, variant)
        except _Skipped:
            pass
    raise SuiteError(
        f"could not build a prompt of exactly {n} tokens with the server's /tokenize: pad characters -> "
        f"tokens, per variant: {[dict(sorted(t.items())) for t in seen]}; wanted one count equal to {n}"
    )


class _Skipped(Exception):
    """One pad variant spent its counts."""
