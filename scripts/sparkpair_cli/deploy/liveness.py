"""Container health checks that tell the truth (field bug B16).

- head: HTTP ``/health`` on the address the API server binds (wildcard -> loopback);
- worker: its own process is alive *and* holds an established TCP connection to the
  head's rendezvous port (torch's store), i.e. it is a cluster member; never HTTP;
- health: the gateway's ``/readyz`` (200 only after the functional suite passed).

Process and socket state are read from ``/proc`` under an injectable root, so the checks
are tested against recorded trees.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

import httpx

TCP_ESTABLISHED = "01"


@dataclass(frozen=True)
class CheckResult:
    """``ok`` plus a message naming what was seen and what was wanted."""

    ok: bool
    message: str


def http_ok(url: str, timeout_s: float = 5.0) -> CheckResult:
    """GET ``url``; ok on HTTP 200."""
    try:
        r = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        return CheckResult(False, f"GET {url}: {type(e).__name__}: {e}; wanted HTTP 200")
    if r.status_code != 200:
        return CheckResult(False, f"GET {url}: HTTP {r.status_code}; wanted HTTP 200")
    return CheckResult(True, f"GET {url}: HTTP 200")


def _decode_addr(hexaddr: str) -> tuple[str, int]:
    """``0100007F:1F90`` (little-endian IPv4) or a 32-hex IPv6 from /proc/net/tcp{,6}."""
    host, port = hexaddr.split(":")
    if len(host) == 8:
        ip = ipaddress.IPv4Address(bytes.fromhex(host)[::-1])
        return str(ip), int(port, 16)
    raw = bytes.fromhex(host)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    ip6 = ipaddress.IPv6Address(words)
    mapped = ip6.ipv4_mapped
    return (str(mapped) if mapped else str(ip6)), int(port, 16)


def established(root: Path = Path("/")) -> list[tuple[tuple[str, int], tuple[str, int]]]:
    """``(local, remote)`` ``(ip, port)`` pairs of every ESTABLISHED TCP socket in this
    network namespace (``/proc/net/tcp`` and ``tcp6``)."""
    out: list[tuple[tuple[str, int], tuple[str, int]]] = []
    for name in ("tcp", "tcp6"):
        p = root / "proc" / "net" / name
        try:
            lines = p.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 3 and f[3] == TCP_ESTABLISHED:
                out.append((_decode_addr(f[1]), _decode_addr(f[2])))
    return out


def established_peers(root: Path = Path("/")) -> list[tuple[str, int]]:
    """Remote ``(ip, port)`` of every ESTABLISHED TCP socket in this network namespace."""
    return [remote for _local, remote in established(root)]


def clients_of_port(port: int, root: Path = Path("/")) -> list[str]:
    """Remote IPs connected to local TCP ``port`` (the head's rendezvous port: its workers),
    without loopback."""
    ips = {rip for (_lip, lport), (rip, _rport) in established(root) if lport == port}
    return sorted(ip for ip in ips if not ipaddress.ip_address(ip).is_loopback)


def processes(root: Path = Path("/")) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of every process visible under ``root/proc``."""
    out: list[tuple[int, str]] = []
    proc = root / "proc"
    for d in proc.iterdir() if proc.is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            out.append((int(d.name), raw.replace(b"\0", b" ").decode(errors="replace").strip()))
    return sorted(out)


WORKER_PROCESS = ("--headless", "the headless vLLM engine (vllm serve --headless)")
"""What a worker runs (executor mp): a marker of its command line, and its description."""


def worker_alive(node: str, head: str, port: int, root: Path = Path("/")) -> CheckResult:
    """A worker is healthy when its headless vLLM engine runs and is connected to the head's
    rendezvous port (``head:port``, torch's store).
    """
    marker, what = WORKER_PROCESS
    procs = [(pid, c) for pid, c in processes(root) if marker in c]
    if not procs:
        return CheckResult(
            False, f"node {node}: no process with {marker!r} in its command line; wanted {what} running"
        )
    peers = established_peers(root)
    if (head, port) not in peers:
        seen = sorted({f"{ip}:{p}" for ip, p in peers if ip == head}) or "none"
        return CheckResult(
            False,
            f"node {node}: established connections to the head {head}: {seen}; wanted one to {head}:{port} "
            f"(cluster membership via SPARKPAIR_MASTER_PORT)",
        )
    return CheckResult(True, f"node {node}: {what} pid {procs[0][0]} connected to {head}:{port}")
