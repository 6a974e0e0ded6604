"""The values a node env file may hold: their patterns, limits and the wording of "wanted" in
errors, the HCA list parser, and the error type. :mod:`.nodeenv` builds the schema on them.
"""

from __future__ import annotations

import re

# SPARKPAIR_NODE_NAME's pattern: one definition, shared with the gateway's peers and stability nodes.
from sparkpair_serving.inputs import NODE_NAME_RE as NODE_NAME_RE

IFNAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
"""Linux interface names: at most 15 bytes (IFNAMSIZ - 1)."""

HCA_RE = re.compile(r"^[A-Za-z0-9_.-]+(:[0-9]{1,3})?$")
"""One NCCL_IB_HCA entry: an RDMA device name (or name prefix) with an optional port
(``rocep1s0f1:1``). The list syntax is restated in docs/reference/node-env.md."""

NCCL_MAX_HCAS = 32
"""NCCL's fixed upper limit of HCA entries (docs/reference/node-env.md)."""

ASCII_INT_RE = re.compile(r"^[0-9]{1,12}$")
"""A number in the env file: ASCII digits only. Python's ``int()`` (and pydantic's lax mode
around it) also takes ``'\u0661\u0662'`` (Arabic-Indic digits), ``'1_0'``, ``' 12'``,
``'+5'`` and ``'12.0'``; none of those is what an operator means to write."""

PROFILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}(\.[A-Za-z0-9_-]{1,16})?$")
"""A profile name: the stem of a file in configs/profiles/ (no path separator, no ``..``)."""

_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HF_REPO_ID_RE = re.compile(rf"^({_HF_PART}/)?{_HF_PART}$")
"""A Hugging Face repo id, ``name`` or ``namespace/name``: ASCII letters, digits, ``-``, ``_``
and ``.``, at most 96 characters per part, not starting or ending with ``-`` or ``.``; ``--``
and ``..`` are refused separately (the rules of ``huggingface_hub.utils.validate_repo_id``,
restated in docs/reference/node-env.md, ASCII only)."""

PATH_MAX = 4096
"""Linux PATH_MAX (``<linux/limits.h>``): the longest path a model or profile setting may hold."""

FABRIC_PREFIX_MIN, FABRIC_PREFIX_MAX = 8, 31
"""Fabric subnets: at least a /31 (RFC 3021 point-to-point: the two ends of one cable) and
at most a /8. A shorter prefix (/0 to /7) is not a fabric, it is "everything"."""

SECRET_KEYS = frozenset({"SPARKPAIR_API_KEY", "VLLM_API_KEY"})
"""Keys whose values are never shown, only their length."""

SHOWN_MAX = 64
"""Longest value (characters) an error message repeats in full."""


def shown(key: str, value: object) -> str:
    """``value`` as an error message may show it: secrets as ``<hidden, N characters>``,
    long strings cut to :data:`SHOWN_MAX` characters with their length, control and
    non-ASCII characters escaped (``repr``)."""
    if key in SECRET_KEYS:
        n = len(str(value))
        return f"<hidden, {n} characters>" if n else "''"
    if isinstance(value, str) and len(value) > SHOWN_MAX:
        return f"{ascii(value[:SHOWN_MAX])}... ({len(value)} characters)"
    return ascii(value)


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
    "SPARKPAIR_PROFILE": (
        "a profile name from configs/profiles/ (e.g. deepseek-v4-flash) or an absolute path to a "
        ".yaml/.yml profile file with no '..' component"
    ),
    "SPARKPAIR_MODEL": (
        "empty (the profile's model), a Hugging Face repo id (namespace/name) or an absolute path "
        "with no '..' component, at most 4096 characters"
    ),
    "SPARKPAIR_API_HOST": (
        "the address the API server binds: 0.0.0.0 or :: (every interface), 127.0.0.1 (this host "
        "only) or one address of this node"
    ),
    "SPARKPAIR_API_KEY_FILE": (
        "empty (no key), or an absolute path to a file whose one line is the server API key "
        "(compose mounts it as the secret sparkpair_api_key)"
    ),
    "SPARKPAIR_API_KEY": (
        "empty, or the server API key itself: 1-4096 printable ASCII characters, no spaces "
        "(prefer SPARKPAIR_API_KEY_FILE)"
    ),
    "SPARKPAIR_API_PORT": "a TCP port 1024-65535",
    "SPARKPAIR_GATEWAY_PORT": "a TCP port 1024-65535, different from SPARKPAIR_API_PORT",
    "SPARKPAIR_PEERS": (
        "empty, or the other nodes as name=address,... (each peer's SPARKPAIR_NODE_NAME and fabric "
        "VLLM_HOST_IP; not this node), read by the health service to name a dead peer"
    ),
    "SPARKPAIR_FABRIC_CIDR": (
        "the fabric (RoCE) subnet in CIDR form, e.g. 192.168.177.0/24: an IPv4 network of /8 to /31, "
        "not 0.0.0.0/N, loopback, link-local (169.254/16), multicast or reserved"
    ),
    "SPARKPAIR_FABRIC_IFNAME": "the netdev on the fabric subnet, e.g. enp1s0f1np1 (at most 15 characters)",
    "VLLM_HOST_IP": "this node's IPv4 address on the fabric subnet",
    "NCCL_IB_HCA": (
        "a comma list of RDMA devices, both halves of the QSFP port, e.g. rocep1s0f1,roceP2p1s0f1, "
        "with NCCL's optional prefixes: '^' (exclude the listed devices), then '=' (exact names)"
    ),
    "NCCL_IB_GID_INDEX": "'auto' (resolved per node from sysfs at start) or an integer 0-255",
    "SPARKPAIR_JOIN_TIMEOUT_S": "seconds to wait for the other nodes, an integer 10-86400",
    "SPARKPAIR_PREFLIGHT_WAIVE": (
        "empty or a comma list of preflight check ids (`sparkpair preflight --list`) to report as warnings"
    ),
    "SPARKPAIR_HOST_USER": "the host user that owns the Docker engine: root (default) or the rootless user",
    "SPARKPAIR_IMAGE": "an image reference, e.g. sparkpair:0.1.0 (the same image on every node)",
    "SPARKPAIR_MODEL_CACHE": "an absolute host path holding the Hugging Face cache",
}


INT_KEYS = (
    "SPARKPAIR_NNODES",
    "SPARKPAIR_NODE_RANK",
    "SPARKPAIR_GPUS_PER_NODE",
    "SPARKPAIR_MASTER_PORT",
    "SPARKPAIR_API_PORT",
    "SPARKPAIR_GATEWAY_PORT",
    "SPARKPAIR_JOIN_TIMEOUT_S",
)
"""Integer keys: written with ASCII digits only (:data:`ASCII_INT_RE`)."""


def ascii_int(v: object) -> object:
    if isinstance(v, str) and not ASCII_INT_RE.match(v):
        raise ValueError("not a plain decimal integer (ASCII digits 0-9 only)")
    return v


def no_dotdot(path: str) -> bool:
    return ".." not in path.split("/")


def printable(v: str) -> bool:
    return all(" " <= ch <= "~" for ch in v)


def parse_hca_list(value: str) -> tuple[bool, bool, list[tuple[str, int | None]]]:
    """Split an NCCL_IB_HCA value the way NCCL reads it (docs/reference/node-env.md).

    Returns:
        ``(exclude, exact, entries)``: ``exclude`` for a leading ``^`` (the list names devices
        NCCL must *not* use), ``exact`` for a following ``=`` (names match exactly, otherwise
        each entry is a name prefix), and ``(device, port or None)`` per comma entry.

    Raises:
        ValueError: ``=^`` (NCCL reads ``^`` only first), an empty list or entry, more than
            :data:`NCCL_MAX_HCAS` entries, or an entry that is not ``name[:port]``.
    """
    body = value
    exclude = body.startswith("^")
    if exclude:
        body = body[1:]
    exact = body.startswith("=")
    if exact:
        body = body[1:]
    if body.startswith("^"):
        raise ValueError("'=^' is not NCCL syntax: the exclude mark '^' comes first ('^=')")
    names = [x.strip() for x in body.split(",")]
    if not body.strip() or any(not n for n in names):
        raise ValueError("an empty device list or entry")
    if len(names) > NCCL_MAX_HCAS:
        raise ValueError(f"{len(names)} entries; NCCL takes at most {NCCL_MAX_HCAS}")
    entries: list[tuple[str, int | None]] = []
    for n in names:
        if not HCA_RE.match(n):
            raise ValueError("not a comma list of RDMA device names (name or name:port)")
        dev, _, port = n.partition(":")
        entries.append((dev, int(port) if port else None))
    return exclude, exact, entries


def port_in_range(v: int) -> int:
    if not 1024 <= v <= 65535:
        raise ValueError("port out of range")
    return v
