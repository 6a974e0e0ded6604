"""Long prompts: near and over ``max_model_len`` (``long_prompt_*``) and the needle probe of
the model checks (``dsv4.long_context``: exact retrieval at several depths and neighbouring
prompt lengths, the prompt length verified from ``usage``).
"""

from __future__ import annotations

import random
import time
from typing import Any

from ..client import Deadline, RequestTimeout, ServerGone, SuiteError, engine_dead_in
from .base import (
    JSON,
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


def build_haystack(n_lines: int, depth: float | None, code: str, shift: int = 0) -> str:
    """``n_lines`` filler lines with ``The secret code is <code>.`` at fraction ``depth`` of them,
    after ``shift`` extra words (``"so "`` each: a few tokens; 3 on the tiny demo's tokenizer,
    where the real server gave 1800, 1803, 1806 tokens) that move every later token
    boundary: neighbouring prompt lengths."""
    lines = [_FILLER.format(i=i) for i in range(n_lines)]
    if depth is not None:
        lines.insert(min(n_lines, round(depth * n_lines)), f"The secret code is {code}.")
    return "so " * shift + "\n".join(lines) + "\n\n" + _QUESTION


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


def check_long_context(ctx: CheckContext, deadline: Deadline) -> Passed:
    """A needle at each of ``checks.dsv4.long_context_depths`` in prompts of about
    ``long_context_tokens`` tokens (and neighbouring lengths): ``usage.prompt_tokens`` within
    the tolerance of the target and within ``max_model_len``; with a trained model the answer
    is exactly the needle (after :data:`NEEDLE_NORMALISATION`).

    Raises:
        SuiteError: the target does not fit the server's ``max_model_len`` (nothing is sent).
    """
    s = ctx.profile.checks.dsv4
    if not s.long_context_depths:
        raise Skip("no depths configured (checks.dsv4.long_context_depths=[])")
    mml = server_max_model_len(ctx, deadline)
    need = s.long_context_tokens + s.long_context_answer_tokens
    if need > mml:
        raise SuiteError(
            f"checks.dsv4.long_context_tokens={s.long_context_tokens} + answer "
            f"{s.long_context_answer_tokens} = {need} tokens exceeds the server's max_model_len {mml}; "
            f"wanted long_context_tokens <= {mml - s.long_context_answer_tokens} (refusing to send it)"
        )
    extra = NO_THINKING if ctx.profile.checks.thinking.enabled else {}
    t = ctx.long_prompt_timeout_s

    def ask(text: str, max_tokens: int) -> tuple[JSON, float]:
        t0 = time.monotonic()
        body = user_chat(ctx, text, max_tokens, temperature=0, **extra)
        return post_chat(ctx, body, deadline, "long-context prompt", timeout_s=t), time.monotonic() - t0

    def prompt_tokens(text: str) -> int:
        u = ask(text, 1)[0].get("usage") or {}
        if not isinstance(u.get("prompt_tokens"), int):
            raise Fail(f"answer carries no usage.prompt_tokens: usage={u!r}")
        return int(u["prompt_tokens"])

    # Calibrate tokens per filler line from two short prompts (no tokenizer on the client).
    n1, n2 = 8, 24
    p1 = prompt_tokens(build_haystack(n1, None, ""))
    p2 = prompt_tokens(build_haystack(n2, None, ""))
    per_line = (p2 - p1) / (n2 - n1)
    if per_line <= 0:
        raise Fail(f"usage.prompt_tokens did not grow with the prompt: {p1} for {n1} lines, {p2} for {n2}")
    base = p1 - n1 * per_line
    n_lines = max(1, int((s.long_context_tokens - base) / per_line))
    rng = random.Random(s.seed)
    probs: list[str] = []
    seen: list[dict[str, Any]] = []
    not_judged = model_checks_reason(ctx.profile)
    shifts = s.long_context_shifts or [0]
    for depth in s.long_context_depths:
        for shift in shifts:
            code = needle_code(rng)
            resp, lat = ask(build_haystack(n_lines, depth, code, shift), s.long_context_answer_tokens)
            msg, finish = message_of(resp)
            got = content_of(msg)
            norm = normalise_needle_answer(got)
            pt = (resp.get("usage") or {}).get("prompt_tokens")
            where = f"[depth {depth:.2f}, +{shift} words, {pt} prompt tokens]"
            if not isinstance(pt, int):
                probs.append(f"{where} no usage.prompt_tokens in the answer")
            else:
                off = abs(pt - s.long_context_tokens) / s.long_context_tokens
                if off > s.long_context_tolerance:
                    probs.append(
                        f"{where} usage.prompt_tokens={pt}, wanted {s.long_context_tokens} "
                        f"±{s.long_context_tolerance:.0%} (the prompt sent was not the prompt served)"
                    )
                if pt > mml:
                    probs.append(f"{where} usage.prompt_tokens={pt} > max_model_len {mml}")
            if not_judged is None and norm != code:
                probs.append(
                    f"{where} answer {short(got, 60)!r} (normalised: {short(norm, 60)!r}) is not the "
                    f"needle {code!r}; compared exactly after {NEEDLE_NORMALISATION}"
                )
            seen.append(
                {
                    "depth": depth,
                    "shift_words": shift,
                    "prompt_tokens": pt,
                    "needle": code,
                    "answer": short(got, 80),
                    "normalised": short(norm, 80),
                    "exact": norm == code,
                    "finish_reason": finish,
                    "latency_s": round(lat, 3),
                }
            )
    lengths = sorted({x["prompt_tokens"] for x in seen if isinstance(x["prompt_tokens"], int)})
    ev = {
        "max_model_len": mml,
        "target_tokens": s.long_context_tokens,
        "tokens_per_line": per_line,
        "lines": n_lines,
        "normalisation": NEEDLE_NORMALISATION,
        "probes": seen,
    }
    if probs:
        raise Fail("; ".join(probs[:4]), {"problems": probs, **ev})
    judged = (
        f"answer == needle exactly (after {NEEDLE_NORMALISATION}) at every probe"
        if not_judged is None
        else f"needle retrieval not judged ({not_judged})"
    )
    return Passed(
        f"{len(seen)} prompt(s): depths {list(s.long_context_depths)} x {len(shifts)} neighbouring lengths "
        f"(prompt_tokens {lengths}, usage verified, max_model_len {mml}); {judged}",
        ev,
    )
