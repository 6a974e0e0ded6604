"""Gather the owner's report: every section, from both nodes and the pair's API, within bounds.

Each section is a :class:`~.model.Section`: ``filled`` (everything it asks for was found), ``partial``
(some of it) or ``empty`` (none), with ``why`` naming each thing that could not be read and the
reason (a node unreachable, a file absent, no CUDA device, no gateway given). Nothing raises out
of :func:`build_report`: a pair that is not ready, half configured or wedged still gives a
report, and every node is read within ``node_timeout_s`` (a node that does not answer in time is
named, with what it was doing). The nodes are read by :mod:`.collect`; the sections are built by
:mod:`.node_sections` (from what the nodes gave) and :mod:`.api_sections` (from the pair's API and
this run).

Everything assembled here passes :func:`sparkpair_serving.apikey.redact` (the one
redaction) once, in :func:`finish`, with the API key, every secret found in the nodes'
environments (the model-sync token among them), the owner's private hosts and the run's folder.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from pydantic import SecretStr

from .api_sections import section_accuracy, section_bench, section_compare, section_health
from .collect import collect_bounded, gpu_sample
from .model import NO_CUDA, REPORT_SCHEMA, SECRET_NAME, SECTIONS, NodeFacts, Options, Section
from .node_sections import (
    section_env,
    section_gpu,
    section_image,
    section_kernels,
    section_nccl,
    section_preflight,
    section_stability_recorded,
)
from .nodes import NodeSource


def _raise(e: Exception) -> Section:
    raise e


def guarded(sid: str, build: Callable[..., Section], *args: Any) -> Section:
    """``build(*args)``, or -- when it raises (a node's file of a shape no check foresaw) -- the
    section ``sid`` empty, naming what went wrong: one section that cannot be built never costs
    the page."""
    try:
        return build(*args)
    except Exception as e:  # noqa: BLE001 - named in the section, the page is still written
        s = Section(sid, dict(SECTIONS)[sid])
        s.missing(f"could not build this section: {type(e).__name__}: {e}", all_of_it=True)
        return s


def build_report(
    nodes: Sequence[NodeSource],
    opts: Options,
    *,
    profile: Any = None,
    generated_at: str,
    progress: Callable[[str], None] = lambda _m: None,
    stability: Callable[[float], Section] | None = None,
) -> dict[str, Any]:
    """Gather every section of :data:`SECTIONS` and return the report (redacted).

    Args:
        nodes: the pair's nodes, head first.
        opts: see :class:`Options`.
        profile: the served model's loaded profile (``None``: the health suite is not run and
            preflight has no profile to judge against).
        generated_at: the report's time (UTC, ISO 8601): given, so a fixture's report is the same
            every time.
        progress: called with one line per step.
        stability: the stability watch over ``window_s`` (``None``: the nodes' logs are scanned).

    Returns:
        ``{"schema", "meta", "sections": [ {id, title, state, why, data}, ... ]}``, every
        string through :func:`sparkpair_serving.apikey.redact`.
    """
    t0 = time.monotonic()
    progress(f"reading {len(nodes)} nodes (at most {opts.node_timeout_s:g} s each)")
    facts: list[NodeFacts] = []
    box: dict[str, NodeFacts] = {}
    threads = [
        threading.Thread(
            target=lambda n=n: box.__setitem__(n.name, collect_bounded(n, opts, profile)), daemon=True
        )
        for n in nodes
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    facts = [box[n.name] for n in nodes]
    sections: dict[str, Section] = {}
    sections["image"] = guarded("image", section_image, facts)
    secrets: list[tuple[str, SecretStr]] = []
    try:
        sections["env"], secrets = section_env(facts)
    except Exception as e:  # noqa: BLE001 - named in the section (its secrets are still removed below)
        sections["env"] = guarded("env", _raise, e)
        secrets = [
            (f"{f.name}: {k}", SecretStr(str(v)))
            for f in facts
            if isinstance((f.inspect or {}).get("env"), dict)
            for k, v in f.inspect["env"].items()  # type: ignore[index]
            if SECRET_NAME.search(str(k)) and v
        ]
    sections["preflight"] = guarded("preflight", section_preflight, facts)
    sections["nccl"] = guarded("nccl", section_nccl, facts, opts)
    sections["kernels"] = guarded("kernels", section_kernels, facts)

    client, model = None, None
    if opts.base_url:
        from sparkpair_health.client import HealthClient

        client = HealthClient(opts.base_url, opts.api_key, request_timeout_s=opts.request_timeout_s)
        try:
            r = client.get("/v1/models", timeout_s=min(30.0, opts.request_timeout_s))
            model = r.json()["data"][0]["id"] if r.status_code == 200 else None
        except Exception:  # noqa: BLE001, S110 - named in the sections that need it
            model = None
    deadline = time.monotonic() + opts.time_limit_s
    progress("health verdict")
    sections["health"] = guarded("health", section_health, opts, profile, deadline)
    progress("accuracy set")
    sections["accuracy"] = guarded("accuracy", section_accuracy, opts, model, client, deadline)
    if client is not None:
        client.close()
    image = next((str(f.inspect.get("image")) for f in facts if f.inspect), None)
    if opts.bench:
        progress("sparkpair bench")
    sections["bench"] = guarded("bench", section_bench, opts, None, image)
    for n, f in zip(nodes, facts, strict=True):  # GPU state after the load
        if f.gpu and not f.timed_out:
            sample, _ = gpu_sample(n)
            if sample:
                f.gpu.append(sample)
    sections["gpu"] = guarded("gpu", section_gpu, facts)
    if stability is not None:
        progress(f"stability over the window ({opts.window_s:g} s)")
        sections["stability"] = guarded(
            "stability", stability, max(0.0, opts.window_s - (time.monotonic() - t0))
        )
    else:
        sections["stability"] = guarded("stability", section_stability_recorded, facts)
    now = {
        "versions": sections["image"].data.get("nodes"),
        "accuracy": {k: sections["accuracy"].data.get(k) for k in ("correct", "asked", "of")},
        "bench": (sections["bench"].data or {}).get("result") or [],
    }
    sections["compare"] = guarded("compare", section_compare, opts, now)
    sections["summary"] = guarded("summary", summary, sections, facts, opts)
    report = {
        "schema": REPORT_SCHEMA,
        "meta": {
            "generated_at": generated_at,
            "nodes": [f.name for f in facts],
            "base_url": opts.base_url,
            "gateway": opts.gateway,
        },
        "sections": [asdict(sections[sid]) for sid, _t in SECTIONS],
    }
    return finish(report, opts, secrets)


def summary(sections: dict[str, Section], facts: list[NodeFacts], opts: Options) -> Section:
    s = Section("summary", dict(SECTIONS)["summary"])
    states = {sid: sections[sid].state for sid, _t in SECTIONS if sid in sections}
    verdict = None
    h = sections["health"].data
    if h.get("source") == "gateway":
        verdict = (h.get("readyz") or {}).get("status")
        verdict = "ready" if verdict == 200 else f"not ready (/readyz {verdict})" if verdict else None
    elif h.get("source") == "suite":
        verdict = "passed" if h["report"].get("passed") else "failed"
    acc = sections["accuracy"].data
    s.data = {
        "sections": states,
        "nodes": [
            {"name": f.name, "read": f.inspect is not None and not f.timed_out, "where": f.where}
            for f in facts
        ],
        "verdict": verdict,
        "accuracy": f"{acc['correct']}/{acc['asked']}" if acc.get("asked") else None,
        "same_plan": sections["kernels"].data.get("same_plan"),
        "cuda": "yes" if any(f.gpu for f in facts) else NO_CUDA,
    }
    for sid, st in states.items():
        if st != "filled":
            s.why.append(f"{sid}: {st}")
    return s


def finish(report: dict[str, Any], opts: Options, secrets: Sequence[tuple[str, SecretStr]]) -> dict[str, Any]:
    """The report with every string redacted (see the module docstring).

    A secret too short to be searched for in free text (:func:`sparkpair_serving.apikey.searchable`)
    is removed only where a whole value is it; each such secret is named (never shown) in
    ``meta.warnings`` and in the summary, so the owner knows a log line or an answer may still
    hold it."""
    from sparkpair_serving.apikey import MIN_RUN, Private, redact, searchable

    named = [*secrets, *opts.extra_tokens]
    if opts.api_key is not None:
        named.append(("the API key", opts.api_key))
    short = sorted({where for where, v in named if not searchable(v.get_secret_value())})
    warnings = [
        f"{where}: the secret is shorter than {MIN_RUN} characters, too short to be searched for in "
        "free text (it would blank ordinary words and numbers): it is removed only where a whole "
        "value is it; a log line or an answer may still hold it -- read the page before sharing it, "
        f"and use a secret of {MIN_RUN} or more characters"
        for where in short
    ]
    report.setdefault("meta", {})["warnings"] = warnings
    for s in report.get("sections") or []:
        if s.get("id") == "summary":
            s["why"] = [*s.get("why", []), *warnings]
    private = Private(
        tokens=tuple(v for _w, v in named if v is not opts.api_key),
        hosts=tuple(opts.private_hosts),
        run_root=opts.run_root,
        strip_paths=True,
    )
    out: dict[str, Any] = clip(redact(report, opts.api_key, private))
    return out


CLIP_CHARS = 4000
"""Longest string a report keeps (characters): a traceback or an answer is cut here, after the
redaction, so that a cut can never leave a piece of a secret too short to be recognised."""


def clip(obj: Any) -> Any:
    """``obj`` with every string longer than :data:`CLIP_CHARS` cut, saying how much was cut."""
    if isinstance(obj, str) and len(obj) > CLIP_CHARS:
        return obj[:CLIP_CHARS] + f" ... ({len(obj) - CLIP_CHARS} characters cut)"
    if isinstance(obj, dict):
        return {k: clip(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clip(v) for v in obj]
    return obj
