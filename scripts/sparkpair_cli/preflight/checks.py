"""The preflight check groups of one node, how they run, and the comparisons across nodes.

The checks themselves live by concern: :mod:`.fabric`, :mod:`.memory` (host),
:mod:`.toolchain` (ptxas, FlashInfer, DeepGEMM) and :mod:`.checkpoint`; their shared types in
:mod:`.result`; the stable result ids (what SPARKPAIR_PREFLIGHT_WAIVE lists) in :mod:`.ids`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from sparkpair_serving.inputs import read_small_file

from ..deploy.nodeenv import NodeEnv
from .checkpoint import check_checkpoint
from .fabric import check_gid, check_netdev, check_rdma
from .host import Host
from .memory import check_cma, check_driver, check_logind, check_memory, check_shm
from .nccl import check_nccl_library
from .result import Ctx, Report, Result, Status
from .toolchain import check_deepgemm, check_flashinfer_table, check_ptxas

LOCAL_CHECKS: dict[str, Callable[[Ctx], None]] = {
    "rdma": check_rdma,
    "netdev": check_netdev,
    "gid": check_gid,
    "memory": check_memory,
    "cma": check_cma,
    "shm": check_shm,
    "logind": check_logind,
    "driver": check_driver,
    "ptxas": check_ptxas,
    "flashinfer": check_flashinfer_table,
    "deepgemm": check_deepgemm,
    "checkpoint": check_checkpoint,
    "nccl": check_nccl_library,
}
"""Check groups of ``preflight --local``, in order. Result ids (what SPARKPAIR_PREFLIGHT_WAIVE
names) are listed by ``sparkpair preflight --list``."""


IMAGE_GROUPS: dict[str, str] = {
    "ptxas": "the ptxas Triton uses",
    "flashinfer": "FlashInfer's DSv4 decode table",
    "deepgemm": "the DeepGEMM vLLM loads",
    "nccl": "the NCCL vLLM loads",
    "checkpoint": "the checkpoint under HF_HOME (/models in the container)",
}
"""Check groups that judge the Python packages and paths of the process that runs them: on the
host they judge the host's, not those of the image the node serves with."""


def in_image_note(env: NodeEnv, env_file: Path | None, only: list[str] | None) -> str:
    """What a preflight run on the host says about :data:`IMAGE_GROUPS`, and the exact command that
    runs those groups inside the image on this node (``docker compose ... run`` of this node's
    service, from the checkout, with this env file)."""
    from sparkpair_serving.profile import CONFIGS_DIR

    from ..deploy.compose_cli import ComposeUnavailable, find_compose

    groups = [g for g in IMAGE_GROUPS if not only or g in only]
    if not groups:
        return ""
    try:
        compose = " ".join(find_compose().argv)
    except ComposeUnavailable:
        compose = "docker compose"
    role = env.role
    checkout = CONFIGS_DIR.parent
    ef = env_file.resolve() if env_file else Path("configs/node.env")
    judged = "; ".join(f"{g}: {IMAGE_GROUPS[g]}" for g in groups)
    return (
        f"node {env.SPARKPAIR_NODE_NAME}: run on the host, these checks judged this host's packages and "
        f"paths, not the image's: {judged}. Run them inside the image on this node:\n"
        f"  cd {checkout} && {compose} --env-file {ef} --profile {role} run --rm --no-deps {role} "
        f"preflight --only {','.join(groups)}"
    )


def run_local(env: NodeEnv, profile: Any, root: Path = Path("/"), only: list[str] | None = None) -> Report:
    """Run every local check (or the groups in ``only``) on this node."""
    c = Ctx(env, profile, Host(root))
    for name, fn in LOCAL_CHECKS.items():
        if only and name not in only:
            continue
        try:
            fn(c)
        except Exception as e:  # noqa: BLE001 - a crashing check is a failed check, named
            c.add(name, "fail", f"check {name}", f"crashed: {type(e).__name__}: {e}", "a result")
    return c.report


class PreflightInputError(ValueError):
    """Bad input to ``preflight`` (a ``--only`` group, a ``--compare`` file, a ``--facts-out``
    path), worded to print as is."""


def parse_only(only: str) -> list[str] | None:
    """The check groups of a ``--only`` comma list (None: all).

    Raises:
        PreflightInputError: a name that is not in :data:`LOCAL_CHECKS`.
    """
    names = [x.strip() for x in only.split(",") if x.strip()]
    if only.strip() and not names:
        raise PreflightInputError(f"--only {only!r}: no check group named; known: {','.join(LOCAL_CHECKS)}")
    bad = [x for x in names if x not in LOCAL_CHECKS]
    if bad:
        what = "no such check group" if len(bad) == 1 else "no such check groups"
        raise PreflightInputError(f"--only {','.join(bad)!r}: {what}; known: {','.join(LOCAL_CHECKS)}")
    return names or None


REPORT_LIMIT_BYTES = 16 * 1024 * 1024
"""Largest ``--facts-out`` report ``--compare`` reads (bytes). A report is a few KiB (the
recorded hosts' reports in ``tests/fixtures/hosts`` are under 10 KiB); the cap only stops
``/dev/zero`` or a log named by mistake from filling the memory."""


def load_report(path: Path) -> dict[str, Any]:
    """A node's report written by ``preflight --facts-out``, for ``--compare``.

    At most :data:`REPORT_LIMIT_BYTES` are read, from a regular file only (a FIFO or a device
    is refused, never waited on).

    Raises:
        PreflightInputError: unreadable, not a regular file, too large, not UTF-8, not JSON, or
            not a report object.
    """
    wanted = "wanted a --facts-out file"
    try:
        data = read_small_file(path, REPORT_LIMIT_BYTES)
    except OSError as e:
        raise PreflightInputError(f"{path}: cannot read it ({e.strerror or e}); {wanted}") from None
    except ValueError as e:  # not a regular file, or over the cap: the kind, never the content
        raise PreflightInputError(f"{path}: {str(e).split(';')[0]}; {wanted}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise PreflightInputError(
            f"{path}: not UTF-8 text / not JSON (byte 0x{data[e.start]:02x} at offset {e.start}); {wanted}"
        ) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise PreflightInputError(
            f"{path}: not JSON ({e.msg} at line {e.lineno} column {e.colno}); {wanted}"
        ) from None
    if not isinstance(obj, dict):
        raise PreflightInputError(
            f"{path}: not a preflight report (top level is a {type(obj).__name__}, not an object); {wanted}"
        )
    if "node" not in obj:
        raise PreflightInputError(f"{path}: not a preflight report (no 'node'); {wanted}")
    if not isinstance(obj["node"], str) or not obj["node"]:
        raise PreflightInputError(
            f"{path}: not a preflight report (node={obj['node']!r}, wanted a node name); {wanted}"
        )
    facts = obj.get("facts", {})
    if not isinstance(facts, dict):
        raise PreflightInputError(
            f"{path}: not a preflight report (facts is a {type(facts).__name__}, wanted an object); {wanted}"
        )
    results = obj.get("results", [])
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and isinstance(r.get("id"), str) and r.get("status") in ("pass", "warn", "fail")
        for r in results
    ):
        raise PreflightInputError(
            f"{path}: not a preflight report (results is not a list of objects with an id and a "
            f"status pass/warn/fail); {wanted}"
        )
    return obj


def load_reports(paths: list[Path]) -> list[dict[str, Any]]:
    """The reports of ``paths`` (:func:`load_report`), one per node.

    Raises:
        PreflightInputError: as :func:`load_report`; or one file given twice, or two files
            holding the same node's report (a comparison would silently merge them).
    """
    reports = [load_report(p) for p in paths]
    seen_files: dict[tuple[int, int], Path] = {}
    seen_nodes: dict[str, Path] = {}
    for path, rep in zip(paths, reports, strict=True):
        st = path.stat()
        key = (st.st_dev, st.st_ino)
        if key in seen_files:
            raise PreflightInputError(
                f"--compare: file {path} given twice (also as {seen_files[key]}); wanted each "
                "node's report once"
            )
        seen_files[key] = path
        node = rep["node"]
        if node in seen_nodes:
            raise PreflightInputError(
                f"--compare: node {node} given twice ({seen_nodes[node]}, {path}); wanted one "
                "report per node (the newest --facts-out file of each)"
            )
        seen_nodes[node] = path
    return reports


def check_facts_out(path: Path) -> None:
    """Refuse a ``--facts-out`` path the report could not be written to, before any check runs.

    Raises:
        PreflightInputError: a folder, a parent that is missing or not a folder, or unwritable.
    """
    wanted = "wanted a writable file path"
    if path.is_dir():
        raise PreflightInputError(f"--facts-out {path}: is a folder; {wanted}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise PreflightInputError(f"--facts-out {path}: folder {parent} does not exist; {wanted}")
    if not parent.is_dir():
        raise PreflightInputError(f"--facts-out {path}: {parent} is not a folder; {wanted}")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise PreflightInputError(f"--facts-out {path}: not writable; {wanted}")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise PreflightInputError(f"--facts-out {path}: folder {parent} is not writable; {wanted}")


COMPARED_FACTS: tuple[tuple[str, str, str, Status], ...] = (
    ("kernel", "same-kernel", "kernel release", "warn"),
    ("driver", "same-driver", "NVIDIA driver", "warn"),
    ("fabric_mtu", "same-mtu", "fabric MTU", "fail"),
    ("gid_index", "same-gid-index", "NCCL_IB_GID_INDEX (resolved)", "fail"),
    ("gid_type", "same-gid-type", "type of the GID entry NCCL uses", "fail"),
    ("nccl_version", "same-nccl", "NCCL version vLLM loads", "fail"),
)
"""``(fact, result id, what, status when the nodes differ)`` compared by ``--compare``."""


def compare(reports: list[dict[str, Any]]) -> list[Result]:
    """Cross-node comparisons of the nodes' reports (``--facts-out`` JSON, :func:`load_report`).

    Every fact of :data:`COMPARED_FACTS` must be equal on every node (a difference is a
    ``fail`` or ``warn`` as listed there; a fact recorded by some nodes only counts as a
    difference, and a must-match fact recorded by no node fails), and every ``fail`` result
    inside a report is a ``fail`` here too, naming its node and check: a comparison of failed
    reports is not a passed comparison.

    Raises:
        PreflightInputError: fewer than two distinct nodes' reports.
    """
    nodes = [r["node"] for r in reports]
    if len(set(nodes)) < 2:
        raise PreflightInputError(
            f"--compare got reports of {len(set(nodes))} distinct node(s) {sorted(set(nodes))} "
            f"from {len(reports)} file(s); wanted one report per node, at least two nodes "
            "(--compare A.json --compare B.json)"
        )
    out: list[Result] = []
    for key, cid, what, differ in COMPARED_FACTS:
        seen = {r["node"]: r.get("facts", {}).get(key) for r in reports}
        values = set(map(str, seen.values()))
        status: Status = "pass" if len(values) == 1 else differ
        if all(v is None for v in seen.values()):
            # recorded by no node: nothing was compared. A fact that must match cannot pass
            # unseen; a warn-class fact (kernel, driver) stays a warning.
            status = "fail" if differ == "fail" else "warn"
        for node, v in seen.items():
            others = {n: x for n, x in seen.items() if n != node}
            note = "" if v is not None else "not in this node's report (run the check group that records it)"
            out.append(
                Result(cid, node, status, what, str(v), f"equal on every node (others: {others})", note)
            )
    for r in reports:
        failed = [x for x in r.get("results", []) if x.get("status") == "fail"]
        for x in failed:
            out.append(
                Result(
                    "reports-pass",
                    r["node"],
                    "fail",
                    f"check {x['id']} in {r['node']}'s report",
                    "fail",
                    "pass or warn on every node",
                    str(x.get("setting", ""))[:80]
                    + (f": {str(x.get('seen', ''))[:120]}" if x.get("seen") else ""),
                )
            )
        if not failed:
            out.append(
                Result("reports-pass", r["node"], "pass", "failed checks in the report", "none", "none")
            )
    return out


def print_report(report: Report | list[Result], console: Console) -> None:
    """A table of results (status, id, message); the ids and messages are data (node names,
    settings and values from reports) and are printed as plain text, never as Rich markup."""
    results = report.results if isinstance(report, Report) else report
    t = Table(show_header=True, header_style="bold")
    t.add_column("status")
    t.add_column("check")
    t.add_column("message", overflow="fold")
    colour = {"pass": "green", "warn": "yellow", "fail": "red"}
    for r in results:
        t.add_row(Text(r.status, style=colour[r.status]), Text(r.id), Text(r.message))
    console.print(t)
    console.print(summary_line(report))


def summary_line(report: Report | list[Result]) -> Text:
    """The verdict under the table: ``FAILED: 2 of 17 checks failed (a, b); 1 warning (c)`` or
    ``passed: 17 checks (1 warning: c)``, naming the node when the report has one."""
    results = report.results if isinstance(report, Report) else report
    who = f"node {report.node}: " if isinstance(report, Report) and report.node else ""
    failed = [r.id for r in results if r.status == "fail"]
    warned = [r.id for r in results if r.status == "warn"]
    n = len(results)
    warn_s = f"{len(warned)} warning{'s' if len(warned) != 1 else ''}"
    if failed:
        line = f"FAILED: {who}{len(failed)} of {n} checks failed ({', '.join(failed)})"
        if warned:
            line += f"; {warn_s} ({', '.join(warned)})"
        return Text(line, style="bold red")
    line = f"passed: {who}{n} check{'s' if n != 1 else ''}"
    if warned:
        line += f" ({warn_s}: {', '.join(warned)})"
    return Text(line, style="bold green" if not warned else "bold yellow")
