"""Each node's Docker engine, through the Docker SDK (``docker`` 7.1).

``ssh://`` addresses go through the ``ssh`` program (``use_ssh_client=True``): it honours the
operator's ``~/.ssh/config`` (user, port, key, jump hosts) and needs no ``paramiko``. On the
remote side ssh runs ``docker system dial-stdio``, so the remote user must be allowed to run
``docker`` (docs/operations.md).
"""

from __future__ import annotations

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
