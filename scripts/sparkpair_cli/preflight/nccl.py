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
from pathlib import Path
from typing import Any

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
    timeout_s = float(os.environ.get("SPARKPAIR_NCCL_TIMEOUT_S", "600"))
    try:
        r = subprocess.run(
            allreduce_argv(env, port=port, max_bytes=max_bytes),
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired as e:
        out = [
            x.decode(errors="replace") if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr)
        ]
        return "".join(out) + (
            f"\n# sparkpair: no result within SPARKPAIR_NCCL_TIMEOUT_S={timeout_s:g} s (the other node never "
            "joined, or the collective hung); the rank was stopped\n"
        )
    return r.stdout + r.stderr


# --- the NCCL library vLLM loads (docs/reference/nccl.md) ----------------------------


@dataclass(frozen=True)
class KnownBadNccl:
    """NCCL versions ``first <= v < fixed`` (on ``machines``; empty: every machine) that the
    field saw wedge, with the reason and the fix (docs/reference/nccl.md#known-bad-versions)."""

    first: tuple[int, int, int]
    fixed: tuple[int, int, int]
    machines: tuple[str, ...]
    why: str


KNOWN_BAD_NCCL: list[KnownBadNccl] = [
    KnownBadNccl(
        (2, 0, 0),
        (2, 29, 3),
        ("aarch64", "arm64"),
        "NCCL before 2.29.3 can leak proxy-op slots on ARM (a weak compare-exchange whose failure "
        "is not retried) and then spins forever with no error or timeout: the silent collective "
        "wedge under load; fix: an image whose torch links nvidia-nccl-cu13 >= 2.29.3 (torch "
        "2.14.0 links 2.30.7), or VLLM_NCCL_SO_PATH naming such a library",
    ),
    KnownBadNccl(
        (2, 30, 4),
        (2, 30, 5),
        (),
        "NCCL 2.30.4's NVLS path hangs MoE weight loading on Sparks (sm_121, no NVLink); fix: "
        "NCCL 2.30.3 or >= 2.30.7, or NCCL_NVLS_ENABLE=0",
    ),
]
"""The NCCL versions preflight refuses; docs/reference/nccl.md#known-bad-versions gives the
public report behind each entry."""


def known_bad_nccl(version: str, machine: str) -> str | None:
    """The reason (and fix) a :data:`KNOWN_BAD_NCCL` entry gives for NCCL ``version``
    (``"2.28.9"``) on ``machine`` (``platform.machine()``: ``aarch64`` on a Spark), else ``None``.
    A version that is not ``major.minor.patch`` matches nothing."""
    try:
        v = tuple(int(x) for x in version.split("."))
    except ValueError:
        return None
    if len(v) != 3:
        return None
    for bad in KNOWN_BAD_NCCL:
        if bad.first <= v < bad.fixed and (not bad.machines or machine in bad.machines):
            return bad.why
    return None


NCCL_SONAME = "libnccl.so.2"
"""The name vLLM 0.33 asks the dynamic loader for when VLLM_NCCL_SO_PATH is unset
(``vllm/utils/nccl.py: find_nccl_library``, CUDA builds of torch)."""


@dataclass(frozen=True)
class NcclLibrary:
    """The NCCL a node's vLLM will load: ``path`` (None: none found), ``how`` it was chosen,
    and ``version`` (``"2.27.3"``, None when it could not be read, with ``error``)."""

    path: str | None
    how: str
    version: str | None = None
    error: str = ""


def _wheel_nccl() -> str | None:
    """``<site-packages>/nvidia/nccl/lib/libnccl.so.2`` of the nvidia-nccl wheel, if installed:
    CUDA builds of torch link it (RPATH), so it is in the process before vLLM asks for the soname."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        return None
    for loc in getattr(spec, "submodule_search_locations", None) or []:
        p = os.path.join(loc, "lib", NCCL_SONAME)
        if os.path.exists(p):
            return p
    return None


def decode_version(code: int) -> str:
    """``ncclGetVersion``'s integer as ``major.minor.patch``: ``major*10000 + minor*100 + patch``
    (``NCCL_VERSION`` in nccl.h since 2.9; vLLM 0.33 reads it the same way,
    tests/stack/test_nccl_library.py)."""
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def library_version(path: str) -> str:
    """Load ``path`` with ctypes and ask ``ncclGetVersion`` (needs no GPU).

    Raises:
        OSError: the file does not load, has no ``ncclGetVersion``, or the call failed.
    """
    import ctypes

    lib = ctypes.CDLL(path)
    try:
        fn = lib.ncclGetVersion
    except AttributeError:
        raise OSError(f"{path}: no ncclGetVersion symbol (not an NCCL library)") from None
    v = ctypes.c_int(0)
    rc = fn(ctypes.byref(v))
    if rc != 0:
        raise OSError(f"{path}: ncclGetVersion returned {rc}")
    if v.value < 20900:  # NCCL_VERSION(2, 9, 0): the encoding decode_version reads, since 2.9
        raise OSError(f"{path}: ncclGetVersion answered {v.value}; wanted an NCCL >= 2.9 version code")
    return decode_version(v.value)


def vllm_nccl_library(environ: Mapping[str, str]) -> NcclLibrary:
    """The NCCL library vLLM 0.33 will load on this node, and its version.

    The order is vLLM's (docs/reference/nccl.md): ``VLLM_NCCL_SO_PATH`` when set; otherwise
    ``libnccl.so.2`` by soname, which resolves to the library already in the process, i.e. the
    nvidia-nccl wheel's that torch links; failing that, the dynamic loader's search
    (LD_LIBRARY_PATH, the ld.so cache).
    """
    import ctypes.util

    so = environ.get("VLLM_NCCL_SO_PATH") or ""
    if so:
        path, how = so, "VLLM_NCCL_SO_PATH"
    elif wheel := _wheel_nccl():
        path, how = wheel, "the nvidia-nccl wheel torch links (libnccl.so.2 by soname)"
    elif found := ctypes.util.find_library("nccl"):
        path, how = found, "the dynamic loader's libnccl.so.2 (no nvidia-nccl wheel)"
    else:
        return NcclLibrary(
            None, "none: no VLLM_NCCL_SO_PATH, no nvidia-nccl wheel, no libnccl on the loader path"
        )
    try:
        return NcclLibrary(path, how, library_version(path))
    except OSError as e:
        return NcclLibrary(path, how, None, str(e))


def _torch_has_cuda() -> bool | None:
    """Whether the installed torch is a CUDA build (read from torch/version.py, not imported);
    None when torch is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    text = (
        Path(spec.origin).with_name("version.py").read_text()
        if Path(spec.origin).with_name("version.py").exists()
        else ""
    )
    m = re.search(r"^cuda\s*(?::[^=]*)?=\s*(.+)$", text, re.M)
    return bool(m and m.group(1).strip() not in ("None", "''", '""'))


def check_nccl_library(c: Any, environ: Mapping[str, str] | None = None, machine: str | None = None) -> None:
    """Preflight: name the NCCL library and version this node's vLLM will load (a fact that
    ``preflight --compare`` compares across nodes), and fail on a version
    :func:`known_bad_nccl` names for this ``machine`` (default ``platform.machine()``) or on a
    library that does not load."""
    env = dict(os.environ if environ is None else environ)
    server_env = getattr(getattr(c.profile, "server", None), "env", None) or {}
    env.update({k: str(v) for k, v in server_env.items()})
    lib = vllm_nccl_library(env)
    cuda = _torch_has_cuda()
    c.report.facts["nccl_library"] = lib.path
    # Always a string, so nodes that need no NCCL (CPU torch) compare equal.
    c.report.facts["nccl_version"] = lib.version or (
        "none needed (no CUDA torch)" if cuda is not True else "none"
    )
    if lib.path is None:
        if cuda is not True:
            c.add(
                "nccl-library",
                "pass",
                "NCCL library",
                "none",
                "none needed",
                "torch here is not a CUDA build: vLLM loads no NCCL",
            )
        else:
            c.add(
                "nccl-library",
                "fail",
                "NCCL library",
                lib.how,
                "the nvidia-nccl wheel torch was built with, or VLLM_NCCL_SO_PATH naming a libnccl.so.2",
            )
        return
    if lib.version is None:
        c.add(
            "nccl-library",
            "fail",
            "NCCL library",
            f"{lib.path} ({lib.how})",
            "a library that loads and answers ncclGetVersion",
            lib.error,
        )
        return
    seen = f"{lib.path} ({lib.how}), NCCL {lib.version}"
    import platform

    why = known_bad_nccl(lib.version, machine or platform.machine())
    if why:
        c.add(
            "nccl-library",
            "fail",
            "NCCL library",
            seen,
            "an NCCL version not in docs/reference/nccl.md's known-bad list",
            why,
        )
    else:
        c.add(
            "nccl-library",
            "pass",
            "NCCL library",
            seen,
            "the same version on every node (preflight --compare)",
        )
