"""Which peer node is down, and how: evidence the health service can read, turned into a named verdict.

When a peer (a worker node) dies, freezes or restarts, the head's engine fails or hangs and
the gateway's canary fails; the canary alone cannot say *which* node went, or how. This module
looks for evidence that names it and its state (:data:`PEER_STATES`), from three sources,
each optional and each cheap enough to run on every canary tick (docs/health-verdict.md, "A
peer that is down is named"):

1. **The head's log** on the shared state volume (``/var/lib/sparkpair/state/head.log``,
   written by the head node; the health service mounts the volume read-only). New lines are
   read from where the previous look stopped and matched against
   :data:`PEER_DEATH_PATTERNS`: the lines the head writes when a remote rank goes away
   (docs/health-verdict.md, "A peer that is down is named, and how"). Works in a real two-box
   deployment and in the simulation.
2. **The peer's container** through the Docker SDK, where the peer names a ``container``
   (and, for another machine's engine, a ``docker_url``): missing, paused (``docker pause``:
   ``State.Paused``, while ``Running`` stays true), frozen (its processes stopped by SIGSTOP:
   ``T`` in the ``ps`` state that ``docker top`` reads on the engine's host), OOM-killed
   (``State.OOMKilled``, or an ``oom`` event since the pair last served), restarting, exited,
   or restarted since the pair last served (its restart count or start time changed: a
   restart policy brings a killed container back within a second). Works where a Docker
   socket is reachable (the simulation, or a ``tcp://``/``ssh://`` engine URL).
3. **A TCP liveness probe** of the peer's address on ``probe_port``: a refused connection
   means the host answers (alive); no answer within ``probe_timeout_s`` or "no route to
   host" means the node is gone. It tells a dead box, not a dead container on a live box.

Configured by the health service's environment (see :class:`PeerSettings`). Runs in the
slim client: no vLLM, no torch.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sparkpair_serving.inputs import check_node_name

DEFAULT_HEAD_LOG = Path("/var/lib/sparkpair/state/head.log")
"""Where the head writes its vLLM log on the shared state volume (the project's compose
contract: the state volume is mounted at ``/var/lib/sparkpair/state`` on head and health)."""

PEER_DEATH_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # gloo (vLLM's CPU build; torch's third_party/gloo/transport/tcp/pair.cc), the head's own
    # worker failing its next collective once the remote rank's processes are gone:
    # "Connection closed by peer [172.31.77.12]:18132. This is typically caused by a remote
    # worker crashing." (tests/faults/logs/vllm032-cpu-mp-worker-killed-head.log)
    (
        "a collective to the peer failed (gloo: connection closed by peer)",
        re.compile(r"Connection closed by peer \[(?P<addr>[^\]]+)\]"),
    ),
    (
        "a collective to the peer failed (gloo: connection reset by peer)",
        re.compile(r"Connection reset by peer \[(?P<addr>[^\]]+)\]"),
    ),
)
"""Head-log lines that say a remote rank is gone: (what it means, pattern with the peer's
address in group ``addr``). Only lines read in a real log are listed: the head log of a
two-node ``mp`` run on vLLM 0.32 CPU whose worker was killed (the test log named above;
docs/health-verdict.md, "A peer that is down is named, and how"). NCCL's wording on the GPU
pair has not been captured yet; there the Docker and TCP evidence name the peer."""


class Peer(BaseModel):
    """One peer node of the head.

    Attributes:
        name: the node's name (its ``SPARKPAIR_NODE_NAME``), used in every message.
        address: its fabric address (``VLLM_HOST_IP`` of that node), host name or IP.
        container: its serving container's name, for the Docker evidence (``None``: not used).
        docker_url: the Docker engine that runs it (``None``: the local one, ``DOCKER_HOST``).
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    address: str = Field(min_length=1)
    container: str | None = None
    docker_url: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_node_name(v, "peer name")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
            return v
        except ValueError:
            pass
        if not HOSTNAME_RE.match(v) or v.rsplit(".", 1)[-1].isdigit():
            raise ValueError(
                f"peer address {v[:64]!r} is neither an IP address nor a host name; wanted the peer's "
                "fabric address (its VLLM_HOST_IP), with no scheme or port"
            )
        return v


HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*$")
"""A DNS host name (RFC 1123 labels: letters, digits and '-', 1-63 characters, dot-separated).
A name whose last label is all digits (``999.1.1.1``, a mistyped IPv4 address) is refused."""


def peers_from_text(raw: str) -> list[Peer]:
    """The peers of ``SPARKPAIR_PEERS``: ``name=address,...`` or a JSON list of :class:`Peer`
    objects; names must be unique.

    Raises:
        ValueError: the text is neither form, an entry is malformed, or a name repeats (the
            message names the entry, cut to 64 characters).
    """
    if raw.lstrip().startswith("["):
        try:
            items = json.loads(raw)
        except ValueError as e:
            raise ValueError(
                f"not valid JSON ({e}); wanted a JSON list of {{name, address}} objects"
            ) from None
        if not isinstance(items, list):
            raise ValueError("a JSON value that is not a list; wanted a list of {name, address} objects")
    else:
        items = parse_peers(raw)
    peers = []
    for i, item in enumerate(items):
        try:
            peers.append(Peer.model_validate(item))
        except ValidationError as e:
            raise ValueError(
                "; ".join(
                    f"entry {i} {'.'.join(map(str, x['loc'])) or 'value'}: "
                    + str(x["msg"]).removeprefix("Value error, ")
                    for x in e.errors()
                )
            ) from None
    check_unique_peers(peers)
    return peers


def check_unique_peers(peers: list[Peer]) -> list[Peer]:
    """``peers`` unchanged when no name repeats.

    Raises:
        ValueError: a name is given twice.
    """
    names = [p.name for p in peers]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"peer names {twice} are given twice; wanted each peer once")
    return peers


class PeerSettings(BaseModel):
    """How the gateway looks for a peer that is down (dead, paused, frozen, restarting, ...).

    Attributes:
        peers: the head's peers (env ``SPARKPAIR_PEERS``: ``name=address[,name=address]`` or a
            JSON list of :class:`Peer` objects).
        head_log: the head's log (env ``SPARKPAIR_HEAD_LOG``); missing file: source unused.
        probe_port: TCP port of the liveness probe (env ``SPARKPAIR_PEER_PROBE_PORT``);
            ``None``: no probe. Any port a live peer host answers on or refuses (e.g. 22).
        probe_timeout_s: one probe's connect timeout, seconds.
        docker_timeout_s: one Docker API call, seconds.
    """

    model_config = ConfigDict(extra="forbid")

    peers: list[Peer] = Field(default_factory=list)
    head_log: Path | None = DEFAULT_HEAD_LOG
    probe_port: int | None = Field(default=None, ge=1, le=65535)
    probe_timeout_s: float = Field(default=1.0, gt=0, le=30, allow_inf_nan=False)
    docker_timeout_s: float = Field(default=3.0, gt=0, le=60, allow_inf_nan=False)


def parse_peers(raw: str) -> list[dict[str, str]]:
    """``"worker=10.0.0.2,spark-c=10.0.0.3"`` -> ``[{"name": "worker", "address": "10.0.0.2"}, ...]``.

    Raises:
        ValueError: an entry is not ``name=address`` (the message names the entry).
    """
    out = []
    for part in (p.strip() for p in raw.split(",")):
        if not part:
            continue
        name, sep, addr = part.partition("=")
        if not sep or not name.strip() or not addr.strip():
            raise ValueError(f"peer entry {part!r} is not name=address (e.g. worker=10.0.0.2)")
        out.append({"name": name.strip(), "address": addr.strip()})
    return out


PEER_STATES = (
    "dead",
    "missing",
    "paused",
    "frozen",
    "oom-killed",
    "restarting",
    "exited",
    "restarted",
    "unreachable",
)
"""How a peer is down, as the verdict names it: ``dead`` (the head's log: a collective to it
failed), ``missing`` (no such container), ``paused`` (``docker pause``), ``frozen`` (its
processes stopped, SIGSTOP), ``oom-killed``, ``restarting``, ``exited`` (not running and not
restarting), ``restarted`` (running again since the pair last served), ``unreachable`` (the
TCP probe got no answer)."""

FROZEN_STAT = ("T", "t")
"""First letters of ``ps`` STAT for a stopped process: ``T`` stopped by a job-control signal
(SIGSTOP), ``t`` stopped by a tracer (procps ps(1), PROCESS STATE CODES)."""


@dataclass
class PeerDown:
    """A peer that is down, its state and the evidence that names it.

    Attributes:
        name / address: the peer (:class:`Peer`).
        state: one of :data:`PEER_STATES`.
        source: ``head log``, ``docker`` or ``tcp probe``.
        evidence: one line: the log line, the container state, or the probe's outcome.
    """

    name: str
    address: str
    state: str
    source: str
    evidence: str

    def cause(self) -> str:
        """One line for ``/readyz``: the node, its address, its state and the evidence."""
        return f"peer node {self.name!r} ({self.address}) is {self.state}: {self.source}: {self.evidence}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "address": self.address,
            "state": self.state,
            "source": self.source,
            "evidence": self.evidence,
        }


class PeerWatch:
    """Looks for a dead peer each time :meth:`look` is called (the gateway: every canary tick).

    The head log is read from its size when the watch starts (older lines belong to an
    earlier life of the pair); a file that shrank (a new head truncated it) is read from 0.

    Args:
        settings: see :class:`PeerSettings`.
        docker_clients: peer name -> a Docker SDK client (tests); default: made per peer.
    """

    def __init__(self, settings: PeerSettings, docker_clients: dict[str, Any] | None = None) -> None:
        self.s = settings
        self.clients = dict(docker_clients or {})
        self._offset = self._size()
        self._seen: PeerDown | None = None
        self._lives: dict[str, tuple[int, str | None]] = {}
        self._since = time.time()

    def _size(self) -> int:
        p = self.s.head_log
        try:
            return p.stat().st_size if p is not None else 0
        except OSError:
            return 0

    # ---------------------------------------------------------------- sources

    def _from_log(self) -> PeerDown | None:
        p = self.s.head_log
        if p is None or not self.s.peers:
            return None
        size = self._size()
        if size < self._offset:
            self._offset = 0
        if size == self._offset:
            return None
        try:
            with p.open("rb") as f:
                f.seek(self._offset)
                data = f.read(min(size - self._offset, 4 << 20))
        except OSError:
            return None
        # Only whole lines: a line still being written is read on the next look.
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].decode("utf-8", "replace").splitlines():
            for meaning, rx in PEER_DEATH_PATTERNS:
                m = rx.search(line)
                if not m:
                    continue
                host = m.group("addr").strip("[]")
                peer = next((x for x in self.s.peers if x.address == host), None)
                if peer is None and len(self.s.peers) == 1:
                    peer = self.s.peers[0]  # a pair: the only peer (its address may be spelled otherwise)
                if peer is not None:
                    return PeerDown(
                        peer.name, peer.address, "dead", "head log", f"{meaning}: {line.strip()[-300:]}"
                    )
        return None

    def _client(self, peer: Peer) -> Any:
        client = self.clients.get(peer.name)
        if client is None:
            from .node_access import docker_client

            client = self.clients[peer.name] = docker_client(peer.docker_url, self.s.docker_timeout_s)
        return client

    def _inspect(self, peer: Peer) -> dict[str, Any] | None:
        """The peer container's ``docker inspect`` (``{}``: no such container; ``None``: no answer)."""
        try:
            client = self._client(peer)
            import docker.errors

            try:
                return dict(client.containers.get(peer.container).attrs)
            except docker.errors.NotFound:
                return {}
        except Exception:  # noqa: BLE001 - an unreachable engine is no evidence either way
            return None

    def _stopped(self, peer: Peer) -> tuple[list[str], int] | None:
        """The container's stopped processes (``"<pid> <command>"``) and how many it has, from
        ``docker top`` (``ps`` on the engine's host); ``None`` when it cannot be read."""
        try:
            top = self._client(peer).api.top(peer.container, ps_args="-eo pid,stat,comm")
            titles = [t.upper() for t in top.get("Titles") or []]
            i_pid, i_stat, i_cmd = titles.index("PID"), titles.index("STAT"), titles.index("COMMAND")
            procs = top.get("Processes") or []
            stopped = [f"{p[i_pid]} {p[i_cmd]}" for p in procs if str(p[i_stat]).startswith(FROZEN_STAT)]
            return stopped, len(procs)
        except Exception:  # noqa: BLE001 - no ps on the engine's host, or no answer: no evidence
            return None

    def _oom_since(self, peer: Peer) -> bool:
        """Whether the engine reported an ``oom`` event for the peer's container since the pair
        last served (a restart policy hides ``State.OOMKilled`` once the container runs again)."""
        try:
            events = self._client(peer).events(
                since=self._since,
                until=time.time(),
                filters={"container": peer.container, "event": "oom"},
                decode=True,
            )
            return any(True for _ in events)
        except Exception:  # noqa: BLE001 - no events: no evidence
            return False

    def _baseline(self) -> None:
        # While the pair serves: remember each peer container's life (restart count, start).
        self._since = time.time()
        for peer in self.s.peers:
            if peer.container:
                a = self._inspect(peer)
                if a:
                    life = (int(a.get("RestartCount", 0)), a.get("State", {}).get("StartedAt"))
                    self._lives[peer.name] = life

    def _from_docker(self, peer: Peer) -> PeerDown | None:
        if not peer.container:
            return None
        where = peer.docker_url or "the local Docker engine"
        a = self._inspect(peer)
        if a is None:
            return None

        def down(state: str, evidence: str) -> PeerDown:
            return PeerDown(peer.name, peer.address, state, "docker", f"{evidence} on {where}")

        if not a:
            return down("missing", f"no container {peer.container!r}")
        st = a.get("State", {})
        name, code = peer.container, st.get("ExitCode")
        if st.get("Paused"):
            return down("paused", f"container {name} is paused (docker pause; State.Paused)")
        if st.get("Restarting"):
            if st.get("OOMKilled"):
                return down(
                    "oom-killed", f"container {name} was OOM-killed (State.OOMKilled) and is restarting"
                )
            return down("restarting", f"container {name} is restarting (exit code {code})")
        if not st.get("Running"):
            if st.get("OOMKilled"):
                return down(
                    "oom-killed", f"container {name} was OOM-killed (State.OOMKilled, exit code {code})"
                )
            return down("exited", f"container {name} is {st.get('Status', '?')} (exit code {code})")
        stopped = self._stopped(peer)
        if stopped and stopped[0]:
            shown = ", ".join(stopped[0][:4]) + (", ..." if len(stopped[0]) > 4 else "")
            return down(
                "frozen",
                f"container {name} runs, but {len(stopped[0])} of its {stopped[1]} processes are stopped "
                f"(SIGSTOP; ps state T): {shown}",
            )
        # A restart policy brings a killed container back within a second: a new life since
        # the pair last served is the death (seen in the two-container simulation).
        before = self._lives.get(peer.name)
        now = (int(a.get("RestartCount", 0)), st.get("StartedAt"))
        if before is not None and now != before:
            what = f"RestartCount {before[0]} -> {now[0]}, last exit at {st.get('FinishedAt')}"
            if self._oom_since(peer):
                return down(
                    "oom-killed", f"container {name} was OOM-killed (an oom event) and restarted ({what})"
                )
            return down("restarted", f"container {name} died and was restarted ({what})")
        return None

    def _from_probe(self, peer: Peer) -> PeerDown | None:
        port = self.s.probe_port
        if port is None:
            return None
        try:
            with socket.create_connection((peer.address, port), timeout=self.s.probe_timeout_s):
                return None
        except ConnectionRefusedError:
            return None  # the host answered: it is up
        except TimeoutError:
            why = f"no answer within {self.s.probe_timeout_s:g} s"
        except OSError as e:
            if e.errno not in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN):
                return None
            why = e.strerror or str(e)
        return PeerDown(
            peer.name, peer.address, "unreachable", "tcp probe", f"connect to {peer.address}:{port}: {why}"
        )

    # ---------------------------------------------------------------- API

    def look(self, canary_ok: bool = False) -> PeerDown | None:
        """The peer the evidence names as down, or ``None``. Never raises.

        New head-log lines are read on every look: a death line names the peer at once, and
        it stays named until a later look with ``canary_ok`` (the pair served again since).
        The Docker state and the TCP probe are asked only when the canary failed
        (``canary_ok=False``): they name the cause of a failure, they do not make one.
        """
        try:
            found = self._from_log()
            if found is not None:
                self._seen = found
                return found
            if self._seen is not None and canary_ok:
                self._seen = None
            if canary_ok:
                self._baseline()
            if self._seen is not None or canary_ok:
                return self._seen
            for peer in self.s.peers:
                found = self._from_docker(peer) or self._from_probe(peer)
                if found is not None:
                    return found
        except Exception:  # noqa: BLE001 - evidence is best effort; the canary still judges
            return self._seen
        return None

    def clear(self) -> None:
        """Forget a peer death read from the log (the pair served again since)."""
        self._seen = None
