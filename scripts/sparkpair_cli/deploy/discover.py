"""What a node's kernel already knows about its fabric, GPU, memory and Docker engine, and the
node env file proposed from it (``sparkpair node init``).

Every fact is read with the preflight's own readers (:mod:`..preflight.fabric`,
:mod:`..preflight.memory`; what each sysfs and /proc file holds:
docs/reference/node-env.md#rdma-devices-netdevs-and-the-gpu-in-sysfs-and-proc, and the engine's:
docs/reference/node-env.md#docker-engine-information) under an injectable root, so the recorded host trees of
``tests/fixtures/hosts`` are the fixtures, and carries where it was read. The proposal fills in
every setting it can from those facts and names the source of each; what no node can know on its
own (the other nodes' fabric addresses, where the checkpoint lives) is asked for. Layouts that
need the operator's eye are named as findings: two RoCE ports on different subnets (a Spark's
usual layout: one /24 per half of the QSFP port), both on one subnet, a port down, a port up
without an IPv4 address, no RoCE at all, an MTU other than 9000.

A pair proposed from two nodes' facts (:func:`propose_pair`) cannot disagree: one fabric subnet
both nodes have, distinct addresses, ranks by address so exactly one head.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..preflight.fabric import (
    SPARK_MTU,
    gid_table,
    hca_netdevs,
    ipv4_addresses,
    netdev_link,
    port_state,
    rdma_devices,
)
from ..preflight.host import CommandUnavailable, Host
from ..preflight.memory import meminfo
from .nodeenv_values import NODE_NAME_RE

GB10_MODEL = "NVIDIA GB10"
"""The GPU model a DGX Spark's driver reports (``/proc/driver/nvidia/gpus/*/information``)."""


@dataclass(frozen=True)
class Port:
    """One RDMA device's first port with its netdev, link and addresses (all read from the kernel)."""

    hca: str
    port: str
    netdev: str | None
    state: str
    phys_state: str
    link_layer: str
    rate: str
    operstate: str | None
    mtu: int | None
    ipv4: list[str]
    """``address/prefix`` of each IPv4 address on the netdev (``ip -4 -o addr show``)."""
    roce_v2_gid: dict[str, int]
    """IPv4 address -> index of its RoCE v2 GID entry (``ports/<n>/gids``, ``gid_attrs/types``)."""

    @property
    def up(self) -> bool:
        """ACTIVE and LinkUp (NCCL skips other ports)."""
        return "ACTIVE" in self.state and "LinkUp" in self.phys_state

    @property
    def roce(self) -> bool:
        """RDMA over Ethernet."""
        return self.link_layer == "Ethernet"

    @property
    def sysfs(self) -> str:
        return f"/sys/class/infiniband/{self.hca}/ports/{self.port}"


@dataclass
class NodeFacts:
    """What :func:`discover` read on one node; ``sources`` maps a fact to where it was read."""

    hostname: str | None
    ports: list[Port]
    gpus: list[str]
    driver: str | None
    mem_total: int | None
    engine: dict[str, Any] | None
    arp: dict[str, list[str]] = field(default_factory=dict)
    """netdev -> IPv4 neighbours the kernel has seen on it (``/proc/net/arp``)."""
    addresses: dict[str, list[str]] = field(default_factory=dict)
    """Every netdev's IPv4 ``address/prefix`` (``ip -4 -o addr show``)."""
    errors: list[str] = field(default_factory=list)
    """Facts that could not be read, and why."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> NodeFacts:
        d = json.loads(text)
        d["ports"] = [Port(**p) for p in d["ports"]]
        return cls(**d)

    def roce_ports(self) -> list[Port]:
        """RoCE ports, in PCI order (``rocep1s0f1`` before ``roceP2p1s0f1``)."""
        return sorted((p for p in self.ports if p.roce), key=lambda p: _pci_order(p.hca))


def _pci_order(hca: str) -> tuple[int, int, int, int, str]:
    """Sort key of an mlx5 RoCE device name ``roce[P<domain>]p<bus>s<slot>f<function>`` (systemd's
    predictable naming: domain 0 omitted), so a Spark's first QSFP half sorts first."""
    m = re.fullmatch(r"roce(?:P(\d+))?p(\d+)s(\d+)f(\d+)", hca)
    if not m:
        return (1 << 30, 0, 0, 0, hca)
    return (int(m.group(1) or 0), int(m.group(2)), int(m.group(3)), int(m.group(4)), hca)


def discover(
    root: Path = Path("/"), engine: dict[str, Any] | None = None, *, live: bool | None = None
) -> NodeFacts:
    """Read this node's facts under ``root`` (``/`` live; a recorded tree in tests).

    Args:
        live: run ``ip`` and ``docker`` (default: when ``root`` is ``/``); with files under
            another root, a container reading the host's ``/sys`` and ``/proc`` mounted there.
        engine: the Docker engine's ``/info`` (``docker info``), when the caller has it (from
            the SDK); otherwise ``docker info --format '{{json .}}'`` is run (recorded as
            ``_cmd/docker-info.json`` in a tree).
    """
    host = Host(root, live=live)
    errors: list[str] = []
    try:
        addrs = ipv4_addresses(host)
    except CommandUnavailable as e:
        addrs = {}
        errors.append(f"IPv4 addresses: {e}")
    ports = []
    for dev in rdma_devices(host):
        ps = port_state(host, dev)
        nets = hca_netdevs(host, dev)
        nd = nets[0] if nets else None
        link = netdev_link(host, nd) if nd else None
        v2 = {
            str(v4): idx
            for idx, typ, _n, v4 in gid_table(host, dev)
            if typ.strip() == "RoCE v2" and v4 is not None
        }
        ports.append(
            Port(
                dev, ps.port, nd, ps.state, ps.phys_state, ps.link_layer, ps.rate,
                link[0] if link else None, link[1] if link else None,
                [str(a) for a in addrs.get(nd or "", [])], v2,
            )
        )  # fmt: skip
    gpus = []
    for g in host.listdir("proc/driver/nvidia/gpus"):
        info = host.read(f"proc/driver/nvidia/gpus/{g}/information") or ""
        m = re.search(r"^Model:\s*(.+)$", info, re.M)
        gpus.append(m.group(1).strip() if m else f"unknown ({g})")
    drv = host.read("proc/driver/nvidia/version")
    m = re.search(r"Kernel Module(?: for [\w]+)?\s+(\d+\.\d+(?:\.\d+)?)", drv or "")
    mem = meminfo(host).get("MemTotal")
    if engine is None:
        try:
            r = host.run("docker-info", ["docker", "info", "--format", "{{json .}}"], timeout_s=30)
            engine = json.loads(r.stdout) if r.rc == 0 else None
            if engine is None:
                errors.append(f"Docker engine: `docker info` exited {r.rc}: {r.stdout.strip()[:200]}")
        except (CommandUnavailable, ValueError) as e:
            errors.append(f"Docker engine: {e}")
    arp: dict[str, list[str]] = {}
    for line in (host.read("proc/net/arp") or "").splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 6 and cols[2] != "0x0":  # flags 0x0: an incomplete entry, never answered
            arp.setdefault(cols[5], []).append(cols[0])
    hostname = host.read("proc/sys/kernel/hostname")
    every = {k: [str(a) for a in v] for k, v in addrs.items() if k != "lo"}
    return NodeFacts(hostname, ports, gpus, m.group(1) if m else None, mem, engine, arp, every, errors)


# --- the proposal -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A proposed setting and where its value comes from."""

    key: str
    value: str
    source: str


@dataclass
class Proposal:
    """The node env proposed for one node: values with sources, findings, and what is missing."""

    node: str
    values: list[Value] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Settings no fact gave and nobody typed: ``KEY: why``."""

    def set(self, key: str, value: str, source: str) -> None:
        self.values = [v for v in self.values if v.key != key] + [Value(key, value, source)]

    def as_dict(self) -> dict[str, str]:
        return {v.key: v.value for v in self.values}


def node_name(facts: NodeFacts) -> tuple[str | None, str]:
    """A SPARKPAIR_NODE_NAME from the hostname (its first label, cut to the name's alphabet)."""
    if not facts.hostname:
        return None, "no hostname (/proc/sys/kernel/hostname)"
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", facts.hostname.split(".")[0])[:63]
    return (name if NODE_NAME_RE.match(name) else None), "/proc/sys/kernel/hostname"


def findings(facts: NodeFacts) -> list[str]:
    """The layouts of this node an operator must know about (each a full sentence)."""
    out = list(facts.errors)
    roce = facts.roce_ports()
    up = [p for p in roce if p.up]
    if not facts.ports:
        cx = {k: v for k, v in facts.addresses.items() if re.match(r"en[pP]\d", k)}
        here = f"; PCI netdevs with addresses here: {cx}" if cx else ""
        out.append(
            "no RDMA device in /sys/class/infiniband: no RoCE at all (mlx5_ib not loaded, or not a "
            f"DGX Spark){here}; the fabric settings cannot be discovered (`modprobe mlx5_ib`, then "
            "`ibdev2netdev`)"
        )
    elif not roce:
        layers = sorted({p.link_layer for p in facts.ports})
        out.append(
            f"RDMA devices {[p.hca for p in facts.ports]} have link_layer {layers}, none Ethernet: no "
            "RoCE port; the fabric settings cannot be discovered"
        )
    for p in roce:
        twin_up = [q.hca for q in up if q.hca != p.hca and _pci_order(q.hca)[1:4] == _pci_order(p.hca)[1:4]]
        if not p.up and (p.ipv4 or twin_up):
            what = f"its twin {twin_up[0]} is up" if twin_up else f"it has {', '.join(p.ipv4)}"
            out.append(
                f"one port down: {p.hca} ({p.netdev}) is {p.state!r} / {p.phys_state!r} while {what}; NCCL "
                "gets about half the QSFP link (B05) and NCCL_IB_HCA lists only the up halves; check the "
                "cable on both boxes (the same port number on each) and `ip link show` of the netdev"
            )
        if p.up and not p.ipv4:
            out.append(
                f"{p.hca} ({p.netdev}) is up without an IPv4 address: it has no RoCE v2 IPv4 GID entry "
                "and NCCL (NCCL_IB_ADDR_FAMILY=AF_INET) cannot use it; give it an address on its own "
                "/24 (docs/deploy.md, section 1)"
            )
        if p.up and p.mtu is not None and p.mtu != SPARK_MTU:
            out.append(f"{p.netdev} has MTU {p.mtu}; wanted {SPARK_MTU} on both nodes (B05)")
        for a in p.ipv4:
            if a.split("/")[0] not in p.roce_v2_gid:
                out.append(f"{p.hca}: no RoCE v2 GID entry for {a} in {p.sysfs}/gids (NCCL cannot use it)")
    nets = {p.hca: ipaddress.IPv4Interface(p.ipv4[0]).network for p in up if p.ipv4}
    if len(nets) >= 2:
        if len(set(nets.values())) == len(nets):
            desc = ", ".join(f"{h} on {n}" for h, n in nets.items())
            out.append(
                f"two RoCE ports on different subnets ({desc}), one /24 per QSFP half as NVIDIA's "
                "playbook and eugr's setup lay them out: the fabric subnet and VLLM_HOST_IP are the "
                "first half's (or the peer's), NCCL uses every up half"
            )
        else:
            out.append(
                f"RoCE ports on one subnet ({', '.join(f'{h} on {n}' for h, n in nets.items())}): Linux "
                "may answer ARP for either address on either port and a GID can pick the wrong half; "
                "give each half its own /24"
            )
        idx = {h: next(iter(p.roce_v2_gid.values()), None) for p in up for h in [p.hca] if p.roce_v2_gid}
        if len(set(idx.values())) > 1:
            out.append(
                f"the halves' RoCE v2 IPv4 GID indexes differ ({idx}); NCCL applies one "
                "NCCL_IB_GID_INDEX to every HCA (docs/reference/node-env.md)"
            )
    if not facts.gpus:
        out.append("no NVIDIA GPU in /proc/driver/nvidia/gpus (driver not loaded?)")
    elif any(g != GB10_MODEL for g in facts.gpus):
        out.append(f"GPU {facts.gpus}, not {GB10_MODEL}: the default profile is for DGX Spark pairs")
    if facts.engine is None:
        if not any(e.startswith("Docker engine") for e in facts.errors):
            out.append("Docker engine: none answered `docker info` here")
    elif not any(str(r) == "nvidia" for r in (facts.engine.get("Runtimes") or {})):
        out.append(
            "the Docker engine has no nvidia runtime: install/configure the NVIDIA Container Toolkit "
            "(`nvidia-ctk runtime configure --runtime=docker`)"
        )
    return out


def fabric_port(facts: NodeFacts, peer_ips: list[str]) -> Port | None:
    """The up RoCE port whose subnet holds every peer address; without peers the first up RoCE
    port (PCI order) with an IPv4 address."""
    cands = [p for p in facts.roce_ports() if p.up and p.ipv4]
    for p in cands:
        net = ipaddress.IPv4Interface(p.ipv4[0]).network
        if peer_ips and all(ipaddress.IPv4Address(ip) in net for ip in peer_ips):
            return p
    if peer_ips:
        return None
    return cands[0] if cands else None


def propose(
    facts: NodeFacts,
    *,
    peers: dict[str, str],
    model_cache: str | None,
    name: str | None = None,
    host_user: str | None = None,
) -> Proposal:
    """The node env for this node from its facts, its peers (``name -> fabric IPv4``) and the
    model cache (both typed by the operator: no node can know them).

    Ranks follow the fabric addresses (the lowest is rank 0, the head), so nodes proposed
    separately with each other as peers agree on one head.
    """
    nm, nm_src = (name, "--name") if name else node_name(facts)
    p = Proposal(nm or "?", findings=findings(facts))
    if nm:
        p.set("SPARKPAIR_NODE_NAME", nm, nm_src)
    else:
        p.missing.append(f"SPARKPAIR_NODE_NAME: {nm_src}; give --name")
    port = fabric_port(facts, list(peers.values()))
    if port is None:
        roce = [p_ for p_ in facts.roce_ports() if p_.up and p_.ipv4]
        why = (
            f"no up RoCE port's subnet holds the peers {sorted(peers.values())} (this node: "
            f"{[f'{x.netdev} {x.ipv4[0]}' for x in roce] or 'no up RoCE port with an address'})"
            if peers
            else "no up RoCE port with an IPv4 address"
        )
        for k in ("SPARKPAIR_FABRIC_IFNAME", "VLLM_HOST_IP", "SPARKPAIR_FABRIC_CIDR"):
            p.missing.append(f"{k}: {why}")
    else:
        iface = ipaddress.IPv4Interface(port.ipv4[0])
        src = f"the kernel's IPv4 address of {port.netdev}: {port.ipv4[0]}"
        p.set(
            "SPARKPAIR_FABRIC_IFNAME",
            str(port.netdev),
            f"/sys/class/infiniband/{port.hca}/device/net/{port.netdev}",
        )
        p.set("VLLM_HOST_IP", str(iface.ip), src)
        p.set("SPARKPAIR_FABRIC_CIDR", str(iface.network), src)
        gid = port.roce_v2_gid.get(str(iface.ip))
        p.set(
            "NCCL_IB_GID_INDEX",
            "auto",
            f"resolved at every start; now {gid} ({port.sysfs}/gids/{gid}, RoCE v2)"
            if gid is not None
            else f"no RoCE v2 entry for {iface.ip} in {port.sysfs}/gids: preflight's gid-index will fail",
        )
        ips = sorted([iface.ip, *(ipaddress.IPv4Address(x) for x in peers.values())])
        head = ips[0]
        p.set("SPARKPAIR_NNODES", str(len(ips)), f"this node and --peer {', '.join(peers) or '(none)'}")
        p.set(
            "SPARKPAIR_NODE_RANK", str(ips.index(iface.ip)), "fabric addresses in order: the lowest is rank 0"
        )
        p.set("SPARKPAIR_HEAD_ADDR", str(head), "the lowest fabric address of the nodes")
        p.set("SPARKPAIR_PEERS", ",".join(f"{k}={v}" for k, v in peers.items()), "--peer")
    up = [x.hca for x in facts.roce_ports() if x.up]
    if up:
        p.set(
            "NCCL_IB_HCA",
            "=" + ",".join(up),
            "/sys/class/infiniband/*/ports/1: every ACTIVE/LinkUp RoCE port",
        )
    else:
        p.missing.append("NCCL_IB_HCA: no ACTIVE/LinkUp RoCE port")
    if not peers:
        p.missing.append("SPARKPAIR_PEERS: the other node's name=fabric address; give --peer NAME=ADDRESS")
    if model_cache:
        p.set("SPARKPAIR_MODEL_CACHE", model_cache, "--model-cache")
    else:
        p.missing.append("SPARKPAIR_MODEL_CACHE: the host folder of the checkpoint; give --model-cache DIR")
    if facts.gpus:
        p.set("SPARKPAIR_GPUS_PER_NODE", str(len(facts.gpus)), "/proc/driver/nvidia/gpus")
    if facts.engine is not None:
        rootless = any("rootless" in str(o) for o in facts.engine.get("SecurityOptions") or [])
        if rootless and host_user:
            p.set("SPARKPAIR_HOST_USER", host_user, "docker info: a rootless engine, run by this user")
        elif rootless:
            p.missing.append("SPARKPAIR_HOST_USER: the engine is rootless; give --host-user")
        else:
            p.set("SPARKPAIR_HOST_USER", "root", "docker info: a rootful engine")
    return p


def propose_pair(
    facts: dict[str, NodeFacts], *, model_cache: str, names: dict[str, str] | None = None
) -> dict[str, Proposal]:
    """One proposal per node (keyed by the given names) from every node's facts: the fabric is a
    subnet every node has on an up RoCE port (the first such in PCI order), each node's address
    is its own on that subnet, ranks go by address.

    Raises:
        ValueError: no subnet is shared by every node (each node's subnets named).
    """
    subnets: dict[str, dict[ipaddress.IPv4Network, str]] = {}
    for n, f in facts.items():
        subnets[n] = {}
        for p in f.roce_ports():
            if p.up and p.ipv4:
                iface = ipaddress.IPv4Interface(p.ipv4[0])
                subnets[n].setdefault(iface.network, str(iface.ip))
    first = next(iter(facts))
    shared = [net for net in subnets[first] if all(net in s for s in subnets.values())]
    if not shared:
        seen = {n: [str(x) for x in s] for n, s in subnets.items()}
        raise ValueError(
            f"no fabric subnet on an up RoCE port of every node ({seen}); wanted the nodes cabled "
            "port to port with addresses on one subnet per QSFP half (docs/deploy.md, section 1)"
        )
    net = shared[0]
    addr = {n: subnets[n][net] for n in facts}
    out = {}
    for n, f in facts.items():
        peers = {m: a for m, a in addr.items() if m != n}
        out[n] = propose(f, peers=peers, model_cache=model_cache, name=(names or {}).get(n, n))
    return out
