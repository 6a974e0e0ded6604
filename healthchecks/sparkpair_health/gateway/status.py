"""The gateway's status page (``GET /status``): one HTML page a person reads, no JavaScript.

What it shows, top to bottom:

- the verdict badge (``#verdict``): ``READY`` on green (:data:`COLOURS` ``ready``) when
  ``/readyz`` answers 200; ``NOT READY`` on red (``fail``) when a check, the canary, a peer or
  stability fails; ``WAITING`` on amber (``waiting``) while the server loads or the suite runs;
- the failing check and its cause (``/readyz``'s ``failing_check`` and ``cause``), the peer
  named down and how (``peer_down``: dead, paused, frozen, OOM-killed, ...), and for each
  failed check of the latest suite report its message and evidence (JSON);
- the kernel plan the head wrote (``plan_path``), as JSON, or why it is not shown;
- the canary history: the latest canaries (newest first) with result, latency and cause, and
  a bar per canary (height: latency; colour: result) drawn in inline SVG;
- wedge recovery (when on): restarts done in the window and the last action.

The page refreshes itself every ``canary_interval_s`` (``<meta http-equiv=refresh>``).
Everything shown passes :func:`sparkpair_serving.apikey.redact`. Runs in the slim client.
"""

from __future__ import annotations

import json
import time
from html import escape
from typing import TYPE_CHECKING, Any

from sparkpair_serving.apikey import redact

if TYPE_CHECKING:
    from .view import GatewayView

COLOURS = {"ready": "#1a7f37", "fail": "#cf222e", "waiting": "#9a6700"}
"""Badge background colours (sRGB hex), chosen to be told apart in a screenshot: green, red,
amber (GitHub Primer's success/danger/attention foregrounds)."""

WAITING_PHASES = ("starting", "waiting_ready", "running_suite")
"""Phases in which the pair is not failing yet, only not judged (the badge is amber)."""

HISTORY_ROWS = 15
"""Canaries listed in the table (newest first); the bars show the whole history."""

PLAN_MAX_CHARS = 20_000
"""The kernel-plan JSON is cut to this many characters on the page."""


def verdict_of(ready: bool, phase: str) -> tuple[str, str]:
    """(badge text, :data:`COLOURS` key) for a ``/readyz`` outcome and the gateway's phase."""
    if ready:
        return "READY", "ready"
    if phase in WAITING_PHASES:
        return "WAITING", "waiting"
    return "NOT READY", "fail"


def _plan_text(gw: GatewayView) -> str:
    path = gw.s.plan_path
    if path is None:
        return "no plan_path set (SPARKPAIR_PLAN_PATH): the kernel plan is not shown"
    from sparkpair_overlay.plan import KernelPlan, PlanError  # torch-free, vLLM-free

    try:  # bounded read of a regular file; a plan that does not parse is named, never a 500
        plan = KernelPlan.load(path, f"plan_path {path}")
    except PlanError as e:
        return str(e)
    return json.dumps(plan.to_json(), indent=2, sort_keys=True)[:PLAN_MAX_CHARS]


def _history_svg(history: list[dict[str, Any]], width: int = 600, height: int = 80) -> str:
    if not history:
        return "<p>no canary yet</p>"
    top = max(float(h.get("latency_s", 0.0)) for h in history) or 1.0
    bar = width / max(len(history), 1)
    rects = []
    for i, h in enumerate(history):
        hh = max(2.0, height * float(h.get("latency_s", 0.0)) / top)
        colour = COLOURS["ready"] if h.get("ok") else COLOURS["fail"]
        rects.append(
            f'<rect x="{i * bar:.1f}" y="{height - hh:.1f}" width="{max(bar - 2, 1):.1f}" '
            f'height="{hh:.1f}" fill="{colour}"><title>{float(h.get("latency_s", 0.0)):.3f} s</title></rect>'
        )
    return (
        f'<svg id="canary-bars" width="{width}" height="{height}" role="img" '
        f'aria-label="canary latency, oldest left; max {top:.3f} s">{"".join(rects)}</svg>'
    )


def status_page(gw: GatewayView) -> str:
    """The HTML of ``GET /status`` for gateway ``gw`` (see the module docstring)."""
    ready, body = gw.readiness()
    text, colour = verdict_of(ready, str(body.get("phase", "")))
    with gw._lock:
        report = gw.report_json
        history = list(gw.canary_history)
    failed: list[dict[str, Any]] = []
    if report is not None:
        failed = [c for c in json.loads(report).get("checks", []) if c.get("status") in ("fail", "error")]
    red = gw._red
    rows = []
    for h in list(reversed(history))[:HISTORY_ROWS]:
        at = time.strftime("%H:%M:%S", time.gmtime(float(h.get("at", 0.0))))
        rows.append(
            f'<tr class="{"ok" if h.get("ok") else "bad"}"><td>{at}</td>'
            f"<td>{'ok' if h.get('ok') else 'FAIL'}</td><td>{float(h.get('latency_s', 0.0)):.3f}</td>"
            f"<td>{escape(red(str(h.get('cause', ''))))}</td></tr>"
        )
    checks = "".join(
        f"<li><b>{escape(c['id'])}</b> ({escape(c['status'])}): {escape(red(c.get('message', '')))}"
        f"<pre>{escape(red(json.dumps(c.get('evidence', {}), indent=2)[:4000]))}</pre></li>"
        for c in failed
    )
    failing = ""
    if not ready:
        failing = (
            f'<p id="failing">failing check: <b>{escape(str(body.get("failing_check", "?")))}</b> '
            f"&mdash; {escape(str(body.get('cause', '')))}</p>"
        )
    peer = body.get("peer_down")
    if isinstance(peer, dict):
        failing += (
            f'<p id="peer">peer <b>{escape(str(peer.get("name")))}</b> ({escape(str(peer.get("address")))}) '
            f"is <b>{escape(str(peer.get('state')))}</b> &mdash; {escape(str(peer.get('source')))}: "
            f"{escape(str(peer.get('evidence')))}</p>"
        )
    recovery = ""
    rec = getattr(gw, "recovery", None)
    if rec is not None:
        recovery = f"<h2>Wedge recovery</h2><pre>{escape(red(json.dumps(rec.state(), indent=2)))}</pre>"
    refresh = max(1, int(gw.s.canary_interval_s))
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh}">
<title>sparkpair: {text}</title>
<style>
body {{ font-family: DejaVu Sans, sans-serif; margin: 16px; color: #1f2328; background: #ffffff; }}
#verdict {{ display: inline-block; padding: 18px 32px; font-size: 40px; font-weight: bold;
  color: #ffffff; background: {COLOURS[colour]}; border-radius: 6px; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #d0d7de; padding: 2px 8px; }}
tr.bad td {{ color: {COLOURS["fail"]}; }} pre {{ background: #f6f8fa; padding: 6px; overflow: auto; }}
</style></head>
<body>
<div id="verdict" data-verdict="{colour}">{text}</div>
<p>phase <b>{escape(str(body.get("phase", "")))}</b> &middot; server {escape(gw.s.base_url)}
&middot; profile {escape(gw.s.profile)}</p>
{failing}
<h2>Failed checks of the latest suite run</h2>
{f"<ul>{checks}</ul>" if checks else "<p>none</p>" if report is not None else "<p>no report yet</p>"}
<h2>Canary history</h2>
{_history_svg(history)}
<table><tr><th>UTC</th><th>result</th><th>latency s</th><th>cause</th></tr>{"".join(rows)}</table>
{recovery}
<h2>Kernel plan</h2>
<pre id="plan">{escape(str(redact(_plan_text(gw), gw.key)))}</pre>
</body></html>
"""
