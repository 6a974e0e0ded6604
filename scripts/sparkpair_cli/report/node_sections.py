"""The report's sections built from what the nodes gave (:class:`~.model.NodeFacts`): image and
versions, environment (redacted), preflight and ``--compare``, NCCL all-reduce, kernels (probe and
plan), GPU samples, and the log findings of a recorded pair.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from typing import Any

from pydantic import SecretStr

from .collect import GPU_QUERY
from .model import NO_CUDA, SECRET_NAME, SECTIONS, NodeFacts, Options, Section

ENV_SHOWN = re.compile(r"^(SPARKPAIR_|VLLM_|NCCL_|CUDA_|TORCH_|TRITON_|HF_|UCX_|GLOO_|OMP_|PYTORCH_)")
"""Environment names a report shows: the pair's own and the serving stack's settings."""


def _why(n: NodeFacts, key: str) -> str:
    """Why ``n`` gave no ``key``, naming the node once."""
    w = n.timed_out or n.why.get(key) or n.why.get("inspect") or "not read"
    return w if w.startswith(f"{n.name}: ") else f"{n.name}: {key}: {w}"


def section_image(nodes: list[NodeFacts]) -> Section:
    s = Section("image", dict(SECTIONS)["image"])
    rows = []
    for n in nodes:
        if n.timed_out or n.inspect is None:
            s.missing(n.timed_out or n.why.get("inspect", f"{n.name}: not read"))
            continue
        if n.why.get("inspect_file"):
            s.missing(n.why["inspect_file"])
        v = n.versions or {}
        if n.versions is None:
            s.missing(f"{n.name}: versions: {n.why.get('versions')}")
        driver = n.gpu[0].get("driver_version") if n.gpu else None
        if driver is None:
            s.missing(f"{n.name}: driver: {n.gpu_why or NO_CUDA}")
        rows.append(
            {
                "node": n.name,
                "image": n.inspect.get("image"),
                "image_id": n.inspect.get("image_id"),
                "digest": (n.inspect.get("digests") or [None])[0],
                **{
                    k: v.get(k)
                    for k in (
                        "vllm",
                        "torch",
                        "triton",
                        "flashinfer",
                        "deepgemm",
                        "nccl",
                        "cuda",
                        "python",
                        "sparkpair",
                    )
                },
                "cuda_device": v.get("device")
                if v.get("cuda_device")
                else NO_CUDA
                if n.versions is not None
                else None,
                "driver": driver,
                "kernel": n.kernel,
            }
        )
        if rows[-1]["digest"] is None:
            s.missing(
                f"{n.name}: the image has no registry digest (built or loaded locally); its id is shown"
            )
    if not rows:
        s.state = "empty"
    ids = [r["image_id"] for r in rows]
    same_image = len(set(ids)) == 1 if len(ids) == 2 and all(ids) else None
    s.data = {
        "nodes": rows,
        "same_image": same_image,
    }
    return s


def section_env(nodes: list[NodeFacts]) -> tuple[Section, list[tuple[str, SecretStr]]]:
    """The shown part of each node's environment, secrets as ``<set>``; and the secrets found,
    each with where it was found (``head: HF_TOKEN``)."""
    s = Section("env", dict(SECTIONS)["env"])
    secrets: list[tuple[str, SecretStr]] = []
    shown: dict[str, dict[str, str]] = {}
    for n in nodes:
        if n.inspect is None:
            s.missing(n.timed_out or n.why.get("inspect", f"{n.name}: not read"))
            continue
        env = n.inspect.get("env", {})
        out: dict[str, str] = {}
        for k in sorted(env):
            v = str(env[k])
            if SECRET_NAME.search(k):
                if v:
                    secrets.append((f"{n.name}: {k}", SecretStr(v)))
                out[k] = f"<set, {len(v)} characters>" if v else "<unset>"
            elif ENV_SHOWN.match(k):
                out[k] = v
        shown[n.name] = out
    if not shown:
        s.state = "empty"
    s.data = {"nodes": shown}
    return s, secrets


def section_preflight(nodes: list[NodeFacts]) -> Section:
    from sparkpair_cli.preflight import checks as pf

    s = Section("preflight", dict(SECTIONS)["preflight"])
    reports = []
    per: dict[str, Any] = {}
    for n in nodes:
        if n.preflight is None:
            s.missing(_why(n, "preflight"))
            continue
        reports.append(n.preflight)
        per[n.name] = [
            {k: r.get(k) for k in ("id", "status", "message")} for r in n.preflight.get("results", [])
        ]
    compared: list[dict[str, Any]] = []
    if len(reports) == 2:
        try:
            compared = [asdict(r) for r in pf.compare(reports)]
        except Exception as e:  # noqa: BLE001
            s.missing(f"--compare of the two reports: {type(e).__name__}: {e}")
    elif reports:
        s.missing("--compare needs both nodes' reports")
    if not per:
        s.state = "empty"
    s.data = {"nodes": per, "compare": compared}
    return s


NCCL_LOG_MAX_BYTES = 64 * 1024 * 1024
"""Largest --nccl-log read (bytes): an all-reduce log is tens of KiB; ``sparkpair report``
refuses a bigger one before gathering (the same bound)."""


def section_nccl(nodes: list[NodeFacts], opts: Options) -> Section:
    from sparkpair_cli.preflight import nccl

    s = Section("nccl", dict(SECTIONS)["nccl"])
    logs: list[tuple[str, str]] = []
    if opts.nccl_log is not None:
        from sparkpair_serving.inputs import read_small_file

        try:
            raw = read_small_file(opts.nccl_log, NCCL_LOG_MAX_BYTES)
            logs.append(("--nccl-log", raw.decode("utf-8", errors="replace")))
        except OSError as e:
            s.missing(f"--nccl-log {opts.nccl_log}: {e.strerror}")
        except ValueError as e:
            s.missing(f"--nccl-log {opts.nccl_log}: {e}")
    else:
        for n in nodes:
            if n.nccl_log:
                logs.append((n.name, n.nccl_log))
    if not logs:
        s.missing(
            "no NCCL all-reduce log: run `sparkpair nccl-allreduce` on both nodes (it leaves "
            "$TMPDIR/sparkpair-nccl-allreduce.log in the container), or pass --nccl-log",
            all_of_it=True,
        )
        return s
    out = []
    for src, text in logs:
        parsed = nccl.parse_log(text)
        verdict = nccl.judge(parsed, floor_gbps=15.0)
        out.append(
            {
                "source": src,
                "ok": verdict.ok,
                "verdict": verdict.message,
                "networks": sorted(parsed.networks),
                "via": parsed.via,
                "nranks": parsed.nranks,
                "avg_busbw_gbps": parsed.avg_busbw,
                "rows": [asdict(r) for r in parsed.rows],
            }
        )
    s.data = {"logs": out, "floor_gbps": 15.0}
    return s


def _probe_tables(probe: dict[str, Any]) -> dict[str, Any]:
    """The probe's per-backend timings and choices, as the kernel section shows them."""
    return {
        "schema": probe.get("schema"),
        "vllm": probe.get("vllm"),
        "capability": probe.get("capability"),
        "device": probe.get("device"),
        "seconds": probe.get("seconds"),
        "router": probe.get("router") or [],
        "o_proj": probe.get("o_proj") or [],
        "o_proj_decision": probe.get("o_proj_decision"),
        "serve_paths": probe.get("serve_paths") or [],
        "serve_choice": probe.get("serve_choice"),
        "kernel_paths": [
            {
                k: r.get(k)
                for k in (
                    "config",
                    "path",
                    "tokens",
                    "layout",
                    "ok",
                    "us",
                    "err",
                    "triton",
                    "instructions",
                    "error",
                )
            }
            for r in probe.get("kernel_paths") or []
        ],
        "kernel_path_decision": probe.get("kernel_path_decision"),
        "serve_paths_skipped": probe.get("serve_paths_skipped"),
    }


def section_kernels(nodes: list[NodeFacts]) -> Section:
    s = Section("kernels", dict(SECTIONS)["kernels"])
    per: dict[str, Any] = {}
    for n in nodes:
        d: dict[str, Any] = {"plan_lines": n.plan_lines}
        if n.probe is not None:
            d["probe"] = _probe_tables(n.probe)
        else:
            s.missing(_why(n, "probe"))
        if n.plan is not None:
            p = n.plan
            d["plan"] = {
                k: p.get(k)
                for k in (
                    "schema",
                    "vllm_version",
                    "capability",
                    "capability_source",
                    "router",
                    "o_proj",
                    "o_proj_configs",
                    "serve_paths",
                    "notes",
                    "line",
                )
            }
        else:
            s.missing(_why(n, "plan"))
        if not n.plan_lines and n.log is not None:
            s.missing(
                f"{n.name}: no 'sparkpair overlay plan:' line in the container's log (the overlay did "
                "not load, or the log was cut)"
            )
        triton = sorted(
            {str(r.get("triton")) for r in (n.probe or {}).get("kernel_paths") or [] if r.get("triton")}
        )
        d["triton_in_probe"] = triton
        if n.versions is not None and not (n.versions.get("cuda_device")):
            d["device"] = NO_CUDA
        per[n.name] = d
    names = [n.name for n in nodes]
    lines = [set(per[x]["plan_lines"]) for x in names if per.get(x)]
    same: bool | None = None
    if len(lines) == 2 and all(lines):
        same = lines[0] == lines[1]
    elif len(nodes) == 2:
        s.missing("whether head and worker run the same plan: a plan line is missing on one node")
    if not any(("probe" in d or "plan" in d or d["plan_lines"]) for d in per.values()):
        s.state = "empty"
    s.data = {"nodes": per, "same_plan": same}
    return s


def section_gpu(nodes: list[NodeFacts]) -> Section:
    s = Section("gpu", dict(SECTIONS)["gpu"])
    per: dict[str, Any] = {}
    for n in nodes:
        if n.gpu:
            per[n.name] = {"samples": n.gpu}
        else:
            why = n.timed_out or n.gpu_why or n.why.get("inspect") or NO_CUDA
            per[n.name] = {"samples": [], "why": why}
            s.missing(f"{n.name}: {why}")
    if not any(d["samples"] for d in per.values()):
        s.state = "empty"
    s.data = {"nodes": per, "query": GPU_QUERY}
    return s


def section_stability_recorded(nodes: list[NodeFacts]) -> Section:
    """Log findings of each node's log (the recorded case: no engine to watch)."""
    from sparkpair_health.logscan import scan_text

    s = Section("stability", dict(SECTIONS)["stability"])
    per: dict[str, Any] = {}
    for n in nodes:
        if n.log is None:
            s.missing(_why(n, "log"))
            continue
        res = json.loads(scan_text(n.log).to_json())
        per[n.name] = {
            "lines": res["lines"],
            "fatal": res["fatal"],
            "notes": res["notes"],
            "findings": [
                {
                    "severity": f["severity"],
                    "id": f["pattern"]["id"],
                    "count": f["count"],
                    "first_line_no": f["first_line_no"],
                    "samples": f["samples"],
                    "meaning": f["pattern"]["meaning"],
                    "fix": f["pattern"]["fix"],
                }
                for f in res["findings"]
            ],
        }
    if not per:
        s.state = "empty"
    s.data = {"nodes": per, "window_s": None, "source": "container logs"}
    return s
