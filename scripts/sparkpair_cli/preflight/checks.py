"""The preflight checks of one node, and the comparisons across nodes.

Every check returns :class:`Result` with ``pass``/``warn``/``fail`` and a message naming
the node, the setting, the value seen and the value wanted. Check ids are stable (they are
what SPARKPAIR_PREFLIGHT_WAIVE lists).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from ..deploy.nodeenv import NodeEnv, parse_hca_list
from .host import CommandUnavailable, Host
from .nccl import check_nccl_library

Status = Literal["pass", "warn", "fail"]

SPARK_MTU = 9000
"""Jumbo frames on the fabric (anchors (b): eugr, Reederey87 set 9000; B05)."""

NCCL_SHM_BYTES = 1 << 30
"""/dev/shm room NCCL's SHM transport and vLLM's shared-memory broadcast queue need (B17)."""

KNOWN_BAD_KERNELS = {
    r"^7\.0\.0-1019": "kexec handover (KHO) reserves ~9 GiB that RDMA cannot pin: ibv_reg_mr ENOMEM at NCCL init "  # noqa: E501
    "(B04); boot with kho=off or a 6.17 kernel",
}
BAD_DRIVER_BRANCHES = {
    "590": "driver 590 leaks ~80-96 GiB of unified memory and deadlocks CUDA graph capture (anchors §4, sonusflow); "  # noqa: E501
    "stay on 580",
}
DSV4_DECODE_HEADS = 64
"""DeepSeek-V4-Flash attention heads (audit §5); per-rank heads = 64 / TP."""
DSV4_DECODE_TOPK = 128
"""DeepSeek-V4-Flash's sliding window (``sliding_window`` in the checkpoint's config.json): the
top-k vLLM 0.33 asks FlashInfer's SM120 DSv4 decode table for without DSpark (see
:func:`dsv4_decode_pair`)."""


@dataclass(frozen=True)
class Result:
    """One check on one node."""

    id: str
    node: str
    status: Status
    setting: str
    seen: str
    wanted: str
    note: str = ""

    @property
    def message(self) -> str:
        """``node X: SETTING=seen; wanted W (note)``."""
        tail = f" ({self.note})" if self.note else ""
        return f"node {self.node}: {self.setting}={self.seen}; wanted {self.wanted}{tail}"


@dataclass
class Report:
    """All results of a preflight run, plus the facts other nodes compare against."""

    node: str
    results: list[Result] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[Result]:
        """Results with status ``fail``."""
        return [r for r in self.results if r.status == "fail"]

    def to_json(self) -> str:
        """The report as JSON (results and facts)."""
        return json.dumps(
            {"node": self.node, "results": [asdict(r) for r in self.results], "facts": self.facts}, indent=2
        )


class Ctx:
    """What a check needs: the node env, the profile, the host view and a result sink."""

    def __init__(self, env: NodeEnv, profile: Any, host: Host) -> None:
        self.env = env
        self.profile = profile
        self.host = host
        self.node = env.SPARKPAIR_NODE_NAME
        self.report = Report(self.node)

    def add(self, id: str, status: Status, setting: str, seen: object, wanted: str, note: str = "") -> None:
        if status == "fail" and id in self.env.waived:
            status = "warn"
            note = (note + "; " if note else "") + "waived by SPARKPAIR_PREFLIGHT_WAIVE"
        self.report.results.append(Result(id, self.node, status, setting, str(seen), wanted, note))


# --- fabric ----------------------------------------------------------------------------


def _ib_port(host: Host, dev: str) -> str:
    ports = host.listdir(f"sys/class/infiniband/{dev}/ports")
    return ports[0] if ports else "1"


def hca_netdevs(host: Host, dev: str) -> list[str]:
    """Netdevs of an RDMA device (``/sys/class/infiniband/<dev>/device/net/*``)."""
    return host.listdir(f"sys/class/infiniband/{dev}/device/net")


def check_rdma(c: Ctx) -> None:
    """The RDMA devices NCCL will use under NCCL_IB_HCA exist, are ACTIVE/LinkUp over
    Ethernet (RoCE), and include both halves of the QSFP port (B05).

    NCCL_IB_HCA is read as NCCL reads it (docs/reference/node-env.md): an include list keeps
    the devices matching an entry (a name prefix, or the exact name after ``=``), an exclude
    list (``^``) keeps every other device; NCCL skips ports that are not ACTIVE.
    """
    devs = c.host.listdir("sys/class/infiniband")
    c.report.facts["rdma_devices"] = devs
    if not devs:
        c.add(
            "rdma-devices",
            "fail",
            "/sys/class/infiniband",
            "no devices",
            "the ConnectX-7 RoCE devices (is /dev/infiniband passed in and the mlx5 driver loaded?)",
        )
        return
    exclude, exact, entries = parse_hca_list(c.env.NCCL_IB_HCA)
    names = [n for n, _p in entries]
    missing = [n for n in names if not any(d == n if exact else d.startswith(n) for d in devs)]
    if missing and not exclude:
        c.add(
            "rdma-devices",
            "fail",
            "NCCL_IB_HCA",
            c.env.NCCL_IB_HCA,
            f"devices present here: {devs}",
            f"{missing} not found",
        )
        return
    use = c.env.nccl_hcas(devs)
    if not use:
        c.add(
            "rdma-devices",
            "fail",
            "NCCL_IB_HCA",
            c.env.NCCL_IB_HCA,
            f"a list that leaves NCCL at least one of the devices present here: {devs}",
            "the exclude list (^) removes every device",
        )
        return
    bad = []
    up = []
    for h in use:
        port = _ib_port(c.host, h)
        state = c.host.read(f"sys/class/infiniband/{h}/ports/{port}/state") or "?"
        phys = c.host.read(f"sys/class/infiniband/{h}/ports/{port}/phys_state") or "?"
        layer = c.host.read(f"sys/class/infiniband/{h}/ports/{port}/link_layer") or "?"
        if "ACTIVE" not in state or "LinkUp" not in phys:
            # NCCL skips a port that is not ACTIVE; a device the list names exactly is meant
            # to carry traffic, so it being down is a failure, a prefix or exclude match is not.
            if not exclude and h in names:
                bad.append(f"{h} port {port}: state {state!r}, phys_state {phys!r}")
        elif layer != "Ethernet":
            bad.append(f"{h} port {port}: link_layer {layer!r}")
        else:
            up.append(h)
    if not bad and not up:
        bad.append(f"none of {use} is ACTIVE/LinkUp")
    if bad:
        c.add(
            "rdma-link",
            "fail",
            "RDMA port state",
            "; ".join(bad),
            "4: ACTIVE, 5: LinkUp, link_layer Ethernet (RoCE)",
            "check the QSFP cable and `ibdev2netdev`",
        )
    else:
        c.add("rdma-link", "pass", "RDMA port state", f"{up} ACTIVE/LinkUp", "ACTIVE/LinkUp")
    # Both halves of the port: the devices whose netdevs share the fabric port's PCI
    # function index (on a Spark: rocep1s0f1 + roceP2p1s0f1).
    active = []
    for d in devs:
        port = _ib_port(c.host, d)
        if "ACTIVE" in (c.host.read(f"sys/class/infiniband/{d}/ports/{port}/state") or ""):
            active.append(d)
    used = [d for d in up if d in active]
    unused = [d for d in active if d not in used]
    seen = f"{c.env.NCCL_IB_HCA} (NCCL uses {used})"
    if len(used) < 2 and len(active) >= 2:
        c.add(
            "rdma-both-halves",
            "fail",
            "NCCL_IB_HCA",
            seen,
            f"both halves of the QSFP port in use: {active}",
            "one cable is two PCIe x4 endpoints; with one in use NCCL gets about half the link (B05)",
        )
    elif unused and len(used) < 2:
        c.add("rdma-both-halves", "warn", "NCCL_IB_HCA", seen, f"also {unused}")
    else:
        c.add("rdma-both-halves", "pass", "NCCL_IB_HCA", seen, "both halves in use")


def check_netdev(c: Ctx) -> None:
    """The fabric netdev exists, is up, carries VLLM_HOST_IP, and has MTU 9000 (B05, B06)."""
    ifname = c.env.SPARKPAIR_FABRIC_IFNAME
    base = f"sys/class/net/{ifname}"
    if c.host.read(f"{base}/mtu") is None:
        c.add(
            "fabric-netdev",
            "fail",
            "SPARKPAIR_FABRIC_IFNAME",
            ifname,
            f"a netdev of this node (present: {c.host.listdir('sys/class/net')})",
        )
        return
    oper = c.host.read(f"{base}/operstate")
    mtu = int(c.host.read(f"{base}/mtu") or 0)
    c.report.facts["fabric_mtu"] = mtu
    if oper != "up":
        c.add("fabric-netdev", "fail", f"{ifname} operstate", oper, "up")
    else:
        c.add("fabric-netdev", "pass", f"{ifname} operstate", oper, "up")
    if mtu != SPARK_MTU:
        c.add(
            "fabric-mtu",
            "warn",
            f"{ifname} MTU",
            mtu,
            str(SPARK_MTU),
            "jumbo frames on both ends (B05); both nodes must match, see `preflight --compare`",
        )
    else:
        c.add("fabric-mtu", "pass", f"{ifname} MTU", mtu, str(SPARK_MTU))
    try:
        r = c.host.run("ip-addr", ["ip", "-4", "-o", "addr", "show", "dev", ifname])
        ips = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/\d+", r.stdout)
    except CommandUnavailable:
        ips = []
        c.add("fabric-ip", "warn", f"{ifname} IPv4", "unknown (`ip` not available)", str(c.env.VLLM_HOST_IP))
        return
    c.report.facts["fabric_ips"] = ips
    if str(c.env.VLLM_HOST_IP) not in ips:
        c.add(
            "fabric-ip",
            "fail",
            "VLLM_HOST_IP",
            c.env.VLLM_HOST_IP,
            f"an address of {ifname}: {ips or 'none'}",
            "vLLM, NCCL and Gloo must use the fabric address (B06)",
        )
    else:
        c.add("fabric-ip", "pass", "VLLM_HOST_IP", c.env.VLLM_HOST_IP, f"on {ifname}")


def _ipv4_of_gid(gid: str) -> str | None:
    try:
        ip = ipaddress.IPv6Address(gid.strip())
    except ValueError:
        return None
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else None


def gid_table(host: Host, dev: str) -> list[tuple[int, str, str, str | None]]:
    """``(index, type, ndev, ipv4)`` of every populated GID entry of ``dev``'s first port."""
    port = _ib_port(host, dev)
    base = f"sys/class/infiniband/{dev}/ports/{port}"
    out = []
    for name in host.listdir(f"{base}/gids"):
        if not name.isdigit():
            continue
        gid = host.read(f"{base}/gids/{name}") or ""
        if not gid or set(gid.replace(":", "")) == {"0"}:
            continue
        typ = host.read(f"{base}/gid_attrs/types/{name}") or "?"
        ndev = host.read(f"{base}/gid_attrs/ndevs/{name}") or "?"
        out.append((int(name), typ, ndev, _ipv4_of_gid(gid)))
    return sorted(out)


def roce_v2_ipv4_index(host: Host, dev: str, ip: str | None = None) -> int | None:
    """Index of the RoCE v2 entry for ``ip`` (any IPv4 when ``None``) on ``dev``."""
    for idx, typ, _ndev, v4 in gid_table(host, dev):
        if typ.strip() == "RoCE v2" and v4 is not None and (ip is None or v4 == ip):
            return idx
    return None


def _fabric_hca(c: Ctx) -> str | None:
    """The RDMA device whose netdev is SPARKPAIR_FABRIC_IFNAME (listed devices first)."""
    devs = c.host.listdir("sys/class/infiniband")
    for h in [*c.env.hcas, *devs]:
        if c.env.SPARKPAIR_FABRIC_IFNAME in hca_netdevs(c.host, h):
            return h
    return c.env.hcas[0] if c.env.hcas else None


def resolve_gid_index(env: NodeEnv, root: Path = Path("/")) -> int | None:
    """The GID index of the RoCEv2 IPv4 entry for VLLM_HOST_IP (what ``auto`` means)."""
    host = Host(root)
    c = Ctx(env, None, host)
    dev = _fabric_hca(c)
    return roce_v2_ipv4_index(host, dev, str(env.VLLM_HOST_IP)) if dev else None


def check_gid(c: Ctx) -> None:
    """NCCL_IB_GID_INDEX is (or resolves to) the RoCEv2 IPv4 entry for VLLM_HOST_IP, and the
    other listed HCA has a RoCEv2 IPv4 entry at the same index (NCCL uses one index for all)."""
    dev = _fabric_hca(c)
    if dev is None or not c.host.listdir(f"sys/class/infiniband/{dev}"):
        c.add(
            "gid-index",
            "fail",
            "NCCL_IB_GID_INDEX",
            c.env.NCCL_IB_GID_INDEX,
            "a RoCEv2 IPv4 GID entry",
            "no RDMA device to read it from",
        )
        return
    want = roce_v2_ipv4_index(c.host, dev, str(c.env.VLLM_HOST_IP))
    table = gid_table(c.host, dev)
    # Facts for `preflight --compare`: the index NCCL will use on this node and the type of
    # that GID entry (None: no entry there).
    used = want if c.env.NCCL_IB_GID_INDEX == "auto" else int(c.env.NCCL_IB_GID_INDEX)
    c.report.facts["gid_index"] = used
    c.report.facts["gid_type"] = next((t.strip() for i, t, _n, _v in table if i == used), None)
    if want is None:
        c.add(
            "gid-index",
            "fail",
            f"{dev} GID table",
            [(i, t, v) for i, t, _n, v in table],
            f"a RoCE v2 entry for VLLM_HOST_IP={c.env.VLLM_HOST_IP}",
            "is the address on the right port?",
        )
        return
    if c.env.NCCL_IB_GID_INDEX == "auto":
        c.add("gid-index", "pass", "NCCL_IB_GID_INDEX", f"auto -> {want}", f"the RoCEv2 IPv4 entry ({want})")
    else:
        seen = int(c.env.NCCL_IB_GID_INDEX)
        entry = next(((t, v) for i, t, _n, v in table if i == seen), None)
        if seen != want:
            what = (
                "an empty entry"
                if entry is None
                else f"a {entry[0]} entry for {entry[1] or 'an IPv6 address'}"
            )
            c.add(
                "gid-index",
                "fail",
                "NCCL_IB_GID_INDEX",
                seen,
                f"{want} (the RoCEv2 IPv4 entry for {c.env.VLLM_HOST_IP})",
                f"index {seen} on {dev} is {what}; or set auto",
            )
        else:
            c.add("gid-index", "pass", "NCCL_IB_GID_INDEX", seen, f"{want}")
    for other in c.env.nccl_hcas(c.host.listdir("sys/class/infiniband")):
        state = c.host.read(f"sys/class/infiniband/{other}/ports/{_ib_port(c.host, other)}/state") or ""
        if other == dev or "ACTIVE" not in state:  # NCCL skips ports that are not ACTIVE
            continue
        alt = roce_v2_ipv4_index(c.host, other)
        if alt != want:
            c.add(
                "gid-index-twin",
                "warn",
                f"{other} RoCEv2 IPv4 GID index",
                alt,
                f"{want} (same as {dev})",
                "NCCL applies one NCCL_IB_GID_INDEX to every HCA; give the twin its IPv4 address too",
            )


# --- memory, shm, IPC, kernel, driver --------------------------------------------------


def meminfo(host: Host) -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    out = {}
    for line in (host.read("proc/meminfo") or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+)(?:\s+kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if "kB" in line else 1)
    return out


def _gpu_util(profile: Any) -> float:
    args = list(getattr(getattr(profile, "server", None), "args", []) or [])
    for i, a in enumerate(args):
        if a == "--gpu-memory-utilization" and i + 1 < len(args):
            return float(args[i + 1])
        if a.startswith("--gpu-memory-utilization="):
            return float(a.split("=", 1)[1])
    return 0.9  # vLLM's default


def check_memory(c: Ctx) -> None:
    """MemAvailable covers gpu_memory_utilization x MemTotal (B14: page cache counts as
    available; vLLM's startup check on unified memory wants that fraction free)."""
    mi = meminfo(c.host)
    if "MemTotal" not in mi:
        c.add("memory", "fail", "/proc/meminfo", "unreadable", "MemTotal and MemAvailable")
        return
    util = _gpu_util(c.profile)
    total, avail, free = mi["MemTotal"], mi.get("MemAvailable", 0), mi.get("MemFree", 0)
    budget = int(util * total)
    c.report.facts["mem_total"] = total
    gib = 1 << 30
    if avail < budget:
        c.add(
            "memory",
            "fail",
            "MemAvailable",
            f"{avail / gib:.1f} GiB",
            f">= {budget / gib:.1f} GiB (gpu_memory_utilization {util} x MemTotal {total / gib:.1f} GiB)",
            "stop other GPU/desktop processes; B14",
        )
    elif free < budget:
        c.add(
            "memory",
            "warn",
            "MemFree",
            f"{free / gib:.1f} GiB (MemAvailable {avail / gib:.1f} GiB)",
            f">= {budget / gib:.1f} GiB free",
            "page cache holds the rest; if vLLM's startup check fails: sync; echo 3 > /proc/sys/vm/drop_caches (B14)",  # noqa: E501
        )
    else:
        c.add("memory", "pass", "MemAvailable", f"{avail / gib:.1f} GiB", f">= {budget / gib:.1f} GiB")


def check_cma(c: Ctx) -> None:
    """Kernel CMA/KHO state (B04): CmaTotal 0 with CmaFree > 0, CmaFree > CmaTotal, or a
    known-bad kernel without ``kho=off``."""
    mi = meminfo(c.host)
    rel = (c.host.read("proc/sys/kernel/osrelease") or "").strip()
    cmdline = c.host.read("proc/cmdline") or ""
    c.report.facts["kernel"] = rel
    tot, fr = mi.get("CmaTotal"), mi.get("CmaFree")
    bad = []
    if tot is not None and fr is not None and ((tot == 0 and fr > 0) or fr > tot):
        bad.append(f"CmaTotal {tot >> 10} kB, CmaFree {fr >> 10} kB")
    for pat, why in KNOWN_BAD_KERNELS.items():
        if re.match(pat, rel) and "kho=off" not in cmdline.split():
            bad.append(f"kernel {rel} without kho=off: {why}")
    if bad:
        c.add(
            "kernel-cma",
            "fail",
            "kernel CMA/KHO",
            "; ".join(bad),
            "CmaFree <= CmaTotal, kho=off on 7.0.0-1019",
            "RDMA registration fails with ENOMEM (B04)",
        )
    else:
        c.add("kernel-cma", "pass", "kernel CMA/KHO", f"{rel}, CmaTotal {tot} CmaFree {fr}", "consistent")


def _df_free(text: str, mount: str) -> tuple[int, int] | None:
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 6 and f[-1] == mount:
            return int(f[1]), int(f[3])
    return None


def check_shm(c: Ctx) -> None:
    """Free space on /dev/shm (measured, not taken from the compose file) covers NCCL's SHM
    transport and vLLM's broadcast queue (:data:`NCCL_SHM_BYTES`, B17)."""
    want = NCCL_SHM_BYTES
    if c.host.live:
        try:
            st = os.statvfs("/dev/shm")
            size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError as e:
            c.add("shm", "fail", "/dev/shm", f"unreadable ({e})", f">= {want >> 20} MiB free")
            return
    else:
        try:
            got = _df_free(c.host.run("df-shm", ["df", "-B1", "/dev/shm"]).stdout, "/dev/shm")
        except CommandUnavailable:
            got = None
        if got is None:
            c.add("shm", "fail", "/dev/shm", "not mounted", f">= {want >> 20} MiB free")
            return
        size, free = got
    c.report.facts["shm_free"] = free
    if free < want:
        c.add(
            "shm",
            "fail",
            "/dev/shm free",
            f"{free >> 20} MiB of {size >> 20} MiB",
            f">= {want >> 20} MiB (NCCL and vLLM's shared-memory queues)",
            "ipc: host, or a larger shm_size (B17)",
        )
    else:
        c.add("shm", "pass", "/dev/shm free", f"{free >> 20} MiB", f">= {want >> 20} MiB")


def _logind_setting(host: Host, key: str) -> str | None:
    value = None
    texts = [host.etc("systemd/logind.conf") or "", *host.etc_glob("systemd/logind.conf.d")]
    for text in texts:
        for line in text.splitlines():
            m = re.match(rf"\s*{key}\s*=\s*(\S+)", line)
            if m:
                value = m.group(1)
    return value


def check_logind(c: Ctx) -> None:
    """systemd-logind RemoveIPC deletes a user's POSIX semaphores at logout (B18). Harmless
    for root-owned containers; a warning when the engine runs rootless without linger."""
    remove = _logind_setting(c.host, "RemoveIPC")
    effective = (remove or "yes").lower()
    user = c.env.SPARKPAIR_HOST_USER
    if effective in ("no", "false", "0"):
        c.add("logind-removeipc", "pass", "RemoveIPC", remove, "no")
        return
    if user == "root":
        c.add(
            "logind-removeipc",
            "pass",
            "RemoveIPC",
            f"{remove or 'yes (default)'}",
            "no, or processes owned by root",
            "the Docker engine runs as root: logind does not touch its IPC",
        )
        return
    linger = c.host.path(f"var/lib/systemd/linger/{user}").exists()
    c.add(
        "logind-removeipc",
        "pass" if linger else "warn",
        "RemoveIPC",
        f"{remove or 'yes (default)'}",
        f"RemoveIPC=no, or linger for {user}",
        "linger on" if linger else f"`loginctl enable-linger {user}` or RemoveIPC=no (B18)",
    )


def check_driver(c: Ctx) -> None:
    """NVIDIA driver version (compared across nodes); warn on branches known bad on GB10."""
    text = c.host.read("proc/driver/nvidia/version")
    if text is None:
        c.add(
            "driver",
            "fail",
            "/proc/driver/nvidia/version",
            "missing",
            "the NVIDIA driver loaded and the GPU passed to the container",
        )
        return
    m = re.search(r"Kernel Module(?: for [\w]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    ver = m.group(1) if m else text.splitlines()[0]
    c.report.facts["driver"] = ver
    why = BAD_DRIVER_BRANCHES.get(ver.split(".")[0])
    if why:
        c.add("driver", "warn", "NVIDIA driver", ver, "the 580 branch", why)
    else:
        c.add("driver", "pass", "NVIDIA driver", ver, "the same version on every node")


# --- toolchain and model ---------------------------------------------------------------

PTX_PROBE = """.version 8.8
.target sm_121a
.address_size 64
.visible .entry sparkpair_probe() { ret; }
"""


def ptxas_path(arch: str = "sm_121a") -> tuple[str, str]:
    """The ptxas Triton will use for ``arch``, and the setting that chooses it.

    Triton 3.6 compiles sm_100 and newer (GB10 is sm_121a) with a second bundled ptxas,
    ``ptxas-blackwell`` (CUDA 12.9, which knows sm_121a), chosen by
    ``TRITON_PTXAS_BLACKWELL_PATH``; older targets and older Tritons use ``ptxas`` /
    ``TRITON_PTXAS_PATH`` (triton/backends/nvidia/compiler.py ``get_ptxas``). Asking Triton
    itself keeps this check on the binary that will really run (B01).
    """
    cc = int("".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit()) or 0)
    try:
        import triton.knobs as knobs
        from triton.backends.nvidia.compiler import get_ptxas

        setting = (
            "TRITON_PTXAS_BLACKWELL_PATH"
            if cc >= 100 and hasattr(knobs.nvidia, "ptxas_blackwell")
            else "TRITON_PTXAS_PATH"
        )
        return str(get_ptxas(cc).path), setting
    except Exception:  # noqa: BLE001 - no Triton, or one without get_ptxas: fall back below
        pass
    p = os.environ.get("TRITON_PTXAS_PATH")
    if p:
        return p, "TRITON_PTXAS_PATH"
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        return str(bundled), "TRITON_PTXAS_PATH"
    except Exception:  # noqa: BLE001 - triton absent: report below
        return "ptxas", "TRITON_PTXAS_PATH"


def check_ptxas(c: Ctx, arch: str = "sm_121a") -> None:
    """The ptxas Triton uses accepts ``--gpu-name=sm_121a`` on a trivial kernel (B01)."""
    exe, setting = ptxas_path(arch)
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / "sparkpair-ptxas-probe.ptx"
    if c.host.live:
        probe.write_text(PTX_PROBE)
    try:
        r = c.host.run("ptxas-sm_121a", [exe, f"--gpu-name={arch}", str(probe), "-o", os.devnull])
    except CommandUnavailable as e:
        c.add("ptxas", "fail", setting, exe, f"a ptxas that accepts {arch} (CUDA >= 12.9)", str(e))
        return
    if r.rc != 0:
        first = (r.stdout.strip().splitlines() or ["(no output)"])[0]
        c.add(
            "ptxas",
            "fail",
            setting,
            exe,
            f"a ptxas that accepts --gpu-name={arch}",
            f"it said: {first} (B01)",
        )
    else:
        c.add("ptxas", "pass", setting, exe, f"accepts {arch}")


def _tp(profile: Any) -> int:
    return int(getattr(getattr(profile, "server", None), "tensor_parallel_size", 1) or 1)


def is_dsv4(profile: Any) -> bool:
    """Whether the profile serves DeepSeek-V4 (its tokenizer mode or model id)."""
    spec = getattr(profile, "server", None)
    args = " ".join(getattr(spec, "args", []) or [])
    return "deepseek_v4" in args or "deepseek-v4" in str(getattr(spec, "model", "")).lower()


DSV4_Q_HEAD_SPECIALISATIONS = (8, 16, 32, 64, 128)
"""Query-head counts FlashInfer's sparse MLA decode accepts; vLLM 0.33 pads a rank's heads up to
the next one (``_SPARSE_MLA_SUPPORTED_Q_HEADS`` in vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py)."""


def dsv4_decode_pair(tp: int) -> tuple[int, int]:
    """The ``(num_q_heads, top_k)`` vLLM 0.33 asks FlashInfer's SM120 DSv4 decode table for at TP.

    vLLM's ``DeepseekV4FlashInferSM120Attention.__init__`` asks
    ``has_flashinfer_sparse_mla_sm120_config(padded_heads, required_topk)``
    (vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py, vllm/utils/flashinfer.py, 0.33.0):
    ``padded_heads`` is the rank's heads (64 / TP) padded up to
    :data:`DSV4_Q_HEAD_SPECIALISATIONS`, ``required_topk`` the model's sliding window (128)
    when no DSpark speculative decoding runs. At TP=2: ``(32, 128)``.

    Raises:
        ValueError: more heads per rank than any specialisation (TP < 1 is refused earlier by
            the profile schema).
    """
    per_rank = -(-DSV4_DECODE_HEADS // max(tp, 1))
    for h in DSV4_Q_HEAD_SPECIALISATIONS:
        if per_rank <= h:
            return (h, DSV4_DECODE_TOPK)
    raise ValueError(f"{per_rank} DSv4 heads per rank; wanted <= {DSV4_Q_HEAD_SPECIALISATIONS[-1]}")


FLASHINFER_DSV4_CMD = """import json, sys
asked = [tuple(p) for p in json.loads(sys.argv[1])]
missing = []
try:
    import flashinfer.decode as d
    missing += [n for n in ("trtllm_batch_decode_sparse_mla_dsv4", "trtllm_batch_decode_with_kv_cache_mla")
                if not callable(getattr(d, n, None))]
except ImportError as e:
    missing.append(f"flashinfer.decode ({e})")
try:
    from flashinfer.autotuner import autotune
    if not callable(autotune):
        missing.append("flashinfer.autotuner.autotune")
except ImportError as e:
    missing.append(f"flashinfer.autotuner.autotune ({e})")
import flashinfer.mla._sparse_mla_sm120 as m
table = getattr(m, "_DECODE_DSV4_DISPATCH", None)
print(json.dumps({"missing": missing, "table": repr(table),
                  "answers": [[h, k, table is not None and (h, k) in table] for h, k in asked]}))
"""
"""Asks the installed FlashInfer what vLLM 0.33 asks before it builds the SM120 DSv4 attention
(``has_flashinfer_sparse_mla_sm120`` and ``has_flashinfer_sparse_mla_sm120_config`` in
vllm/utils/flashinfer.py): are the two sparse-MLA decode entry points and the autotuner there, and
is each asked pair a member (``in``) of ``flashinfer.mla._sparse_mla_sm120._DECODE_DSV4_DISPATCH``.
Membership is that object's API: in FlashInfer 0.7.2.post1 it is a dispatch envelope whose
iteration lists only ``(heads, 1)`` pairs (docs/reference/flashinfer-dsv4.md). Runs in a child
Python so a FlashInfer that crashes on import fails this check, not the preflight."""


def check_flashinfer_table(c: Ctx) -> None:
    """FlashInfer's SM120 DSv4 decode table answers ``(heads, top_k) in table`` with True for
    the pair vLLM 0.33 asks at this TP (:func:`dsv4_decode_pair`; ``(32, 128)`` at TP=2), and the
    sparse-MLA decode entry points vLLM checks exist; otherwise vLLM's attention layer raises at
    init ("requires a FlashInfer DSV4 sparse MLA decode specialization")."""
    setting = "FlashInfer DSv4 decode table"
    if not is_dsv4(c.profile):
        c.add("flashinfer-dsv4", "pass", setting, "n/a", "n/a", "profile is not DeepSeek-V4")
        return
    want = dsv4_decode_pair(_tp(c.profile))
    wanted = f"{want} in the table (what vLLM 0.33 asks at TP={_tp(c.profile)})"
    argv = [sys.executable, "-c", FLASHINFER_DSV4_CMD, json.dumps([list(want)])]
    try:
        r = c.host.run("flashinfer-dsv4-table", argv)
    except CommandUnavailable as e:
        c.add("flashinfer-dsv4", "fail", setting, str(e), wanted)
        return
    lines = r.stdout.strip().splitlines() or ["(no output)"]
    try:
        got = json.loads(lines[-1]) if r.rc == 0 else None
    except json.JSONDecodeError:
        got = None
    if not isinstance(got, dict):
        c.add("flashinfer-dsv4", "fail", setting, lines[-1], f"FlashInfer importable, {wanted}")
        return
    if got.get("missing"):
        c.add(
            "flashinfer-dsv4",
            "fail",
            setting,
            f"missing {', '.join(map(str, got['missing']))}",
            f"FlashInfer's SM120 sparse-MLA decode API, {wanted}",
            "vLLM 0.33 does not build the SM120 DSv4 attention without them",
        )
        return
    answers = {(int(h), int(k)): bool(ok) for h, k, ok in got.get("answers", [])}
    if not answers.get(want, False):
        c.add(
            "flashinfer-dsv4",
            "fail",
            setting,
            f"{got.get('table')} answers {want} in table: False",
            wanted,
            f"TP={_tp(c.profile)} needs (padded heads per rank, top_k); install a FlashInfer with it",
        )
    else:
        c.add("flashinfer-dsv4", "pass", setting, f"{got.get('table')} has {want}", wanted)


def check_checkpoint(c: Ctx) -> None:
    """The checkpoint is complete and its gate weights have the dtype the profile assumes
    (``sparkpair inspect``)."""
    from .checkpoint import InspectError, expected_gate_dtype, inspect_checkpoint, resolve_model_dir

    model = c.env.SPARKPAIR_MODEL or c.profile.server.model
    hf_home = c.host.path(os.environ.get("HF_HOME", "/models"))
    d = resolve_model_dir(model, hf_home)
    if d is None:
        c.add(
            "checkpoint",
            "fail",
            "model",
            model,
            f"downloaded under HF_HOME ({hf_home})",
            f"hf download {model} on this node",
        )
        return
    try:
        rep = inspect_checkpoint(d, gate_dtype=expected_gate_dtype(c.profile))
    except InspectError as e:
        c.add("checkpoint", "fail", "checkpoint", d, "a complete safetensors checkpoint", str(e))
        return
    c.report.facts["checkpoint_bytes"] = rep.total_bytes
    if rep.problems:
        c.add(
            "checkpoint",
            "fail",
            "checkpoint",
            d,
            "complete, gate dtype as the profile assumes",
            "; ".join(rep.problems[:5]),
        )
    else:
        c.add(
            "checkpoint",
            "pass",
            "checkpoint",
            f"{len(rep.shards)} shards, {rep.total_bytes / (1 << 30):.1f} GiB",
            "complete",
            rep.summary,
        )


DEEPGEMM_LOCATE_ARGV = ["-m", "sparkpair_overlay.deepgemm"]
"""Run with this node's Python: prints :func:`sparkpair_overlay.deepgemm.locate_deepgemm` as JSON."""


def check_deepgemm(c: Ctx) -> None:
    """The DeepGEMM vLLM will use is found, imports, and has the version vLLM vendors.

    Asks :func:`sparkpair_overlay.deepgemm.locate_deepgemm` (vLLM 0.33's own precedence: a
    top-level ``deep_gemm`` first, then the vendored ``vllm.third_party.deep_gemm``) in a child
    Python, as the probe does. DeepSeek-V4's sparse indexer has no CUDA path without DeepGEMM,
    so for a DSv4 profile a missing or non-importing DeepGEMM fails; elsewhere it warns. A
    replacement build (top-level ``deep_gemm``) or ``VLLM_USE_DEEP_GEMM=0`` is reported as a
    warning naming what vLLM will do (docs/reference/deepgemm-sm120.md).
    """
    from sparkpair_overlay.deepgemm import VLLM_033_VENDORED_VERSION

    setting = "DeepGEMM (vLLM's)"
    dsv4 = is_dsv4(c.profile)
    bad: Status = "fail" if dsv4 else "warn"
    why_needed = "DeepSeek-V4's indexer needs it" if dsv4 else "vLLM falls back without it"
    try:
        r = c.host.run("deepgemm-locate", [sys.executable, *DEEPGEMM_LOCATE_ARGV])
    except CommandUnavailable as e:
        c.add("deepgemm", bad, setting, str(e), "vllm.third_party.deep_gemm found and importable", why_needed)
        return
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    try:
        loc = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
        c.add("deepgemm", bad, setting, f"locator exited {r.rc}: {tail}", "its JSON answer", why_needed)
        return
    if "setting_error" in loc:
        c.add("deepgemm", "fail", "VLLM_USE_DEEP_GEMM", loc["setting_error"], "0 or 1")
        return
    c.report.facts["deepgemm"] = {k: loc.get(k) for k in ("module", "source", "version", "file")}
    want = f"vllm.third_party.deep_gemm {VLLM_033_VENDORED_VERSION} (vendored) or a replacement, importable"
    seen = f"{loc.get('module')} {loc.get('version')} ({loc.get('file')})"
    if loc.get("module") is None or not loc.get("importable"):
        note = f"{loc['reason']}; {why_needed}"
        c.add("deepgemm", bad, setting, seen if loc.get("module") else "none", want, note)
    elif not loc.get("enabled"):
        c.add("deepgemm", "warn", "VLLM_USE_DEEP_GEMM", "0", "1 unless the probe chose 0", loc["reason"])
    elif loc.get("source") == "external":
        c.add("deepgemm", "warn", setting, seen, want, f"a replacement DeepGEMM: {loc['reason']}")
    elif loc.get("version") != VLLM_033_VENDORED_VERSION:
        c.add("deepgemm", "warn", setting, seen, want, "vendored version differs from vLLM 0.33.0's")
    else:
        c.add("deepgemm", "pass", setting, seen, want)


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

CHECK_IDS = {
    "rdma-devices": "RDMA devices of NCCL_IB_HCA exist",
    "rdma-link": "their ports are ACTIVE/LinkUp over Ethernet",
    "rdma-both-halves": "both halves of the QSFP port listed (B05)",
    "fabric-netdev": "the fabric netdev exists and is up",
    "fabric-mtu": "fabric MTU 9000 (B05)",
    "fabric-ip": "VLLM_HOST_IP is on the fabric netdev (B06)",
    "gid-index": "NCCL_IB_GID_INDEX is the RoCEv2 IPv4 entry",
    "gid-index-twin": "the twin HCA has a RoCEv2 IPv4 entry at the same index",
    "memory": "MemAvailable covers the planned budget (B14)",
    "kernel-cma": "kernel CMA/KHO state (B04)",
    "shm": "/dev/shm room for NCCL and vLLM's shared-memory queues (B17)",
    "logind-removeipc": "logind RemoveIPC/linger (B18)",
    "driver": "NVIDIA driver present, branch not known bad",
    "ptxas": "ptxas accepts sm_121a (B01)",
    "flashinfer-dsv4": "FlashInfer DSv4 decode table answers (heads, top_k) in table as vLLM asks",
    "deepgemm": "the DeepGEMM vLLM uses is found, imports, and has the vendored version",
    "checkpoint": "checkpoint complete, gate dtype as assumed (sparkpair inspect)",
    "nccl-library": "the NCCL library vLLM will load and its version, not known bad (docs/reference/nccl.md)",
    "same-nccl": "the NCCL version vLLM loads equal on every node",
    "same-kernel": "kernel release equal on every node",
    "same-driver": "driver version equal on every node",
    "same-mtu": "fabric MTU equal on every node",
    "same-gid-index": "NCCL_IB_GID_INDEX (as resolved) equal on every node (preflight --compare)",
    "same-gid-type": "the GID entry NCCL uses has the same type (RoCE v2) on every node",
    "reports-pass": "no check failed inside any report given to preflight --compare",
    "probe": "sparkpair probe: on-device kernel self-test before the server starts (node run)",
    "nccl-allreduce": "two-rank NCCL all-reduce over NET/IB with busbw above the floor (B05)",
}


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


def load_report(path: Path) -> dict[str, Any]:
    """A node's report written by ``preflight --facts-out``, for ``--compare``.

    Raises:
        PreflightInputError: unreadable, not UTF-8, not JSON, or not a report object.
    """
    wanted = "wanted a --facts-out file"
    try:
        data = path.read_bytes()
    except OSError as e:
        raise PreflightInputError(f"{path}: cannot read it ({e.strerror or e}); {wanted}") from None
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
    """A table of results (status, id, message)."""
    results = report.results if isinstance(report, Report) else report
    t = Table(show_header=True, header_style="bold")
    t.add_column("status")
    t.add_column("check")
    t.add_column("message", overflow="fold")
    colour = {"pass": "green", "warn": "yellow", "fail": "red"}
    for r in results:
        t.add_row(f"[{colour[r.status]}]{r.status}[/]", r.id, r.message)
    console.print(t)
