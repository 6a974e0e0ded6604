"""Each node's Docker engine, through the Docker SDK (``docker`` 7.1).

``ssh://`` addresses go through the ``ssh`` program (``use_ssh_client=True``): it honours the
operator's ``~/.ssh/config`` (user, port, key, jump hosts) and needs no ``paramiko``. On the
remote side ssh runs ``docker system dial-stdio``, so the remote user must be allowed to run
``docker`` (docs/operations.md).
"""

from __future__ import annotations

import time
from typing import Any

import docker
from docker.errors import ImageNotFound

from .spec import Node

PING_TIMEOUT_S = 20
"""Seconds one engine gets to answer ``/_ping`` (an ssh login included)."""


class EngineError(RuntimeError):
    """A node's engine cannot be reached, or it does not hold what the cluster needs."""


def connect(node: Node, timeout_s: int = PING_TIMEOUT_S) -> docker.DockerClient:
    """A client for ``node``'s engine that has answered a ping.

    Raises:
        EngineError: the engine did not answer; the message names the node, its address
            and what went wrong.
    """
    kw: dict[str, Any] = {"use_ssh_client": True} if node.docker.startswith("ssh://") else {}
    try:
        client = docker.DockerClient(base_url=node.docker, timeout=timeout_s, **kw)
        client.ping()
    except Exception as e:  # the SDK raises DockerException, requests' errors or OSError
        why = " ".join(str(e).split())[:300] or type(e).__name__
        raise EngineError(
            f"node {node.name}: docker={node.docker}; unreachable ({type(e).__name__}: {why}); wanted a "
            "Docker engine that answers (ssh://: a key login without a prompt, and the remote user may "
            "run `docker`)"
        ) from None
    return client


def image_id(client: docker.DockerClient, ref: str) -> str | None:
    """The image id (``sha256:...``) of ``ref`` on this engine, or None when it has none."""
    try:
        return str(client.images.get(ref).id)
    except ImageNotFound:
        return None


def image_problems(nodes: list[Node], clients: dict[str, docker.DockerClient]) -> list[str]:
    """One line per node whose SPARKPAIR_IMAGE is missing or is another image than the others'.

    The comparison is by image id (the hash of the image's config), so the same tag built
    twice from different sources is caught.
    """
    ids = {
        n.name: image_id(clients[n.name], n.values.get("SPARKPAIR_IMAGE") or "sparkpair:0.1.0") for n in nodes
    }
    out = []
    for n in nodes:
        ref = n.values.get("SPARKPAIR_IMAGE") or "sparkpair:0.1.0"
        if ids[n.name] is None:
            out.append(
                f"node {n.name}: SPARKPAIR_IMAGE={ref!r} is not on the node's engine ({n.docker}); "
                "wanted the image every node runs (build it there, or "
                "`docker save IMAGE | ssh NODE docker load`)"
            )
    present = {v for v in ids.values() if v}
    if len(present) > 1:
        for n in nodes:
            if ids[n.name]:
                others = {k: (v or "missing")[:19] for k, v in ids.items() if k != n.name}
                out.append(
                    f"node {n.name}: SPARKPAIR_IMAGE is image {ids[n.name][:19]}; wanted the same "
                    f"image id on every node (others: {others})"
                )
    return out


def project_containers(client: docker.DockerClient, project: str, services: tuple[str, ...]) -> list[Any]:
    """The compose project's containers of ``services`` on this engine (running or not)."""
    found = client.containers.list(all=True, filters={"label": f"com.docker.compose.project={project}"})
    return [c for c in found if c.labels.get("com.docker.compose.service") in services]


def container_state(c: Any) -> str:
    """``running (healthy)``, ``exited 1``, ``restarting`` ... as ``docker ps`` would say."""
    c.reload()
    st = c.attrs.get("State", {})
    status = st.get("Status", "?")
    if status == "exited":
        return f"exited {st.get('ExitCode')}"
    health = (st.get("Health") or {}).get("Status")
    return f"{status} ({health})" if health else status


CREATED_GRACE_S = 10.0
"""Seconds a container may stay ``created`` after ``docker compose up -d`` returned: compose starts
what it creates before it returns, so one still not started is stuck (a device or runtime the
engine could not give it)."""

LOG_LINES = 20
"""Last log lines shown for a container that failed."""


def failure(c: Any, *, created_for_s: float = 0.0) -> str | None:
    """Why container ``c`` is not on its way to serving, or ``None``.

    A container has failed when it is ``exited`` or ``dead``, ``restarting`` or already
    restarted by its restart policy, ``unhealthy``, or ``created`` with a start error from the
    engine (``State.Error``) or for longer than :data:`CREATED_GRACE_S`.
    """
    c.reload()
    st = c.attrs.get("State", {})
    status = st.get("Status", "?")
    restarts = int(c.attrs.get("RestartCount") or 0)
    health = (st.get("Health") or {}).get("Status")
    if status in ("exited", "dead"):
        return f"{status} with exit code {st.get('ExitCode')}"
    if status == "restarting" or restarts:
        code = last_exit_code(c)
        return f"{status}, restarted {restarts} time(s) by its restart policy (last exit code {code})"
    if health == "unhealthy":
        return "unhealthy (its health check failed past the start period)"
    if status == "created" and (st.get("Error") or created_for_s > CREATED_GRACE_S):
        return "created but never started"
    return None


def last_exit_code(c: Any, attempts: int = 3) -> int | str | None:
    """The exit code of ``c``'s last ``die`` event (the engine's event log since the container was
    created); ``State.ExitCode`` is reset to 0 when the restart policy starts it again, so it is
    used only for a container that is not running. The engine may publish the event a moment after
    the restart count moves: up to ``attempts`` reads, one second apart. ``"unknown"`` when no
    read finds it on a running container."""
    import datetime

    created = str(c.attrs.get("Created", ""))[:19]
    codes: list[Any] = []
    for attempt in range(attempts):
        if attempt:
            time.sleep(1.0)
        try:
            since = int(
                datetime.datetime.fromisoformat(created).replace(tzinfo=datetime.timezone.utc).timestamp()
            )
            events = c.client.events(
                since=since,
                # the engine's ``until`` is whole seconds and leaves out the current one: a die
                # event in this very second (a restart policy acts within milliseconds) is kept by
                # reaching one second ahead; the stream stays open until that second ends
                until=int(time.time()) + 1,
                filters={"container": c.id, "event": "die"},
                decode=True,
            )
            codes = [e.get("Actor", {}).get("Attributes", {}).get("exitCode") for e in events]
        except Exception:  # noqa: BLE001 - an engine without the event log: the state's code below
            codes = []
        codes = [x for x in codes if x is not None]
        if codes:
            return int(codes[-1]) if str(codes[-1]).lstrip("-").isdigit() else str(codes[-1])
    st = c.attrs.get("State", {})
    if st.get("Running"):
        return "unknown"
    return st.get("ExitCode")


def failure_report(node: str, c: Any, why: str, tail: int = LOG_LINES) -> str:
    """Docker's own account of a failed container: ``State.Error``, the exit code, the OOM flag,
    the restart count and its last ``tail`` log lines, prefixed with the node."""
    st = c.attrs.get("State", {})
    service = c.labels.get("com.docker.compose.service", "?")
    lines = [
        f"node {node}: container {c.name} ({service}) {why}; Docker: State.Error="
        f"{(st.get('Error') or '')!r}, ExitCode={st.get('ExitCode')}, OOMKilled={st.get('OOMKilled')}, "
        f"RestartCount={c.attrs.get('RestartCount', 0)}"
    ]
    try:
        text = c.logs(tail=tail).decode("utf-8", "replace").rstrip("\n")
    except Exception as e:  # noqa: BLE001 - the SDK raises APIError or requests' errors; the report says so
        text = f"(no logs: {type(e).__name__}: {e})"
    lines.append(f"  last {tail} log lines of {c.name}:" if text else f"  {c.name} logged nothing")
    lines += [f"  | {x}" for x in text.splitlines()[-tail:]]
    return "\n".join(lines)
