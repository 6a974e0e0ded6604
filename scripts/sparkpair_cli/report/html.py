"""The report as one self-contained HTML page: styles and SVG plots inline, the data as JSON inside.

The page needs nothing from the network: an owner attaches the one file to an issue and anyone
opens it offline. The whole report (:func:`sparkpair_cli.report.gather.build_report`'s dict) is
embedded as ``<script type="application/json" id="sparkpair-report-data">``;
:func:`read_report_data` reads it back (``sparkpair report --compare earlier.html``). Every section
of :data:`~sparkpair_cli.report.model.SECTIONS` is a ``<section id="sec-<id>" data-state=...>``:
filled, partial or empty, with the reasons for what is missing listed first.

Rendering is a pure function of the data (no clock, no environment): the same report gives the
same bytes.
"""

from __future__ import annotations

import json
import math
import re
from html import escape
from pathlib import Path
from typing import Any

DATA_ID = "sparkpair-report-data"
MAX_REPORT_BYTES = 64 * 1024 * 1024
"""Largest earlier report read by ``--compare`` (bytes); reports are well under 10 MiB."""

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;
max-width:1180px;padding:16px;color:#1b1f24;background:#fff}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:0 0 6px} h3{font-size:14px;
margin:10px 0 4px}
section{border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;margin:12px 0}
section[data-state=filled]{border-left:6px solid #1a7f37}
section[data-state=partial]{border-left:6px solid #bf8700}
section[data-state=empty]{border-left:6px solid #8c959f}
.state{font-size:12px;padding:1px 6px;border-radius:10px;color:#fff;margin-left:8px;
vertical-align:middle}
.filled{background:#1a7f37}.partial{background:#bf8700}.empty{background:#8c959f}
ul.why{margin:4px 0 8px;color:#6e4b00} table{border-collapse:collapse;margin:4px 0 8px;
font-size:12.5px}
td,th{border:1px solid #d0d7de;padding:2px 6px;text-align:left;vertical-align:top;max-width:520px;
overflow-wrap:anywhere}
th{background:#f6f8fa} pre{background:#f6f8fa;padding:6px;overflow-x:auto;font-size:12px;
white-space:pre-wrap}
.ok{color:#1a7f37;font-weight:600}.bad{color:#cf222e;font-weight:600} nav a{margin-right:10px}
details>summary{cursor:pointer;color:#0969da}
"""


class ReportFileError(ValueError):
    """An earlier report cannot be read; the message names the file and why."""


def read_report_data(path: Path, option: str = "--compare") -> dict[str, Any]:
    """The data embedded in a report written by :func:`render` (or a ``.json`` of the same data).

    At most :data:`MAX_REPORT_BYTES` are read, from a regular file only (a FIFO or ``/dev/zero``
    is refused, never read). ``option`` names the setting in messages.

    Raises:
        ReportFileError: unreadable, not a regular file, too large, or not a sparkpair report
            (no embedded data, not JSON, no ``sparkpair-report/`` schema, ``sections`` not a list of
            objects each with an ``id``).
    """
    from sparkpair_serving.inputs import read_small_file

    try:
        text = read_small_file(path, MAX_REPORT_BYTES).decode("utf-8", errors="replace")
    except OSError as e:
        raise ReportFileError(f"{option} {path}: cannot read it ({e.strerror})") from None
    except ValueError as e:
        raise ReportFileError(f"{option} {path}: {e}; wanted a report `sparkpair report` wrote") from None
    if path.suffix == ".json":
        body = text
    else:
        m = re.search(rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>', text, re.S)
        if m is None:
            raise ReportFileError(
                f"{option} {path}: no embedded report data (#{DATA_ID}); wanted a page `sparkpair "
                "report` wrote"
            )
        body = m.group(1).replace("<\\/", "</")
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ReportFileError(f"{option} {path}: the embedded data is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ReportFileError(
            f"{option} {path}: the embedded data is a JSON {type(data).__name__}; wanted an object "
            '{"schema": "sparkpair-report/1", "sections": [...]}'
        )
    if not str(data.get("schema", "")).startswith("sparkpair-report/"):
        raise ReportFileError(f"{option} {path}: schema {data.get('schema')!r}; wanted sparkpair-report/1")
    secs = data.get("sections")
    if not isinstance(secs, list) or not all(isinstance(x, dict) and "id" in x for x in secs):
        raise ReportFileError(
            f"{option} {path}: 'sections' is {type(secs).__name__}; wanted a list of objects each "
            "with an 'id'"
        )
    if not isinstance(data.get("meta", {}), dict):
        raise ReportFileError(f"{option} {path}: 'meta' is {type(data['meta']).__name__}; wanted an object")
    return data


# --------------------------------------------------------------------------- generic rendering


def _cell(v: Any) -> str:
    if v is None:
        return "<span class=empty-val>–</span>"
    if isinstance(v, bool):
        return '<span class="ok">yes</span>' if v else '<span class="bad">no</span>'
    if isinstance(v, float):
        return escape(f"{v:.4g}")
    if isinstance(v, (dict, list)):
        text = json.dumps(v, ensure_ascii=False, sort_keys=True)
        if len(text) <= 120:
            return escape(text)
        pretty = escape(json.dumps(v, indent=1, ensure_ascii=False, sort_keys=True))
        return f"<details><summary>{len(text)} characters</summary><pre>{pretty}</pre></details>"
    return escape(str(v))


def table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> str:
    """An HTML table of ``rows`` (one column per key, in first-seen order)."""
    if not rows:
        return "<p>(none)</p>"
    if cols is None:
        cols = []
        for r in rows:
            cols += [k for k in r if k not in cols]
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in cols) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def kv(d: dict[str, Any]) -> str:
    return table([{"name": k, "value": v} for k, v in d.items()])


def generic(v: Any, depth: int = 0) -> str:
    if isinstance(v, dict):
        parts = []
        flat = {k: x for k, x in v.items() if not isinstance(x, (dict, list)) or not x}
        if flat:
            parts.append(kv(flat))
        for k, x in v.items():
            if k in flat:
                continue
            parts.append(f"<h3>{escape(str(k))}</h3>{generic(x, depth + 1)}")
        return "".join(parts)
    if isinstance(v, list):
        if v and all(isinstance(x, dict) for x in v):
            return table(v)
        return "<ul>" + "".join(f"<li>{_cell(x)}</li>" for x in v) + "</ul>"
    return f"<p>{_cell(v)}</p>"


# --------------------------------------------------------------------------- plots (inline SVG)


def bar_plot(
    title: str,
    bars: list[tuple[str, float, str]],
    unit: str,
    ranges: list[tuple[str, float, float]] | None = None,
) -> str:
    """A horizontal bar plot as inline SVG: ``bars`` ``(label, value, colour)`` and reference
    ``ranges`` ``(label, low, high)`` drawn as grey spans on the same axis."""
    items: list[tuple[str, float, str, float | None]] = [(lab, val, col, None) for lab, val, col in bars]
    items += [(lab, lo, "#8c959f", hi) for lab, lo, hi in ranges or []]
    if not items:
        return ""
    top = max([x[1] for x in items] + [x[3] or 0 for x in items]) or 1.0
    row_h, left, width = 18, 300, 520
    h = row_h * len(items) + 30
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 90}" height="{h}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="0" y="12" font-size="12" font-weight="600">{escape(title)} ({escape(unit)})</text>',
    ]
    for i, (lab, lo, col, hi) in enumerate(items):
        y = 20 + i * row_h
        x0 = left + (lo / top * width if hi is not None else 0)
        w = ((hi - lo) if hi is not None else lo) / top * width
        w = max(w, 2.0)
        val = f"{lo:.3g}" if hi is None or hi == lo else f"{lo:.3g}–{hi:.3g}"
        out.append(f'<text x="0" y="{y + 12}" font-size="11">{escape(lab[:48])}</text>')
        out.append(f'<rect x="{x0:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 5}" fill="{col}"/>')
        out.append(f'<text x="{x0 + w + 4:.1f}" y="{y + 12}" font-size="11">{escape(val)}</text>')
    out.append("</svg>")
    return "".join(out)


# --------------------------------------------------------------------------- sections


def _kernels(d: dict[str, Any]) -> str:
    parts = [f"<p>Head and worker run the same plan: {_cell(d.get('same_plan'))}</p>"]
    for node, nd in (d.get("nodes") or {}).items():
        parts.append(f"<h3>{escape(node)}</h3>")
        if nd.get("device"):
            parts.append(f"<p>{escape(nd['device'])}</p>")
        parts.append(
            "<p>Plan lines logged by its vLLM processes:</p>" + generic(nd.get("plan_lines") or ["(none)"])
        )
        plan = nd.get("plan")
        if plan:
            parts.append("<details><summary>kernel plan</summary>" + generic(plan) + "</details>")
        probe = nd.get("probe")
        if not probe:
            continue
        choice = (probe.get("serve_choice") or {}).get("choices") or []
        if choice:
            parts.append(
                "<p>What the plan chose from the probe, and why:</p>"
                + table(choice, ["path", "candidate", "reason"])
            )
        rows = probe.get("serve_paths") or []
        if rows:
            bars = [
                (
                    f"{r.get('path')} {r.get('candidate')} {r.get('shape')} T={r.get('tokens')}",
                    float(r["us"]),
                    "#0969da" if r.get("ok") else "#cf222e",
                )
                for r in rows
                if isinstance(r.get("us"), (int, float))
            ]
            parts.append(bar_plot("probe: per-backend time", bars, "µs"))
            parts.append(table(rows))
        for key in ("router", "o_proj", "kernel_paths"):
            if probe.get(key):
                parts.append(f"<h3>{escape(key)} rows</h3>" + table(probe[key]))
        for key in ("o_proj_decision", "kernel_path_decision"):
            if probe.get(key):
                parts.append(f"<h3>{escape(key)}</h3>" + generic(probe[key]))
    return "".join(parts)


def _bench(d: dict[str, Any]) -> str:
    parts = []
    rows = d.get("result") or []
    ref = (d.get("reference") or {}).get("figures") or []
    if rows:
        parts.append(table(rows))
        for metric in ("per_user_decode_tok_s", "aggregate_output_tok_s"):
            bars = [
                (f"this pair: {r['id']}", float(r[metric]), "#0969da")
                for r in rows
                if isinstance(r.get(metric), (int, float))
            ]
            conc = {r.get("concurrency") for r in rows}
            rng = [
                (f"{f['stack']} (C{f.get('concurrency')})", float(f["low"]), float(f["high"]))
                for f in ref
                if f.get("metric") == metric and f.get("concurrency") in conc
            ]
            if bars:
                parts.append(bar_plot(f"{metric}: this pair beside the field's figures", bars, "tok/s", rng))
    if ref:
        parts.append(
            "<details><summary>The field's published figures "
            f"({escape(str(d.get('reference_source')))})</summary>" + table(ref) + "</details>"
        )
    if d.get("provenance"):
        parts.append("<details><summary>provenance</summary>" + generic(d["provenance"]) + "</details>")
    return "".join(parts)


def _accuracy(d: dict[str, Any]) -> str:
    if not d.get("rows"):
        return ""
    return (
        f"<p><b>{d.get('correct')}/{d.get('asked')}</b> correct (set of {d.get('of')}, model "
        f"{escape(str(d.get('model')))}). "
        f"{escape(str(d.get('about', '')))}</p>" + table(d["rows"], ["id", "ok", "answer", "accept", "error"])
    )


def _gpu(d: dict[str, Any]) -> str:
    parts = []
    for node, nd in (d.get("nodes") or {}).items():
        parts.append(f"<h3>{escape(node)}</h3>")
        if nd.get("samples"):
            parts.append(table(nd["samples"]))
        else:
            parts.append(f"<p>{escape(str(nd.get('why')))}</p>")
    return "".join(parts)


def _summary(d: dict[str, Any], meta: dict[str, Any]) -> str:
    states = d.get("sections") or {}
    nav = "".join(
        f'<a href="#sec-{escape(k)}">{escape(k)}</a><span class="state {escape(v)}">{escape(v)}</span> '
        for k, v in states.items()
    )
    facts = {k: v for k, v in d.items() if k not in ("sections", "nodes")}
    return (
        f"<nav>{nav}</nav>"
        + kv(
            {
                **{
                    "generated_at": meta.get("generated_at"),
                    "base_url": meta.get("base_url"),
                    "gateway": meta.get("gateway"),
                },
                **facts,
            }
        )
        + table(d.get("nodes") or [])
    )


RENDER = {"kernels": _kernels, "bench": _bench, "accuracy": _accuracy, "gpu": _gpu}


def finite(obj: Any) -> Any:
    """``obj`` with every NaN and infinity (a probe's failed timing) as ``None``: JSON has neither."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


_SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(report: dict[str, Any]) -> str:
    """``report`` as JSON safe inside ``<script>``: strict JSON (no NaN/Infinity, which
    ``JSON.parse`` refuses), ``<``, ``>``, ``&`` and U+2028/U+2029 written as ``\\uXXXX`` escapes so
    no string in it can close the element or open a comment (HTML spec, "Restrictions for
    contents of script elements": https://html.spec.whatwg.org/multipage/scripting.html#restrictions-for-contents-of-script-elements)."""
    text = json.dumps(finite(report), ensure_ascii=False, sort_keys=True, allow_nan=False)
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_UNSAFE[m.group(0)], text)


def render(report: dict[str, Any]) -> str:
    """The page (one string) for ``report`` (see the module docstring)."""
    meta = report.get("meta") or {}
    body = []
    for s in report["sections"]:
        state = s["state"]
        why = "".join(f"<li>{escape(w)}</li>" for w in s.get("why") or [])
        head = f'<h2>{escape(s["title"])}<span class="state {escape(state)}">{escape(state)}</span></h2>'
        try:
            if s["id"] == "summary":
                content = _summary(s["data"], meta)
            elif s["id"] in RENDER:
                content = RENDER[s["id"]](s["data"])
            else:
                content = generic(s["data"]) if s["data"] else ""
        except Exception as e:  # noqa: BLE001 - named on the page; the data is still shown as is
            content = (
                f'<p class="bad">could not draw this section: {escape(type(e).__name__)}: '
                f"{escape(str(e))}; its data as read:</p>" + generic(s["data"])
            )
        why_html = f'<ul class="why">{why}</ul>' if why else ""
        body.append(
            f'<section id="sec-{escape(s["id"])}" '
            f'data-state="{escape(state)}">{head}{why_html}{content}</section>'
        )
    data = embed_json(report)
    check = (
        "(function(){var d=JSON.parse(document.getElementById('" + DATA_ID + "').textContent);"
        "var p=document.getElementById('browser-check');"
        "p.textContent=d.sections.length+' sections read from the embedded data';"
        "p.setAttribute('data-sections',String(d.sections.length));})();"
    )
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        "<meta name=viewport content='width=device-width,initial-scale=1'>"
        "<title>sparkpair report "
        f"{escape(str(meta.get('generated_at', '')))}</title><style>{CSS}</style></head><body>"
        f"<h1>sparkpair report</h1><p>Generated {escape(str(meta.get('generated_at', '')))} by "
        "<code>sparkpair report</code>. Secrets, private hosts and paths outside the run are removed. "
        f"The data behind this page is embedded in it (<code>#{DATA_ID}</code>).</p>"
        '<p id="browser-check"></p>'
        + "".join(body)
        + f'<script type="application/json" id="{DATA_ID}">{data}</script>'
        + f"<script>{check}</script></body></html>\n"
    )
