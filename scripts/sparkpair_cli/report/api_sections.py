"""The report's sections read from the serving pair's API and from this run: the health verdict
(the gateway's, or the health suite run here), the accuracy set, ``sparkpair bench``, earlier reports
(``--compare``), and the stability watch over the window.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from .model import SECTIONS, Options, Section


def load_accuracy_set() -> dict[str, Any]:
    """The shipped accuracy set (``sparkpair_cli/data/report-accuracy.json``)."""
    text = resources.files("sparkpair_cli").joinpath("data/report-accuracy.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


_WORD = re.compile(r"[a-z0-9.]+")


def score_answer(answer: str, accept: Sequence[str]) -> bool:
    """``answer`` scores when its first non-empty line, lower-cased, holds one accepted answer as a
    whole word (``42`` in ``The answer is 42.``, not in ``420``); see the set's ``about``."""
    first = next((ln for ln in answer.strip().splitlines() if ln.strip()), "").lower()
    words = [w.strip(".") for w in _WORD.findall(first)]
    joined = " ".join(words)
    for a in accept:
        want = " ".join(w.strip(".") for w in _WORD.findall(a.lower()))
        if want and re.search(rf"(?<![a-z0-9.]){re.escape(want)}(?![a-z0-9])", joined):
            return True
    return False


def section_accuracy(opts: Options, model: str | None, client: Any, deadline: float) -> Section:
    s = Section("accuracy", dict(SECTIONS)["accuracy"])
    qset = load_accuracy_set()
    if not opts.accuracy:
        s.missing("not asked for (--no-accuracy)", all_of_it=True)
        return s
    if client is None or model is None:
        where = f"{opts.base_url}/v1/models did not answer" if opts.base_url else "no API given (--base-url)"
        s.missing(f"no served model: {where}", all_of_it=True)
        return s
    rows = []
    for q in qset["questions"]:
        if time.monotonic() > deadline:
            s.missing(
                f"stopped after {len(rows)} of {len(qset['questions'])} questions: the run's time bound "
                "was reached"
            )
            break
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": qset["system"]},
                {"role": "user", "content": q["question"]},
            ],
            "temperature": 0,
            "max_tokens": opts.accuracy_max_tokens,
        }
        try:
            r = client.post("/v1/chat/completions", body, timeout_s=opts.request_timeout_s)
            if r.status_code != 200:
                rows.append(
                    {
                        "id": q["id"],
                        "ok": False,
                        "answer": None,
                        "error": f"HTTP {r.status_code}: {client.redact_body(r.text)}",
                    }
                )
                continue
            msg = r.json()["choices"][0]["message"]
            answer = str(msg.get("content") or "")
            rows.append(
                {
                    "id": q["id"],
                    "ok": score_answer(answer, q["accept"]),
                    "answer": answer,
                    "accept": q["accept"],
                }
            )
        except Exception as e:  # noqa: BLE001 - one failed question is a row, not the end
            rows.append({"id": q["id"], "ok": False, "answer": None, "error": f"{type(e).__name__}: {e}"})
    errors = [r for r in rows if r.get("error")]
    if errors and len(errors) == len(rows):
        s.missing(f"every question failed: {errors[0]['error']}", all_of_it=True)
    elif errors:
        s.missing(f"{len(errors)} of {len(rows)} questions got no answer")
    s.data = {
        "schema": qset["schema"],
        "about": qset["about"],
        "model": model,
        "asked": len(rows),
        "correct": sum(1 for r in rows if r["ok"]),
        "of": len(qset["questions"]),
        "rows": rows,
    }
    return s


def section_health(opts: Options, profile: Any, deadline: float) -> Section:
    import httpx

    s = Section("health", dict(SECTIONS)["health"])
    if opts.gateway:
        data: dict[str, Any] = {"source": "gateway"}
        for path in ("/readyz", "/report"):
            try:
                r = httpx.get(opts.gateway.rstrip("/") + path, timeout=min(30.0, opts.request_timeout_s))
                data[path.strip("/")] = {"status": r.status_code, "body": r.json()}
            except (httpx.HTTPError, ValueError) as e:
                s.missing(f"gateway {path}: {type(e).__name__}: {e}")
        rep = (data.get("report") or {}).get("body") or {}
        if not rep.get("checks"):
            s.missing("the gateway has no report yet (its first suite has not finished)")
        s.data = data
        if "readyz" not in data and "report" not in data:
            s.state = "empty"
        return s
    if not opts.base_url:
        s.missing("no gateway (--gateway URL) and no API (--base-url) for the health suite", all_of_it=True)
        return s
    if profile is None:
        s.missing(
            "no gateway (--gateway URL) and no profile (--profile or SPARKPAIR_PROFILE) for the health suite",
            all_of_it=True,
        )
        return s
    from sparkpair_health.checks import check_list
    from sparkpair_health.suite import SuiteSettings, Timeouts, run_suite

    left = max(10.0, deadline - time.monotonic())
    settings = SuiteSettings(
        base_url=opts.base_url,
        profile=profile,
        api_key=opts.api_key,
        timeouts=Timeouts(ready_s=min(60.0, left), request_s=min(opts.request_timeout_s, left)),
    )
    box: list[Any] = []
    t = threading.Thread(
        target=lambda: box.append(run_suite(settings, checks=check_list(settings.resolved_profile()))),
        daemon=True,
    )
    t.start()
    t.join(left)
    if not box:
        s.missing(f"the health suite did not finish within {left:.0f} s", all_of_it=True)
        return s
    report = box[0]
    s.data = {"source": "suite", "report": json.loads(report.to_json())}
    return s


# --------------------------------------------------------------------------- bench and compare


def section_bench(opts: Options, profile_name: str | None, image: str | None) -> Section:
    from sparkpair_cli.bench import reference

    s = Section("bench", dict(SECTIONS)["bench"])
    s.data = {"reference": reference.as_json(), "reference_source": reference.FIELD_NOTES}
    if not opts.bench:
        s.missing("not asked for (--bench runs `sparkpair bench` on the standard workload)", all_of_it=True)
        return s
    out = opts.bench_dir or Path(opts.run_root or ".") / "bench"
    argv = [
        sys.executable,
        "-m",
        "sparkpair_cli.main",
        "bench",
        "--base-url",
        str(opts.base_url),
        "--workload",
        opts.bench_workload,
        "--out",
        str(out),
        "--no-plots",
    ]
    if image:
        argv += ["--image", image]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=opts.bench_timeout_s, check=False)
    except subprocess.TimeoutExpired:
        s.missing(
            f"sparkpair bench did not finish within {opts.bench_timeout_s:g} s (--bench-timeout)",
            all_of_it=True,
        )
        return s
    result_path = out / "result.json"
    if not result_path.is_file():
        s.missing(
            f"sparkpair bench exited {r.returncode} without a result: {r.stderr.strip()}", all_of_it=True
        )
        return s
    result = json.loads(result_path.read_text())
    if r.returncode != 0:
        s.missing(
            f"sparkpair bench exited {r.returncode} (failed cells or request errors; the cells are shown)"
        )
    s.data |= {
        "exit": r.returncode,
        "workload": opts.bench_workload,
        "result": bench_rows(result),
        "provenance": result.get("provenance"),
    }
    return s


def bench_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per cell: its id, concurrency, context and the headline metrics ``sparkpair bench``
    prints (:data:`sparkpair_cli.bench.report.METRICS`), keyed by their summary path."""
    from sparkpair_cli.bench.report import METRICS, metric_value

    rows = []
    for c in result.get("cells", []):
        summ = c.get("summary") or {}
        row: dict[str, Any] = {
            "id": c.get("id"),
            "status": c.get("status"),
            "concurrency": c.get("concurrency"),
            "context_tokens": c.get("context_tokens"),
            "errors": summ.get("errors"),
        }
        for _label, _unit, path, _higher in METRICS:
            row[path[0]] = metric_value(summ, path)
        sm = (c.get("server_metrics") or {}).get("summary") or {}
        row["spec_acceptance_rate"] = sm.get("spec_acceptance_rate")
        rows.append(row)
    return rows


def section_compare(opts: Options, now: dict[str, Any]) -> Section:
    from .html import ReportFileError, read_report_data

    s = Section("compare", dict(SECTIONS)["compare"])
    if not opts.compare:
        s.missing("no earlier report given (--compare report.html)", all_of_it=True)
        return s
    earlier = []
    for p in opts.compare:
        try:
            d = read_report_data(p)
        except ReportFileError as e:
            s.missing(str(e))
            continue
        secs = {x["id"]: x for x in d.get("sections", [])}
        earlier.append(
            {
                "file": p.name,
                "generated_at": (d.get("meta") or {}).get("generated_at"),
                "versions": [
                    {k: r.get(k) for k in ("node", "vllm", "triton", "torch", "image_id")}
                    for r in (secs.get("image", {}).get("data", {}).get("nodes") or [])
                ],
                "accuracy": {
                    k: (secs.get("accuracy", {}).get("data") or {}).get(k) for k in ("correct", "asked", "of")
                },
                "bench": (secs.get("bench", {}).get("data") or {}).get("result") or [],
            }
        )
    if not earlier:
        s.state = "empty"
    s.data = {"earlier": earlier, "now": now}
    return s


def stability_watch(
    nodes: Sequence[Any], kernel_log: str = "none", docker_timeout_s: float = 20.0
) -> Callable[[float], Section]:
    """Start the stability watch (:class:`sparkpair_health.stability.StabilityMonitor`) on the
    serving containers of ``nodes`` (:class:`~.nodes.DockerNode`) now, and return the call that,
    ``wait_s`` seconds later, looks again and gives the section: restarts and OOM-kills since the
    start, and the log findings of every container (and of the kernel log with ``kernel_log``)."""
    from sparkpair_health.stability import StabilityMonitor, StabilityNode, StabilitySettings

    t0 = time.monotonic()
    s = Section("stability", dict(SECTIONS)["stability"])
    try:
        settings = StabilitySettings(
            nodes=[
                StabilityNode(
                    name=n.name,
                    docker_url=n.docker_url,
                    containers=[n.container],
                    kernel_log=kernel_log if i == 0 else "none",
                )
                for i, n in enumerate(nodes)
            ],
            docker_timeout_s=docker_timeout_s,
            log_tail=20000,
        )
        monitor: Any = StabilityMonitor(settings)
        first = monitor.check()
    except Exception as e:  # noqa: BLE001 - named in the section
        monitor, first = None, None
        s.missing(f"the stability watch could not start: {type(e).__name__}: {e}", all_of_it=True)

    def finish(wait_s: float) -> Section:
        if monitor is None or first is None:
            return s
        time.sleep(wait_s)
        rep = monitor.check()
        d = rep.to_dict()
        for f in d["findings"]:
            if f.get("severity") == "error":
                s.missing(f"{f.get('node')}: {f.get('message')}")
        s.data = {
            "window_s": round(time.monotonic() - t0, 1),
            "status": d["status"],
            "message": d["message"],
            "containers": d["containers"],
            "findings": d["findings"],
            "sources": d["sources"],
            "kernel_log": kernel_log,
        }
        if kernel_log == "none":
            s.missing("the host kernel log was not read (--kernel-log local on the head reads it)")
        return s

    return finish
