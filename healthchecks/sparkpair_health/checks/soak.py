"""The soak (``dsv4.soak``): sequential mixed-length requests, each within a latency budget,
to catch the engine that wedges after a handful of requests (B08). Off unless
``checks.dsv4.soak_requests`` > 0: it is not part of the 3-minute suite.
"""

from __future__ import annotations

import time

from ..client import Deadline, RequestTimeout, SuiteError
from .base import JSON, NO_THINKING, CheckContext, Fail, Passed, Skip, post_chat, user_chat


def soak_plan(n: int, short: int, long: int) -> list[int]:
    """max_tokens of each of ``n`` soak requests: short, long, medium repeating (≥ 1 long when n ≥ 1)."""
    medium = max(short, long // 4)
    cycle = [short, long, medium]
    plan = [cycle[i % 3] for i in range(n)]
    if n and long not in plan:
        plan[0] = long
    return plan


def check_soak(ctx: CheckContext, deadline: Deadline) -> Passed:
    """``soak_requests`` sequential requests cycling short / long / medium outputs (``min_tokens``
    forces the long ones); each must finish within ``soak_first_token_budget_s + max_tokens /
    soak_min_decode_tok_s`` seconds.

    Raises:
        Fail: a request over its budget (the wedge, B08), or a long request cut short.
        SuiteError: the check's own timeout cannot hold the next request's budget.
    """
    s = ctx.profile.checks.dsv4
    if s.soak_requests <= 0:
        raise Skip("soak off (checks.dsv4.soak_requests=0; it is not part of the 3-minute suite)")
    plan = soak_plan(s.soak_requests, s.soak_short_tokens, s.soak_long_tokens)
    off = NO_THINKING if ctx.profile.checks.thinking.enabled else {}
    seen: list[JSON] = []
    for i, mt in enumerate(plan, 1):
        budget = s.soak_first_token_budget_s + mt / s.soak_min_decode_tok_s
        body = user_chat(
            ctx,
            f"Request {i}: write a long story about a lighthouse.",
            mt,
            min_tokens=mt if mt >= s.soak_long_tokens else 0,
            temperature=0.7,
            seed=s.seed + i,
            **off,
        )
        left = deadline.t_end - time.monotonic()
        if left < budget:
            raise SuiteError(
                f"soak request {i}/{len(plan)} needs a {budget:.0f} s latency budget but only "
                f"{max(left, 0):.0f} s of the check timeout {deadline.seconds:g} s are left; raise "
                "timeouts.check_scale or lower checks.dsv4.soak_requests"
            )
        t0 = time.monotonic()
        try:
            resp = post_chat(ctx, body, deadline, f"soak request {i}", timeout_s=budget)
        except RequestTimeout:
            raise Fail(
                f"request {i}/{len(plan)} (max_tokens={mt}) got no answer within its latency budget "
                f"{budget:.0f} s after {i - 1} good requests: the wedge-after-a-few-requests class (B08)",
                {"requests": seen},
            ) from None
        ct = (resp.get("usage") or {}).get("completion_tokens")
        seen.append(
            {
                "i": i,
                "max_tokens": mt,
                "completion_tokens": ct,
                "latency_s": round(time.monotonic() - t0, 3),
                "budget_s": round(budget, 1),
            }
        )
        if mt >= s.soak_long_tokens and isinstance(ct, int) and ct < s.soak_long_tokens:
            raise Fail(
                f"request {i}: completion_tokens={ct}, wanted ≥ {s.soak_long_tokens} "
                "(min_tokens ignored: the long outputs B08 needs were not produced)",
                {"requests": seen},
            )
    worst = max(seen, key=lambda x: float(x["latency_s"]) / float(x["budget_s"]))
    n_long = sum(1 for m in plan if m >= s.soak_long_tokens)
    return Passed(
        f"{len(plan)} sequential requests completed, {n_long} of ≥{s.soak_long_tokens} tokens; "
        f"worst {worst['latency_s']} s of {worst['budget_s']} s budget",
        {"requests": seen},
    )
