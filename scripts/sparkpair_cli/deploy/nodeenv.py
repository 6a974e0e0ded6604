"""The per-node env file (``configs/node.env``): schema, parser and errors.

One ``compose.yaml`` serves every node; nodes differ only in this file. Every key is
documented in ``configs/node.env.example`` and validated here, so a wrong value stops
the node before any weight is read, with an error that names the node, the key, the
value seen and the value wanted.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
"""Linux interface names: at most 15 bytes (IFNAMSIZ - 1)."""

HCA_RE = re.compile(r"^[A-Za-z0-9_]+(:\d+)?$")
"""An RDMA device name with an optional port, as NCCL_IB_HCA takes it (``rocep1s0f1:1``)."""

DERIVED_KEYS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
"""Keys ``sparkpair node`` derives from SPARKPAIR_FABRIC_IFNAME / VLLM_HOST_IP; setting them
to a different value in the env file is an error (two sources of truth, field bug B06)."""


class NodeEnvError(ValueError):
    """The node env file is missing, does not parse, or has values outside the schema."""


# Wanted-value phrases, shown in errors next to the value seen.
WANTED: dict[str, str] = {
    "SPARKPAIR_NODE_NAME": "a short name for this node: letters, digits, '-', '_' or '.'",
    "SPARKPAIR_NNODES": "the number of nodes in the cluster, an integer >= 1 (2 for a Spark pair)",
    "SPARKPAIR_NODE_RANK": "this node's 0-based rank, below SPARKPAIR_NNODES (0 = the head)",
    "SPARKPAIR_GPUS_PER_NODE": "GPUs per node, an integer >= 1 (1 on a DGX Spark)",
    "SPARKPAIR_HEAD_ADDR": "the head node's IPv4 address on the fabric subnet",
    "SPARKPAIR_MASTER_PORT": "a TCP port 1024-65535 for the cluster rendezvous (torch's store)",
    "SPARKPAIR_EXECUTOR": "empty or 'mp' (vLLM's multi-node multiprocessing executor, the only one; Ray was "
    "removed: vLLM no longer depends on it and its images ship without it)",
    "SPARKPAIR_PROFILE": "a profile name in configs/profiles/ or a path to a profile YAML",
    "SPARKPAIR_MODEL": "empty (use the profile's model) or a model path/hub id",
    "SPARKPAIR_API_HOST": "the address the API server binds: 0.0.0.0, :: or an IP of this node",
    "SPARKPAIR_API_PORT": "a TCP port 1024-65535",
    "SPARKPAIR_GATEWAY_PORT": "a TCP port 1024-65535, different from SPARKPAIR_API_PORT",
    "SPARKPAIR_FABRIC_CIDR": "the fabric (RoCE) subnet in CIDR form, e.g. 192.168.177.0/24",
    "SPARKPAIR_FABRIC_IFNAME": "the netdev on the fabric subnet, e.g. enp1s0f1np1 (at most 15 characters)",
    "VLLM_HOST_IP": "this node's IPv4 address on the fabric subnet",
    "NCCL_IB_HCA": "a comma list of RDMA devices, both halves of the QSFP port, e.g. rocep1s0f1,roceP2p1s0f1",
    "NCCL_IB_GID_INDEX": "'auto' (resolved per node from sysfs at start) or an integer 0-255",
    "SPARKPAIR_JOIN_TIMEOUT_S": "seconds to wait for the other nodes, an integer 10-86400",
    "SPARKPAIR_PREFLIGHT_WAIVE": "empty or a comma list of preflight check ids to report as warnings",
    "SPARKPAIR_HOST_USER": "the host user that owns the Docker engine: root (default) or the rootless user",
    "SPARKPAIR_IMAGE": "an image reference, e.g. sparkpair:0.1.0 (the same image on every node)",
    "SPARKPAIR_MODEL_CACHE": "an absolute host path holding the Hugging Face cache",
}


def _port(v: int) -> int:
    if not 1024 <= v <= 65535:
        raise ValueError("port out of range")
    return v


class NodeEnv(BaseModel):
    """Validated settings of one node (all keys of ``configs/node.env.example``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    SPARKPAIR_NODE_NAME: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
    SPARKPAIR_NNODES: int = Field(ge=1, le=64)
    SPARKPAIR_NODE_RANK: int = Field(ge=0)
    SPARKPAIR_GPUS_PER_NODE: int = Field(1, ge=1, le=8)
    SPARKPAIR_HEAD_ADDR: ipaddress.IPv4Address
    SPARKPAIR_MASTER_PORT: int = 29501
    SPARKPAIR_EXECUTOR: Literal["mp"] | None = None
    SPARKPAIR_PROFILE: str = Field("deepseek-v4-flash", min_length=1)
    SPARKPAIR_MODEL: str = ""
    SPARKPAIR_API_HOST: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address("0.0.0.0")
    SPARKPAIR_API_PORT: int = 8000
    SPARKPAIR_GATEWAY_PORT: int = 8080
    SPARKPAIR_FABRIC_CIDR: ipaddress.IPv4Network
    SPARKPAIR_FABRIC_IFNAME: str = Field(pattern=IFNAME_RE.pattern)
    VLLM_HOST_IP: ipaddress.IPv4Address
    NCCL_IB_HCA: str
    NCCL_IB_GID_INDEX: str = "auto"
    SPARKPAIR_JOIN_TIMEOUT_S: int = Field(1800, ge=10, le=86_400)
    SPARKPAIR_PREFLIGHT_WAIVE: str = ""
    SPARKPAIR_HOST_USER: str = Field("root", pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    SPARKPAIR_IMAGE: str = Field("sparkpair:0.1.0", pattern=r"^[a-z0-9][a-z0-9._/:@-]*$")
    SPARKPAIR_MODEL_CACHE: str = Field("", pattern=r"^(/.*)?$")

    _port_check = field_validator("SPARKPAIR_MASTER_PORT", "SPARKPAIR_API_PORT", "SPARKPAIR_GATEWAY_PORT")(
        _port
    )

    @field_validator("SPARKPAIR_FABRIC_CIDR", mode="before")
    @classmethod
    def _cidr(cls, v: object) -> object:
        if isinstance(v, str) and "/" not in v:
            raise ValueError("no prefix length")
        return v

    @field_validator("NCCL_IB_HCA")
    @classmethod
    def _hca(cls, v: str) -> str:
        body = v[1:] if v[:1] in "^=" else v
        names = [x.strip() for x in body.split(",")]
        if not names or any(not HCA_RE.match(n) for n in names):
            raise ValueError("not a comma list of RDMA device names")
        return v

    @field_validator("NCCL_IB_GID_INDEX")
    @classmethod
    def _gid(cls, v: str) -> str:
        if v == "auto":
            return v
        if not v.isdigit() or int(v) > 255:
            raise ValueError("not 'auto' or an integer 0-255")
        return v

    @model_validator(mode="after")
    def _cross(self) -> NodeEnv:
        problems: list[tuple[str, object, str]] = []
        if self.SPARKPAIR_NODE_RANK >= self.SPARKPAIR_NNODES:
            problems.append(
                (
                    "SPARKPAIR_NODE_RANK",
                    self.SPARKPAIR_NODE_RANK,
                    f"an integer below SPARKPAIR_NNODES={self.SPARKPAIR_NNODES}",
                )
            )
        net = self.SPARKPAIR_FABRIC_CIDR
        if self.VLLM_HOST_IP not in net:
            problems.append(
                ("VLLM_HOST_IP", str(self.VLLM_HOST_IP), f"an address in SPARKPAIR_FABRIC_CIDR={net}")
            )
        if self.SPARKPAIR_HEAD_ADDR not in net:
            problems.append(
                (
                    "SPARKPAIR_HEAD_ADDR",
                    str(self.SPARKPAIR_HEAD_ADDR),
                    f"an address in SPARKPAIR_FABRIC_CIDR={net}",
                )
            )
        if self.SPARKPAIR_NODE_RANK == 0 and self.VLLM_HOST_IP != self.SPARKPAIR_HEAD_ADDR:
            problems.append(
                (
                    "SPARKPAIR_HEAD_ADDR",
                    str(self.SPARKPAIR_HEAD_ADDR),
                    f"this node's VLLM_HOST_IP={self.VLLM_HOST_IP} (rank 0 is the head)",
                )
            )
        if self.SPARKPAIR_NODE_RANK != 0 and self.VLLM_HOST_IP == self.SPARKPAIR_HEAD_ADDR:
            problems.append(
                (
                    "VLLM_HOST_IP",
                    str(self.VLLM_HOST_IP),
                    f"an address other than SPARKPAIR_HEAD_ADDR (rank {self.SPARKPAIR_NODE_RANK} is not the head)",  # noqa: E501
                )
            )
        api = self.SPARKPAIR_API_HOST
        if not api.is_unspecified and api != self.VLLM_HOST_IP and not api.is_loopback:
            problems.append(
                (
                    "SPARKPAIR_API_HOST",
                    str(api),
                    f"0.0.0.0, ::, 127.0.0.1 or VLLM_HOST_IP={self.VLLM_HOST_IP}",
                )
            )
        if self.SPARKPAIR_GATEWAY_PORT == self.SPARKPAIR_API_PORT:
            problems.append(
                (
                    "SPARKPAIR_GATEWAY_PORT",
                    self.SPARKPAIR_GATEWAY_PORT,
                    "a port other than SPARKPAIR_API_PORT",
                )
            )
        if self.SPARKPAIR_MASTER_PORT in (self.SPARKPAIR_API_PORT, self.SPARKPAIR_GATEWAY_PORT):
            problems.append(
                ("SPARKPAIR_MASTER_PORT", self.SPARKPAIR_MASTER_PORT, "a port not used by the API or gateway")
            )
        if problems:
            raise ValueError(_CROSS_MARK + "\n".join(f"{k}\x1f{v!r}\x1f{w}" for k, v, w in problems))
        return self

    # --- derived values --------------------------------------------------------------

    @property
    def role(self) -> Literal["head", "worker"]:
        """``head`` for rank 0, else ``worker``."""
        return "head" if self.SPARKPAIR_NODE_RANK == 0 else "worker"

    @property
    def hcas(self) -> list[str]:
        """RDMA device names from NCCL_IB_HCA, without the ``^``/``=`` prefix and ports."""
        body = self.NCCL_IB_HCA[1:] if self.NCCL_IB_HCA[:1] in "^=" else self.NCCL_IB_HCA
        return [x.strip().split(":")[0] for x in body.split(",")]

    @property
    def waived(self) -> set[str]:
        """Preflight check ids the operator asked to report as warnings."""
        return {x.strip() for x in self.SPARKPAIR_PREFLIGHT_WAIVE.split(",") if x.strip()}

    def probe_host(self) -> str:
        """The address a local health probe must use to reach the API server.

        The server binds ``SPARKPAIR_API_HOST``; a wildcard bind (0.0.0.0 or ::) is reached
        on loopback, any other bind on that very address (field bug B16).
        """
        api = self.SPARKPAIR_API_HOST
        if api.is_unspecified:
            return "::1" if api.version == 6 else "127.0.0.1"
        return str(api)

    def derived_env(self) -> dict[str, str]:
        """Environment ``sparkpair node`` exports to NCCL, Gloo and vLLM (B05, B06)."""
        ifname = self.SPARKPAIR_FABRIC_IFNAME
        return {
            "VLLM_HOST_IP": str(self.VLLM_HOST_IP),
            "NCCL_SOCKET_IFNAME": ifname,
            "GLOO_SOCKET_IFNAME": ifname,
            "TP_SOCKET_IFNAME": ifname,
            "NCCL_IB_HCA": self.NCCL_IB_HCA,
        }


_CROSS_MARK = "\x1ecross\x1e"


def parse_env_file(path: Path) -> dict[str, str]:
    """Parse a Docker Compose env file (``KEY=VALUE`` lines, ``#`` comments, optional quotes).

    Raises:
        NodeEnvError: the file is missing or a line is not ``KEY=VALUE``.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise NodeEnvError(
            f"node env file {path}: cannot read it ({e.strerror or e}); wanted a copy of "
            "configs/node.env.example filled in for this node"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NodeEnvError(
            f"node env file {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
            "wanted KEY=VALUE lines"
        ) from None
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[7:].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise NodeEnvError(f"node env file {path}:{n}: {raw!r} is not KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        out[key] = value
    return out


def load_node_env(values: Mapping[str, str], *, source: str = "environment") -> NodeEnv:
    """Validate ``values`` (the env file or ``os.environ``) into a :class:`NodeEnv`.

    Raises:
        NodeEnvError: one line per problem, each naming node, key, value seen and value wanted.
    """
    node = values.get("SPARKPAIR_NODE_NAME") or socket.gethostname()
    data = {k: v for k, v in values.items() if k in NodeEnv.model_fields}
    # An empty value in an env file means "use the default", as in compose interpolation.
    data = {k: v for k, v in data.items() if v != "" or k in ("SPARKPAIR_MODEL", "SPARKPAIR_PREFLIGHT_WAIVE")}
    lines: list[str] = []
    for key in DERIVED_KEYS:
        if key in values and values[key] != "":
            want = values.get("SPARKPAIR_FABRIC_IFNAME", "")
            if values[key] != want:
                lines.append(
                    f"node {node} ({source}): {key}={values[key]!r}; wanted it unset or equal to "
                    f"{want!r} (sparkpair node derives it from "
                    "SPARKPAIR_FABRIC_IFNAME)"
                )
    try:
        env = NodeEnv.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            msg = str(err.get("msg", ""))
            if _CROSS_MARK in msg:
                for item in msg.split(_CROSS_MARK, 1)[1].split("\n"):
                    key, seen, want = item.split("\x1f")
                    lines.append(f"node {node} ({source}): {key}={seen}; wanted {want}")
                continue
            key = str(err["loc"][0]) if err["loc"] else "?"
            seen = values.get(key, "<unset>") if key in values else "<unset>"
            lines.append(
                f"node {node} ({source}): {key}={seen!r}; wanted {WANTED.get(key, msg)} "
                f"({msg.removeprefix('Value error, ')})"
            )
    if lines:
        raise NodeEnvError("\n".join(lines))
    return env


def load_node_env_file(path: Path) -> NodeEnv:
    """Parse and validate a node env file (see :func:`load_node_env`)."""
    return load_node_env(parse_env_file(path), source=str(path))


def load_node_env_from_environ() -> NodeEnv:
    """Validate the container's environment (compose passes the env file through ``env_file``)."""
    return load_node_env(dict(os.environ), source="container environment")
