"""The two-rank all-reduce between nodes: run it, parse its log, judge it (field bug B05).

The test is :mod:`.allreduce` (torch.distributed, one rank per node) with
``NCCL_DEBUG=INFO``; it prints its results in nccl-tests' ``all_reduce_perf`` table, so the
same parser reads both. The verdict requires:

- data channels ``via NET/IB`` and none ``via NET/Socket`` (nor ``Using network Socket``);
- every listed HCA of NCCL_IB_HCA in NCCL's ``NET/IB : Using [...]`` line (both halves);
- ``busbw`` at the largest size >= the floor (default 15 GB/s: Reederey87's gate; a healthy
  Spark pair measures ~23 GB/s, sockets ~2-3 GB/s, docs/reference/spark-deployments.md#fabric-settings);
- ``busbw = algbw x 2(n-1)/n`` on every row (nccl-tests' all-reduce bus factor), and no
  wrong results.

Buffers are capped (:data:`MAX_BYTES_CAP`): a 16 GB validation run froze a Spark (B05).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..deploy.nodeenv import NodeEnv

MAX_BYTES_CAP = 4 << 30
"""Largest all-reduce buffer allowed (4 GiB; B05: 16 GB exhausted unified memory)."""

BUS_FACTOR_TOL = 0.02
"""Relative tolerance when re-deriving busbw from algbw (table values have 2 decimals)."""


@dataclass(frozen=True)
class Row:
    """One size of the table: bytes, out-of-place time (µs), algbw and busbw (GB/s), #wrong."""

    size: int
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None


@dataclass
class NcclLog:
    """What a log says about the data path and the bandwidth."""

    networks: set[str] = field(default_factory=set)
    via: dict[str, int] = field(default_factory=dict)
    ib_devices: list[str] = field(default_factory=list)
    nranks: int | None = None
    rows: list[Row] = field(default_factory=list)
    avg_busbw: float | None = None
    warnings: list[str] = field(default_factory=list)


_VIA = re.compile(r"via (NET/IB|NET/Socket|NET/\w+|P2P|SHM)")
_USING_IB = re.compile(r"NET/IB\s*:\s*Using\s+(.*?)(?:;|$)")
_IB_DEV = re.compile(r"\[\d+\]([\w.]+):\d+/(?:RoCE|IB)")
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")


def parse_log(text: str) -> NcclLog:
    """Parse NCCL INFO lines and an all_reduce_perf table (either or both)."""
    out = NcclLog()
    for line in text.splitlines():
        if "NCCL INFO" in line or "NCCL WARN" in line:
            m = re.search(r"Using network (\w+)", line)
            if m:
                out.networks.add(m.group(1))
            for v in _VIA.findall(line):
                out.via[v] = out.via.get(v, 0) + 1
            m = _USING_IB.search(line)
            if m:
                for dev in _IB_DEV.findall(m.group(1)):
                    if dev not in out.ib_devices:
                        out.ib_devices.append(dev)
            if "NET/Socket : Using" in line:
                out.networks.add("Socket")
            m = re.search(r"\bnranks (\d+)", line)
            if m:
                out.nranks = int(m.group(1))
            if "NCCL WARN" in line:
                out.warnings.append(line.split("NCCL WARN", 1)[1].strip())
            continue
        m = re.match(r"#\s*nranks (\d+)", line)
        if m:
            out.nranks = int(m.group(1))
            continue
        m = re.match(r"#\s+Rank\s+(\d+)\s", line)
        if m:
            out.nranks = max(out.nranks or 0, int(m.group(1)) + 1)
            continue
        m = re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", line)
        if m:
            out.avg_busbw = float(m.group(1))
            continue
        m = _ROW.match(line)
        if m and not line.lstrip().startswith("#"):
            wrong = m.group(9)
            out.rows.append(
                Row(
                    int(m.group(1)),
                    float(m.group(6)),
                    float(m.group(7)),
                    float(m.group(8)),
                    int(wrong) if wrong.isdigit() else None,
                )
            )
    return out


@dataclass(frozen=True)
class Verdict:
    """``ok`` and one message listing what was seen and what was wanted."""

    ok: bool
    message: str


def bus_factor(nranks: int) -> float:
    """nccl-tests' all-reduce bus factor ``2 (n - 1) / n`` (nccl-tests doc/PERFORMANCE.md)."""
    return 2.0 * (nranks - 1) / nranks


def judge(
    log: NcclLog,
    *,
    floor_gbps: float,
    transport: str = "IB",
    want_hcas: list[str] | None = None,
    node: str = "pair",
) -> Verdict:
    """Judge a parsed log; see the module docstring for the rules."""
    problems: list[str] = []
    want_via = f"NET/{transport}"
    other = "NET/Socket" if transport == "IB" else "NET/IB"
    if not log.via.get(want_via) and transport not in log.networks:
        problems.append(
            f"data path: {dict(log.via) or 'no channel lines'}, networks {sorted(log.networks) or '?'}; "
            f"wanted channels via {want_via} (run with NCCL_DEBUG=INFO)"
        )
    if log.via.get(other) or (transport == "IB" and "Socket" in log.networks):
        problems.append(
            f"data path: {log.via.get(other, 0)} channels via {other}, networks {sorted(log.networks)}; "
            f"wanted none via {other} (B05)"
        )
    if want_hcas:
        missing = [h for h in want_hcas if h not in log.ib_devices]
        if missing:
            problems.append(
                f"NET/IB devices {log.ib_devices}; wanted every NCCL_IB_HCA device, missing {missing} (B05)"
            )
    if not log.rows:
        problems.append("no all_reduce_perf rows; wanted a bandwidth table")
    else:
        last = max(log.rows, key=lambda r: r.size)
        if last.busbw < floor_gbps:
            problems.append(
                f"busbw at {last.size} B = {last.busbw:.2f} GB/s; wanted >= {floor_gbps:.2f} GB/s"
            )
        if log.nranks:
            f = bus_factor(log.nranks)
            for r in log.rows:
                if r.algbw >= 0.05 and abs(r.algbw * f - r.busbw) > max(0.011, BUS_FACTOR_TOL * r.busbw):
                    problems.append(
                        f"busbw {r.busbw} at {r.size} B; wanted algbw {r.algbw} x 2(n-1)/n "
                        f"(n={log.nranks}) = {r.algbw * f:.2f}"
                    )
                    break
        wrong = sum(r.wrong or 0 for r in log.rows)
        if wrong:
            problems.append(f"{wrong} wrong results; wanted 0")
    if problems:
        return Verdict(False, f"nccl-allreduce on {node}: " + "; ".join(problems))
    last = max(log.rows, key=lambda r: r.size)
    return Verdict(
        True,
        f"nccl-allreduce on {node}: via {want_via} on {log.ib_devices or '?'}, busbw "
        f"{last.busbw:.2f} GB/s at {last.size} B >= {floor_gbps:.2f} GB/s",
    )


def parse_size(text: str) -> int:
    """``"1G"`` / ``"256M"`` / ``"4096"`` to bytes, capped at :data:`MAX_BYTES_CAP`.

    Raises:
        ValueError: not a size, or above the cap.
    """
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise ValueError(f"--max-bytes {text!r}; wanted a size like 1G or 256M")
    n = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    if n > MAX_BYTES_CAP:
        raise ValueError(
            f"--max-bytes {text!r} = {n} B; wanted <= {MAX_BYTES_CAP} B (B05: a 16 GB run froze a node)"
        )
    return n


def allreduce_argv(env: NodeEnv, *, port: int, max_bytes: int, backend: str = "nccl") -> list[str]:
    """argv of this node's rank of the test (rank = SPARKPAIR_NODE_RANK)."""
    return [
        sys.executable, "-m", "sparkpair_cli.preflight.allreduce",
        "--rank", str(env.SPARKPAIR_NODE_RANK), "--world", str(env.SPARKPAIR_NNODES),
        "--master", f"{env.SPARKPAIR_HEAD_ADDR}:{port}", "--max-bytes", str(max_bytes), "--backend", backend,
    ]  # fmt: skip


def run_allreduce(env: NodeEnv, *, port: int, max_bytes: int, environ: Mapping[str, str]) -> str:
    """Run this node's rank with NCCL_DEBUG=INFO and the node's NCCL settings; return the log."""
    run_env = dict(environ)
    run_env.update(env.derived_env())
    run_env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"})
    if env.NCCL_IB_GID_INDEX != "auto":
        run_env["NCCL_IB_GID_INDEX"] = env.NCCL_IB_GID_INDEX
    else:
        run_env.pop("NCCL_IB_GID_INDEX", None)
    r = subprocess.run(
        allreduce_argv(env, port=port, max_bytes=max_bytes),
        env=run_env,
        capture_output=True,
        text=True,
        timeout=float(os.environ.get("SPARKPAIR_NCCL_TIMEOUT_S", "600")),
    )
    return r.stdout + r.stderr
