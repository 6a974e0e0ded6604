"""Fabric checks of one node: the RDMA devices NCCL uses, the fabric netdev, and the GID entry
NCCL_IB_GID_INDEX selects."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path

from ..deploy.nodeenv import NodeEnv
from ..deploy.nodeenv_values import parse_hca_list
from .host import CommandUnavailable, Host
from .result import Ctx

SPARK_MTU = 9000
"""Jumbo frames on the fabric (docs/reference/spark-deployments.md#fabric-settings; B05)."""


def _ib_port(host: Host, dev: str) -> str:
    ports = host.listdir(f"sys/class/infiniband/{dev}/ports")
    return ports[0] if ports else "1"


def rdma_devices(host: Host) -> list[str]:
    """The RDMA devices of this node (``/sys/class/infiniband/*``), sorted."""
    return host.listdir("sys/class/infiniband")


@dataclass(frozen=True)
class PortState:
    """The first port of an RDMA device as sysfs gives it (``/sys/class/infiniband/<dev>/ports/<n>/``):
    ``state`` (``4: ACTIVE``), ``phys_state`` (``5: LinkUp``), ``link_layer`` (``Ethernet`` for
    RoCE) and ``rate``; ``"?"`` where a file cannot be read."""

    device: str
    port: str
    state: str
    phys_state: str
    link_layer: str
    rate: str

    @property
    def up(self) -> bool:
        """ACTIVE and LinkUp: a port NCCL uses (it skips the others)."""
        return "ACTIVE" in self.state and "LinkUp" in self.phys_state

    @property
    def roce(self) -> bool:
        """RDMA over Ethernet (RoCE), not InfiniBand."""
        return self.link_layer == "Ethernet"

    @property
    def sysfs(self) -> str:
        return f"/sys/class/infiniband/{self.device}/ports/{self.port}"


def port_state(host: Host, dev: str) -> PortState:
    """:class:`PortState` of ``dev``'s first port."""
    port = _ib_port(host, dev)
    base = f"sys/class/infiniband/{dev}/ports/{port}"

    def rd(name: str) -> str:
        return host.read(f"{base}/{name}") or "?"

    return PortState(dev, port, rd("state"), rd("phys_state"), rd("link_layer"), rd("rate"))


def hca_netdevs(host: Host, dev: str) -> list[str]:
    """Netdevs of an RDMA device (``/sys/class/infiniband/<dev>/device/net/*``)."""
    return host.listdir(f"sys/class/infiniband/{dev}/device/net")


def netdev_link(host: Host, ifname: str) -> tuple[str, int] | None:
    """``(operstate, mtu)`` of a netdev (``/sys/class/net/<ifname>/{operstate,mtu}``), ``None``
    when there is no such netdev."""
    mtu = host.read(f"sys/class/net/{ifname}/mtu")
    if mtu is None:
        return None
    return host.read(f"sys/class/net/{ifname}/operstate") or "?", int(mtu or 0)


IP_ADDR_LINE = re.compile(r"^\d+:\s+(\S+)\s+inet\s+(\d+\.\d+\.\d+\.\d+/\d+)", re.M)
"""One address of ``ip -4 -o addr show`` (iproute2's one-line format: index, ifname, ``inet``,
address/prefix)."""


def ipv4_addresses(host: Host) -> dict[str, list[ipaddress.IPv4Interface]]:
    """Every netdev's IPv4 addresses with their prefix, as the kernel has them
    (``ip -4 -o addr show``; recorded as ``_cmd/ip-addr.json`` in a host tree). On a live host
    without iproute2 (an image that lacks it), each netdev's primary address and netmask from the
    kernel's ``SIOCGIFADDR`` / ``SIOCGIFNETMASK`` ioctls instead.

    Raises:
        CommandUnavailable: ``ip`` is not recorded (a host tree), or neither ``ip`` nor the
            ioctls answer.
    """
    try:
        r = host.run("ip-addr", ["ip", "-4", "-o", "addr", "show"])
    except CommandUnavailable:
        if not host.live:
            raise
        return _ioctl_ipv4(host.listdir("sys/class/net"))
    out: dict[str, list[ipaddress.IPv4Interface]] = {}
    for ifname, cidr in IP_ADDR_LINE.findall(r.stdout):
        out.setdefault(ifname, []).append(ipaddress.IPv4Interface(cidr))
    return out


SIOCGIFADDR, SIOCGIFNETMASK = 0x8915, 0x891B
"""Linux ``ioctl`` requests for a netdev's primary IPv4 address and netmask
(``include/uapi/linux/sockios.h``); the answer is a ``struct ifreq`` whose ``sockaddr_in``
address sits at bytes 20-24."""


def _ioctl_ipv4(ifnames: list[str]) -> dict[str, list[ipaddress.IPv4Interface]]:
    import fcntl
    import socket
    import struct

    out: dict[str, list[ipaddress.IPv4Interface]] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in ifnames:
            req = struct.pack("256s", name.encode()[:15])
            try:
                addr = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24])
                mask = socket.inet_ntoa(fcntl.ioctl(s.fileno(), SIOCGIFNETMASK, req)[20:24])
            except OSError:  # no IPv4 address on it (EADDRNOTAVAIL), or no such netdev here
                continue
            out[name] = [ipaddress.IPv4Interface(f"{addr}/{mask}")]
    return out


def check_rdma(c: Ctx) -> None:
    """The RDMA devices NCCL will use under NCCL_IB_HCA exist, are ACTIVE/LinkUp over
    Ethernet (RoCE), and include both halves of the QSFP port (B05).

    NCCL_IB_HCA is read as NCCL reads it (docs/reference/node-env.md): an include list keeps
    the devices matching an entry (a name prefix, or the exact name after ``=``), an exclude
    list (``^``) keeps every other device; NCCL skips ports that are not ACTIVE.
    """
    devs = rdma_devices(c.host)
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
        ps = port_state(c.host, h)
        if not ps.up:
            # NCCL skips a port that is not ACTIVE; a device the list names exactly is meant
            # to carry traffic, so it being down is a failure, a prefix or exclude match is not.
            if not exclude and h in names:
                bad.append(f"{h} port {ps.port}: state {ps.state!r}, phys_state {ps.phys_state!r}")
        elif not ps.roce:
            bad.append(f"{h} port {ps.port}: link_layer {ps.link_layer!r}")
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
    active = [d for d in devs if "ACTIVE" in port_state(c.host, d).state]
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
    link = netdev_link(c.host, ifname)
    if link is None:
        c.add(
            "fabric-netdev",
            "fail",
            "SPARKPAIR_FABRIC_IFNAME",
            ifname,
            f"a netdev of this node (present: {c.host.listdir('sys/class/net')})",
        )
        return
    oper, mtu = link
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
        ips = [str(a.ip) for a in ipv4_addresses(c.host).get(ifname, [])]
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
    devs = rdma_devices(c.host)
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
    for other in c.env.nccl_hcas(rdma_devices(c.host)):
        if other == dev or "ACTIVE" not in port_state(c.host, other).state:  # NCCL skips ports not ACTIVE
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
