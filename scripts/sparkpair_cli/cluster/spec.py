"""The cluster file (``configs/cluster.yaml``): which nodes, their env files, their engines.

One YAML file on the machine that runs ``sparkpair up`` lists every node::

    nodes:
      spark-a: {env_file: node-spark-a.env, docker: unix:///var/run/docker.sock}
      spark-b: {env_file: node-spark-b.env, docker: ssh://me@spark-b}

Each node keeps its own env file (the one ``docker compose`` reads today, validated by
:mod:`sparkpair_cli.deploy.nodeenv`); the cluster file only adds where each node's Docker
engine is. Relative paths are relative to the cluster file's folder. Every error names the
node, the setting, the value seen and the value wanted (:class:`ClusterError`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..deploy.nodeenv import NODE_NAME_RE, NodeEnv, NodeEnvError, load_node_env, parse_env_file, shown

CLUSTER_FILE_MAX_BYTES = 64 << 10
"""Largest cluster file read (64 KiB): a few lines per node."""

DOCKER_URL_RE = re.compile(r"^(unix|tcp|ssh)://[^\s]+$")
"""A Docker engine address as the Docker SDK and ``DOCKER_HOST`` take it: ``unix://<socket>``,
``tcp://host:port`` or ``ssh://[user@]host[:port]`` (docker-py ``DockerClient(base_url=)``)."""

WANTED = {
    "env_file": "the path of this node's env file (a filled-in configs/node.env.example), relative to "
    "the cluster file or absolute",
    "docker": "the node's Docker engine: unix:///var/run/docker.sock (this machine), ssh://user@host "
    "(through ssh; the remote user may run `docker`) or tcp://host:port",
    "gateway_url": "empty (the gateway is asked from inside the head's health container, through the "
    "head's engine) or the health gateway's http(s):// URL as this machine reaches it",
    "nodes": "a mapping of node names (each node's SPARKPAIR_NODE_NAME) to {env_file, docker}",
    "project": "the compose project name on every node (letters, digits, '-', '_'), default sparkpair",
    "project_directory": "the checkout with compose.yaml, at the same path on every node "
    "(compose.yaml bind-mounts ./overlay and ./configs from it)",
    "compose_files": "a list of compose files inside project_directory (default [compose.yaml])",
    "verdict_timeout_s": "seconds `up` waits for the health verdict, 10-86400",
}

AGREE_KEYS = (
    "SPARKPAIR_NNODES",
    "SPARKPAIR_GPUS_PER_NODE",
    "SPARKPAIR_FABRIC_CIDR",
    "SPARKPAIR_HEAD_ADDR",
    "SPARKPAIR_MASTER_PORT",
    "SPARKPAIR_PROFILE",
    "SPARKPAIR_MODEL",
    "SPARKPAIR_EXECUTOR",
    "SPARKPAIR_JOIN_TIMEOUT_S",
    "SPARKPAIR_IMAGE",
)
"""Env keys every node must set to the same value: the cluster's shape, rendezvous, what it
serves and the image (a node that disagrees would wait for a cluster that never forms)."""


class ClusterError(ValueError):
    """The cluster file or a node's env file is wrong, or the nodes disagree; one line per problem."""


class NodeSpec(BaseModel):
    """One node of the cluster file."""

    model_config = ConfigDict(extra="forbid")

    env_file: Path
    docker: str
    gateway_url: str = ""

    @field_validator("docker")
    @classmethod
    def _docker(cls, v: str) -> str:
        if not DOCKER_URL_RE.match(v):
            raise ValueError("not a unix://, tcp:// or ssh:// address")
        return v

    @field_validator("gateway_url")
    @classmethod
    def _gw(cls, v: str) -> str:
        if v and not re.match(r"^https?://[^\s/]+(:\d+)?/?$", v):
            raise ValueError("not an http(s)://host[:port] URL")
        return v.rstrip("/")


class ClusterFile(BaseModel):
    """The whole cluster file (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    project: str = Field("sparkpair", pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    project_directory: Path = Path(".")
    compose_files: list[Path] = Field(default_factory=lambda: [Path("compose.yaml")], min_length=1)
    verdict_timeout_s: float = Field(3600.0, ge=10, le=86400)
    nodes: dict[str, NodeSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Node:
    """A node as ``up`` drives it: its name, validated env, env file, engine address."""

    name: str
    env: NodeEnv
    env_file: Path
    values: dict[str, str]
    docker: str
    gateway_url: str

    @property
    def role(self) -> str:
        """``head`` (rank 0) or ``worker``."""
        return self.env.role


@dataclass(frozen=True)
class Cluster:
    """The validated cluster: nodes sorted workers first, then the head."""

    path: Path
    spec: ClusterFile
    nodes: list[Node]

    @property
    def head(self) -> Node:
        """The rank-0 node."""
        return next(n for n in self.nodes if n.role == "head")

    @property
    def project_directory(self) -> Path:
        """The checkout with the compose files (absolute)."""
        return _resolve(self.path, self.spec.project_directory)

    def compose_files(self) -> list[Path]:
        """The compose files, absolute."""
        return [_resolve(self.project_directory / "x", f) for f in self.spec.compose_files]

    def gateway_url(self) -> str:
        """Where this machine reaches the head's health gateway: the cluster file's
        ``gateway_url``, or empty when the gateway is asked inside the head's health container
        (it binds 127.0.0.1 by default, so only the head's own network reaches it)."""
        return self.head.gateway_url


def _resolve(cluster_file: Path, p: Path) -> Path:
    return p if p.is_absolute() else (cluster_file.parent / p).resolve()


def _read_yaml(path: Path) -> Any:
    from sparkpair_serving.inputs import load_yaml, read_small_file

    try:
        data = read_small_file(path, CLUSTER_FILE_MAX_BYTES)
    except OSError as e:
        raise ClusterError(
            f"cluster file {path}: cannot read it ({e.strerror or e}); wanted a copy of "
            "configs/cluster.yaml.example filled in for your nodes"
        ) from None
    except ValueError as e:  # not a regular file, or too large
        raise ClusterError(f"cluster file {path}: {e}; wanted a few lines per node") from None
    try:
        return load_yaml(data.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise ClusterError(
            f"cluster file {path}: not YAML ({str(e).splitlines()[0]}); wanted a YAML mapping"
        ) from None


def parse_cluster_file(path: Path) -> ClusterFile:
    """Parse and validate the cluster file's own fields (not the env files).

    Raises:
        ClusterError: one line per bad setting, naming the node (where there is one), the
            setting, the value seen and the value wanted.
    """
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise ClusterError(
            f"cluster file {path}: top level is {type(raw).__name__}; wanted a mapping with `nodes:`"
        )
    try:
        return ClusterFile.model_validate(raw)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = [str(x) for x in err["loc"]]
            cur: Any = raw
            for part in loc:
                cur = cur.get(part) if isinstance(cur, dict) else None
            seen = "'<unset>'" if err["type"] == "missing" else shown("", cur)
            if len(loc) >= 3 and loc[0] == "nodes":
                where, setting = f"node {loc[1]}", loc[2]
            else:
                where, setting = "cluster", ".".join(loc)
            msg = str(err.get("msg", "")).removeprefix("Value error, ")
            lines.append(f"{where} ({path}): {setting}={seen}; wanted {WANTED.get(setting, msg)} ({msg})")
        raise ClusterError("\n".join(lines)) from None


def load_cluster(path: Path) -> Cluster:
    """The cluster file plus every node's env file, validated, and the nodes checked to agree.

    Raises:
        ClusterError: the cluster file, an env file or the agreement between nodes is wrong;
            every problem found is listed, one line each (node, setting, seen, wanted).
    """
    spec = parse_cluster_file(path)
    problems: list[str] = []
    nodes: list[Node] = []
    for name, ns in spec.nodes.items():
        if not NODE_NAME_RE.match(name):
            problems.append(f"node {shown('', name)} ({path}): name; wanted {WANTED['nodes']}")
            continue
        env_file = _resolve(path, ns.env_file)
        try:
            values = parse_env_file(env_file)
            env = load_node_env(values, source=str(env_file))
        except NodeEnvError as e:
            problems.extend(
                f"node {name}: {line}" if not line.startswith("node ") else line
                for line in str(e).splitlines()
            )
            continue
        if env.SPARKPAIR_NODE_NAME != name:
            problems.append(
                f"node {name} ({env_file}): SPARKPAIR_NODE_NAME={shown('', env.SPARKPAIR_NODE_NAME)}; "
                f"wanted {name!r}, the node's name in the cluster file {path}"
            )
            continue
        nodes.append(Node(name, env, env_file, values, ns.docker, ns.gateway_url))
    if not problems:
        problems.extend(disagreements(nodes))
    if problems:
        raise ClusterError("\n".join(problems))
    nodes.sort(key=lambda n: (n.role == "head", n.env.SPARKPAIR_NODE_RANK))
    return Cluster(path, spec, nodes)


def _value(n: Node, key: str) -> str:
    v = n.values.get(key, "")
    if v == "" and key in NodeEnv.model_fields:
        d = NodeEnv.model_fields[key].default
        v = "" if d is None else str(d)
    return v


def disagreements(nodes: list[Node]) -> list[str]:
    """Where the nodes' env files do not describe one cluster (one line per problem):
    a key of :data:`AGREE_KEYS` with different values, a node count other than
    SPARKPAIR_NNODES, ranks that are not 0..N-1 once each, a fabric address used twice, or a
    head whose VLLM_HOST_IP is not SPARKPAIR_HEAD_ADDR."""
    out: list[str] = []
    if not nodes:
        return out
    for key in AGREE_KEYS:
        seen = {n.name: _value(n, key) for n in nodes}
        if len(set(seen.values())) > 1:
            for n in nodes:
                others = {k: v for k, v in seen.items() if k != n.name}
                out.append(
                    f"node {n.name} ({n.env_file}): {key}={shown(key, seen[n.name])}; wanted the same value "
                    f"on every node (others: {others})"
                )
    want_n = nodes[0].env.SPARKPAIR_NNODES
    if len(nodes) != want_n and len({n.env.SPARKPAIR_NNODES for n in nodes}) == 1:
        out.append(
            f"cluster: {len(nodes)} node(s) in the cluster file ({[n.name for n in nodes]}); wanted "
            f"SPARKPAIR_NNODES={want_n} nodes, one per rank"
        )
    by_rank: dict[int, list[str]] = {}
    for n in nodes:
        by_rank.setdefault(n.env.SPARKPAIR_NODE_RANK, []).append(n.name)
    for rank, names in sorted(by_rank.items()):
        if len(names) > 1:
            for name in names:
                out.append(
                    f"node {name}: SPARKPAIR_NODE_RANK={rank}; wanted a rank no other node has (also {names})"
                )
    if 0 not in by_rank:
        out.append(f"cluster: no node has SPARKPAIR_NODE_RANK=0 (ranks {sorted(by_rank)}); wanted one head")
    by_ip: dict[str, list[str]] = {}
    for n in nodes:
        by_ip.setdefault(str(n.env.VLLM_HOST_IP), []).append(n.name)
    for ip, names in by_ip.items():
        if len(names) > 1:
            for name in names:
                out.append(
                    f"node {name}: VLLM_HOST_IP={ip}; wanted this node's own fabric address (also {names})"
                )
    for n in nodes:
        if n.role == "head" and str(n.env.VLLM_HOST_IP) != str(n.env.SPARKPAIR_HEAD_ADDR):
            out.append(
                f"node {n.name}: VLLM_HOST_IP={n.env.VLLM_HOST_IP}; wanted SPARKPAIR_HEAD_ADDR="
                f"{n.env.SPARKPAIR_HEAD_ADDR} (rank 0 is the head)"
            )
    return out
