# ruff: noqa: E501  (the catalogue reads as a table; one entry per call)
"""Log scanner v1: a catalogue of log patterns from field reports, and a scanner over log lines.

Each :class:`Pattern` names the field bug it covers (``docs/reference/field-bugs.md``),
what a match means, and what to do. Severities:

* ``fatal``: one match means the server is broken (or about to be);
* ``warning``: worth a look, never fatal on its own;
* ``fatal-if-repeated``: a warning below ``threshold`` matches, fatal at or above it (e.g.
  shared-memory-broadcast starvation, B08/B18; a startup-memory restart loop, B14).

Input is any vLLM / NCCL / Ray / kernel log text: container stdout+stderr of both nodes and
``journalctl -k``. Lines are matched one by one (case-sensitive regexes; vLLM's process prefix
such as ``(EngineCore_DP0 pid=123)`` is kept, so patterns can tell engine lines apart).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from .client import ENGINE_DEAD_MARKERS

Severity = Literal["fatal", "warning", "fatal-if-repeated"]


@dataclass(frozen=True)
class Pattern:
    """One catalogue entry.

    Attributes:
        id: stable id (``engine_dead``).
        regex: Python regex searched in each line.
        severity: ``fatal`` / ``warning`` / ``fatal-if-repeated``.
        bug: the field-bugs.md id(s) it covers (``B08``), or ``general``.
        meaning: one line: what a match means.
        fix: one line: what to do about it.
        threshold: matches at which a ``fatal-if-repeated`` pattern turns fatal (>= 2).
        repeat_key: optional regex whose group 1 keys a repeat: matches with the same key count
            once (one failed start prints its error several times under one ``pid=``; a
            restart loop has a new pid each time). Lines without the key count one each.
        window_s: optional window, seconds: a ``fatal-if-repeated`` pattern is fatal only when
            ``threshold`` occurrences fall within this many seconds of each other (timestamps
            read from vLLM's ``LEVEL MM-DD HH:MM:SS`` prefix or an ISO time, e.g. from
            ``docker logs --timestamps``); occurrences without a timestamp count as one burst.
    """

    id: str
    regex: str
    severity: Severity
    bug: str
    meaning: str
    fix: str
    threshold: int = 1
    repeat_key: str | None = None
    window_s: float | None = None

    def __post_init__(self) -> None:
        re.compile(self.regex)
        if self.severity == "fatal-if-repeated" and self.threshold < 2:
            raise ValueError(
                f"pattern {self.id}: fatal-if-repeated needs threshold >= 2, got {self.threshold}"
            )


_PROC = r"^\((?:EngineCore\S*|\S*Worker\S*|RayWorkerWrapper\S*)\s+pid=\d+\)"

CATALOGUE: tuple[Pattern, ...] = (
    Pattern(
        "ptxas_arch",
        r"PTXASError|not defined for option 'gpu-name'",
        "fatal",
        "B01",
        "Triton's bundled ptxas does not know the GPU (sm_121a); the first JIT compile dies",
        "set TRITON_PTXAS_PATH to the CUDA 13 toolkit's ptxas (run `sparkpair preflight`)",
    ),
    Pattern(
        "e8m0_keyerror",
        r"KeyError:?.*float8_e8m0fnu|float8_e8m0fnu.*KeyError|Worker failed with error.*float8_e8m0fnu",
        "fatal",
        "B02",
        "E8M0 block scales reached a Triton kernel that cannot bind float8_e8m0fnu",
        "use the overlay's o_proj/GEMM path that upcasts or views E8M0 scales (vllm PR #54435)",
    ),
    Pattern(
        "nccl_system_error",
        r"NCCL.*unhandled system error|unhandled system error.*NCCL",
        "fatal",
        "B04, B05",
        "NCCL hit a system-level failure (RDMA registration, sockets, shared memory)",
        "rerun with NCCL_DEBUG=INFO; check memlock, /dev/shm, HCA and MTU (`sparkpair preflight`)",
    ),
    Pattern(
        "ibv_reg_mr_enomem",
        r"ibv_reg_mr\S*.*Cannot allocate memory",
        "fatal",
        "B04",
        "RDMA memory registration failed with ENOMEM (host kernel 7.0.0-1019 KHO on)",
        "boot with kho=off or a 6.17 kernel; compare CmaTotal/CmaFree in /proc/meminfo",
    ),
    Pattern(
        "nccl_socket_transport",
        r"NCCL INFO (?:Using network Socket\b|Assigned NET plugin Socket\b|Channel .*\bvia NET/Socket\b)",
        "warning",
        "B05",
        "NCCL carries the pair's traffic over TCP sockets, not RDMA (no usable IB/RoCE device): "
        "~3 GB/s instead of 20-24 GB/s on a Spark pair (docs/reference/nccl.md#socket-fallback-in-the-log)",
        "set NCCL_IB_HCA to both RoCE devices of the cable, NCCL_SOCKET_IFNAME to the fabric "
        "interface and NCCL_IB_GID_INDEX=auto (the RoCEv2 entry); check with `sparkpair preflight` "
        "and `sparkpair nccl-allreduce`",
    ),
    Pattern(
        "engine_dead",
        "|".join(re.escape(m) for m in ENGINE_DEAD_MARKERS),
        "fatal",
        "B08",
        "the vLLM engine core process died; the API server can no longer serve",
        "look above this line for the engine's own traceback; restart both nodes together",
    ),
    Pattern(
        "engine_start_failed",
        r"Engine core initialization failed|EngineCore failed to start",
        "fatal",
        "general",
        "the engine core failed while starting (see its traceback)",
        "read the EngineCore traceback above; check the profile's server arguments",
    ),
    Pattern(
        "ray_channel_timeout",
        r"RayChannelTimeoutError",
        "fatal",
        "B08",
        "a Ray compiled-graph channel timed out: a rank is wedged or dead",
        "use PIECEWISE or eager CUDA graphs across nodes; check the peer node",
    ),
    Pattern(
        "sample_tokens_timeout",
        r"sample_tokens\S* timed out|timed out.*sample_tokens",
        "fatal",
        "B08",
        "the engine's RPC to the workers timed out: cross-node graph replay desync or a dead peer",
        "use PIECEWISE CUDA graphs across nodes; check the worker node's log",
    ),
    Pattern(
        "illegal_memory_access",
        r"illegal memory access",
        "fatal",
        "B08",
        "a CUDA kernel faulted (e.g. a cross-node collective captured in a CUDA graph)",
        "rerun with CUDA_LAUNCH_BLOCKING=1; try cudagraph_mode PIECEWISE",
    ),
    Pattern(
        "nccl_watchdog_timeout",
        r"Watchdog caught collective operation timeout",
        "fatal",
        "B08",
        "a collective stalled past torch's NCCL watchdog (one rank stuck, e.g. a JIT compile)",
        "warm every shape before serving; keep TRITON_CACHE_DIR on a persistent volume",
    ),
    Pattern(
        "nvrm_no_memory",
        r"NV_ERR_NO_MEMORY",
        "fatal",
        "B04, B13",
        "the NVIDIA driver could not allocate memory; on GB10 the host may hard-reset next",
        "lower gpu_memory_utilization / max_model_len; scan the previous boot's kernel journal",
    ),
    Pattern(
        "nvrm_xid",
        r"NVRM: Xid",
        "fatal",
        "B13",
        "the GPU reported an Xid error",
        "look up the Xid number; check power, thermals and the driver version",
    ),
    Pattern(
        "shm_segment",
        r"creating shared memory segment|posix_fallocate",
        "fatal",
        "B17",
        "/dev/shm is too small for NCCL or the Ray object store",
        "give the containers ipc: host or a large shm_size; compare `df /dev/shm` with Ray's store",
    ),
    Pattern(
        "cuda_oom",
        r"CUDA out of memory|torch\.OutOfMemoryError|OutOfMemoryError: CUDA",
        "fatal",
        "general",
        "a CUDA allocation failed",
        "lower gpu_memory_utilization, max_model_len or max_num_seqs",
    ),
    Pattern(
        "engine_traceback",
        _PROC + r".*Traceback \(most recent call last\)",
        "fatal",
        "general",
        "a Python traceback in an engine-core or worker process",
        "read the traceback; the engine or a worker is failing",
    ),
    Pattern(
        "semlock_missing",
        r"SemLock|sem_open.*No such file|FileNotFoundError: \[Errno 2\].*/sem\.",
        "fatal",
        "B18",
        "a POSIX semaphore of vLLM's executor vanished (systemd-logind RemoveIPC); the peer dies",
        "set RemoveIPC=no in logind.conf or enable linger for the service user",
    ),
    Pattern(
        "shm_broadcast_starved",
        r"No available shared memory broadcast block",
        "fatal-if-repeated",
        "B08, B18",
        "the engine waited 60 s for workers to take a broadcast: a wedged or dead peer",
        "check the worker node (dead peer? B18) before suspecting a kernel hang",
        threshold=2,
    ),
    Pattern(
        "placement_group_wait",
        r"Waiting for creating a placement group|placement group.*(cannot|can't|could not) be (placed|scheduled)",
        "fatal-if-repeated",
        "B06",
        "Ray cannot place the placement group (e.g. it asks for the head's Ethernet IP)",
        "set VLLM_HOST_IP / the Ray node IP to the fabric address on both nodes",
        threshold=3,
    ),
    Pattern(
        "startup_memory_check",
        r"ValueError: (?:Free|Available) memory on (?:device|node) .*(?:is less than|less than desired)",
        "fatal-if-repeated",
        "B14",
        "vLLM's startup free-memory check failed; repeated, it is a restart loop (page cache counted as used)",
        "drop caches before launch; cap the restart policy (on-failure with a limit)",
        threshold=2,
        repeat_key=r"\bpid=(\d+)",
        window_s=600.0,
    ),
    Pattern(
        "jit_during_inference",
        r"Triton kernel JIT compilation during inference|JIT compil\w+ during inference",
        "warning",
        "B08 (MiaAI#117)",
        "a kernel compiled while serving; it can stall one rank past the NCCL watchdog",
        "warm the shape at startup; keep TRITON_CACHE_DIR on a persistent volume",
    ),
    Pattern(
        "tool_args_decode",
        r"Error (?:in|trying to|when) \w+ (?:streaming )?tool call|tool call.*JSONDecodeError|JSONDecodeError.*tool",
        "warning",
        "B10",
        "a tool-call parser could not decode one request's arguments (model misbehaviour, per request)",
        "not a server fault by itself; the health suite's tool checks judge the server",
    ),
    # DeepGEMM on family 120 (docs/reference/deepgemm-sm120.md "Log signatures"): the texts are
    # those of the DeepGEMM vLLM 0.33 vendors and of vLLM's wrappers (tests/stack shows each exists).
    Pattern(
        "deepgemm_sf_transform",
        r"Unknown SF transformation",
        "fatal",
        "general",
        "DeepGEMM's scale-factor layout transform has no case for these scales on this GPU (MXFP4 MoE / FP8 weights)",
        "run `sparkpair probe`; use the backend it picks for the path, or a GB10-capable DeepGEMM (docs/kernels.md)",
    ),
    Pattern(
        "deepgemm_arch",
        r"Unsupported architecture or scaling factor types|Assertion error \(csrc/[^()]*\): Unsupported architecture",
        "fatal",
        "general",
        "DeepGEMM has no kernel for this GPU architecture and scale type",
        "run `sparkpair probe` and use the backend it picks for the path (docs/kernels.md)",
    ),
    Pattern(
        "deepgemm_host_assert",
        r"Assertion error \(csrc/[^():]+:\d+\): (?!Unknown SF transformation|Unsupported architecture)",
        "fatal",
        "general",
        "a DeepGEMM host-side check failed (operand shape, dtype, stride or scale layout it does not accept)",
        "run `sparkpair probe`: it names the path and picks another backend or stops with the way around",
    ),
    Pattern(
        "deepgemm_device_assert",
        r"Assertion failed: \S+\.cuh?:\d+, condition: ",
        "fatal",
        "general",
        "a DeepGEMM kernel's device-side assert fired (the kernel trapped; the CUDA context is lost)",
        "run `sparkpair probe`; use the backend it picks for the path, or a GB10-capable DeepGEMM",
    ),
    Pattern(
        "deepgemm_scale_dtype",
        r"Expected tensor scales dtype to be torch\.float32 or torch\.float8_e8m0fnu or torch\.uint8",
        "fatal",
        "general",
        "vLLM's DeepGEMM weight post-processing got block scales of a dtype it does not take",
        "check the checkpoint's scale dtype (`sparkpair inspect`); run `sparkpair probe`",
    ),
    Pattern(
        "deepgemm_unavailable",
        r"DeepGEMM backend is unavailable in the current vLLM environment|Sparse Attention Indexer CUDA op requires DeepGEMM",
        "fatal",
        "general",
        "a path that needs DeepGEMM ran without a usable one (DeepSeek-V4's indexer has no other CUDA kernel)",
        "run `sparkpair preflight` (deepgemm check): it names which DeepGEMM vLLM finds and why it does not import",
    ),
    Pattern(
        "deepgemm_import_failed",
        r"Failed to import vendored deep_gemm",
        "warning",
        "general",
        "vLLM's vendored DeepGEMM did not import; vLLM continues without DeepGEMM",
        "run `sparkpair preflight` (deepgemm check) for the reason; DeepSeek-V4 cannot serve without it",
    ),
)
"""The catalogue (the field bugs of docs/reference/field-bugs.md, plus vLLM 0.32's own wording of engine death)."""


@dataclass
class Finding:
    """All matches of one pattern.

    Attributes:
        pattern: the catalogue entry.
        count: matching lines.
        repeats: distinct occurrences (``count`` with ``repeat_key`` duplicates folded), the
            number compared with a ``fatal-if-repeated`` threshold.
        severity: the effective severity: ``fatal`` or ``warning`` (``fatal-if-repeated``
            resolved against its threshold).
        first_line_no: 1-based line number of the first match.
        samples: up to three matching lines (stripped, at most 400 chars each).
    """

    pattern: Pattern
    count: int = 0
    repeats: int = 0
    severity: Literal["fatal", "warning"] = "warning"
    first_line_no: int = 0
    samples: list[str] = field(default_factory=list)


@dataclass
class ScanResult:
    """The outcome of one scan.

    Attributes:
        findings: one per pattern that matched, fatal first, then by first line.
        lines: lines scanned.
        notes: conclusions drawn from combinations of findings (e.g. B18's "peer likely dead").
    """

    findings: list[Finding]
    lines: int
    notes: list[str] = field(default_factory=list)

    @property
    def fatal(self) -> bool:
        """True when any finding is fatal."""
        return any(f.severity == "fatal" for f in self.findings)

    def ids(self) -> list[str]:
        """Ids of the patterns that matched."""
        return [f.pattern.id for f in self.findings]

    def get(self, pattern_id: str) -> Finding | None:
        """The finding for ``pattern_id``, or ``None``."""
        return next((f for f in self.findings if f.pattern.id == pattern_id), None)

    def to_json(self) -> str:
        """The result as indented JSON."""
        return json.dumps(
            {
                "fatal": self.fatal,
                "lines": self.lines,
                "notes": self.notes,
                "findings": [{**asdict(f), "pattern": asdict(f.pattern)} for f in self.findings],
            },
            indent=2,
        )


_VLLM_TIME = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
_ISO_TIME = re.compile(r"\b\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)")


def line_time(line: str) -> float | None:
    """Seconds since the start of the year (31-day months; only differences matter) of a log
    line's timestamp: vLLM's ``LEVEL MM-DD HH:MM:SS`` or an ISO ``YYYY-MM-DDTHH:MM:SS``; ``None``
    when the line has neither."""
    m = _VLLM_TIME.search(line) or _ISO_TIME.search(line)
    if not m:
        return None
    mo, d, h, mi, sec = (int(x) for x in m.groups())
    return float((((mo * 31 + d) * 24 + h) * 60 + mi) * 60 + sec)


def _max_in_window(times: list[float | None], window_s: float) -> int:
    """Most occurrences within ``window_s`` seconds; untimed occurrences all count together."""
    if not times or any(t is None for t in times):
        return len(times)
    ts = sorted(t for t in times if t is not None)
    best, lo = 0, 0
    for hi, t in enumerate(ts):
        while t - ts[lo] > window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def scan_lines(lines: Iterable[str], catalogue: Sequence[Pattern] = CATALOGUE) -> ScanResult:
    """Match every line against ``catalogue``; see :class:`ScanResult`."""
    compiled = [
        (p, re.compile(p.regex), re.compile(p.repeat_key) if p.repeat_key else None) for p in catalogue
    ]
    found: dict[str, Finding] = {}
    keys: dict[str, set[str]] = {}
    times: dict[str, list[float | None]] = {}
    n = 0
    for n, line in enumerate(lines, start=1):
        for p, rx, krx in compiled:
            if rx.search(line):
                f = found.setdefault(p.id, Finding(p, first_line_no=n))
                f.count += 1
                km = krx.search(line) if krx else None
                new_occurrence = km is None or km.group(1) not in keys.setdefault(p.id, set())
                if km is not None:
                    keys[p.id].add(km.group(1))
                if new_occurrence:
                    f.repeats += 1
                    times.setdefault(p.id, []).append(line_time(line))
                if len(f.samples) < 3:
                    f.samples.append(line.strip()[:400])
    for f in found.values():
        sev = f.pattern.severity
        burst = f.repeats
        if f.pattern.window_s is not None:
            burst = _max_in_window(times.get(f.pattern.id, []), f.pattern.window_s)
        repeated = sev == "fatal-if-repeated" and burst >= f.pattern.threshold
        f.severity = "fatal" if sev == "fatal" or repeated else "warning"
    findings = sorted(found.values(), key=lambda f: (f.severity != "fatal", f.first_line_no))
    notes: list[str] = []
    if "shm_broadcast_starved" in found and "semlock_missing" not in found:
        notes.append(
            "shared-memory-broadcast starvation without a local SemLock error: a peer (worker node) likely "
            "died; scan the worker's log before suspecting a kernel hang (B18)"
        )
    return ScanResult(findings, n, notes)


def scan_text(text: str, catalogue: Sequence[Pattern] = CATALOGUE) -> ScanResult:
    """:func:`scan_lines` over a whole text."""
    return scan_lines(text.splitlines(), catalogue)


LINE_LIMIT_BYTES = 64 * 1024
"""Longest log line scanned, in bytes; the rest of a longer line is read in chunks of this
size and dropped, never held. The longest lines of the recorded vLLM logs in
``tests/faults/logs`` (engine-config dumps) are about 3.5 KiB, and every catalogue pattern
matches near a line's start; the cap stops one endless line (``/dev/zero``, a 200 MB
line) from growing the scanner without bound."""


def bounded_lines(fh: BinaryIO, stats: dict[str, int], limit: int = LINE_LIMIT_BYTES) -> Iterator[bytes]:
    """The lines of ``fh``, each cut to at most ``limit`` bytes (the rest of the line skipped).

    ``stats["truncated"]`` counts the lines cut and ``stats["first_truncated"]`` is the
    1-based number of the first one (0: none). Memory stays O(``limit``) whatever the input.
    """
    stats["truncated"] = stats["first_truncated"] = 0
    n = 0
    while line := fh.readline(limit):
        n += 1
        if len(line) >= limit and not line.endswith(b"\n"):
            stats["truncated"] += 1
            stats["first_truncated"] = stats["first_truncated"] or n
            while (rest := fh.readline(limit)) and not rest.endswith(b"\n"):
                pass
            line += b"\n"
        yield line


def truncation_note(stats: dict[str, int], limit: int = LINE_LIMIT_BYTES) -> str | None:
    """The note a scan adds when :func:`bounded_lines` cut lines (None when it cut none)."""
    if not stats.get("truncated"):
        return None
    return (
        f"{stats['truncated']} line(s) longer than {limit} bytes (first: line {stats['first_truncated']}) "
        f"were scanned up to their first {limit} bytes; the rest of each was skipped"
    )


def scan_file(path: str | Path, catalogue: Sequence[Pattern] = CATALOGUE) -> ScanResult:
    """:func:`scan_lines` over a regular file (read as UTF-8, undecodable bytes replaced),
    each line cut to :data:`LINE_LIMIT_BYTES` (a note says how many were).

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a regular file (a FIFO or device, e.g. ``/dev/zero``).
    """
    from sparkpair_serving.inputs import open_regular_file

    stats: dict[str, int] = {}
    with open_regular_file(path) as fh:
        result = scan_lines(
            (b.decode("utf-8", errors="replace") for b in bounded_lines(fh, stats)), catalogue
        )
    if note := truncation_note(stats):
        result.notes.append(note)
    return result
