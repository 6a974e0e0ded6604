"""``sparkpair model sync`` and ``model check``: the checkpoint copied from one node to the
others over the fabric, and checked on every node, through each node's Docker engine.

Each step runs as a short-lived container of the node's image (the image already has the
``sparkpair`` CLI) with the node's ``SPARKPAIR_MODEL_CACHE`` mounted at ``/models``, on the
host network (so the receiver listens on the node's fabric address, ``VLLM_HOST_IP``):

1. on the source node, ``model manifest --write`` (sizes and SHA-256 of every file);
2. on every node, ``model space``: each target must have room for the source's folder (less
   what it already holds), or nothing is copied and each short node is named;
3. on each target, ``model receive`` on ``VLLM_HOST_IP:port``; on the source, ``model send``
   to it (symlinks resolved: snapshot folders arrive as plain files). Both get a fresh sync
   token (``SPARKPAIR_SYNC_TOKEN``, made here for this copy and gone with the two
   containers): the receiver refuses any connection that does not prove it
   (:mod:`.transfer`);
4. on every node, ``model verify`` against the manifest that travelled with the copy, and
   every node's manifest compared with the source's (a manifest altered on the way, or a
   node holding another checkpoint, is named).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import docker

from . import engines
from .manifest import DIGEST_LABEL
from .spec import Cluster, Node
from .transfer import TOKEN_ENV, new_token

SYNC_PORT = 29610
"""TCP port the receiver listens on (next to the rendezvous ports of node.env.example)."""

STEP_TIMEOUT_S = 6 * 3600
"""Longest one step may take (a ~155 GiB copy at a few GB/s takes minutes; hashing as long)."""


class SyncError(RuntimeError):
    """A step failed on a node (the message names the node and shows the step's output)."""


def _image(n: Node) -> str:
    return n.values.get("SPARKPAIR_IMAGE") or "sparkpair:0.1.0"


def _cache(n: Node) -> str:
    return n.values.get("SPARKPAIR_MODEL_CACHE") or "/srv/sparkpair/models"


def start(client: docker.DockerClient, n: Node, argv: list[str], *, network: str, rw: bool,
          env: Mapping[str, str] | None = None) -> Any:  # fmt: skip
    """Start ``sparkpair <argv>`` in a container of ``n``'s image on ``n``'s engine, with
    ``SPARKPAIR_NODE_NAME`` and ``env`` in its environment."""
    kw: dict[str, Any] = {}
    if network == "host":
        kw["network_mode"] = "host"
    else:  # a simulated fabric: the container takes the node's fabric address on that network
        kw["network"] = network
        kw["networking_config"] = {
            network: client.api.create_endpoint_config(ipv4_address=str(n.env.VLLM_HOST_IP))
        }
    return client.containers.run(
        _image(n), argv, detach=True, name=f"sparkpair-model-{n.name}-{uuid.uuid4().hex[:6]}",
        volumes={_cache(n): {"bind": "/models", "mode": "rw" if rw else "ro"}},
        environment={"SPARKPAIR_NODE_NAME": n.name, **(env or {})}, **kw,
    )  # fmt: skip


def finish(c: Any, n: Node, what: str, timeout_s: float = STEP_TIMEOUT_S) -> str:
    """Wait for the container, remove it, return its output.

    Raises:
        SyncError: it exited non-zero (its output in the message) or ran past ``timeout_s``.
    """
    try:
        code = c.wait(timeout=timeout_s).get("StatusCode", -1)
        out = c.logs().decode("utf-8", "replace")
    finally:
        c.remove(force=True)
    if code != 0:
        raise SyncError(f"node {n.name}: {what} exited {code}:\n{out.strip()[-3000:]}")
    return out


def check(
    cluster: Cluster,
    folder: str,
    clients: dict[str, docker.DockerClient],
    network: str = "host",
    reference: str | None = None,
) -> list[str]:
    """``model verify /models/<folder>`` on every node; one line per bad file (node and file
    named), and one per node whose manifest is not the ``reference`` node's (default: the
    head): each node checks its copy against its own manifest, so
    only comparing the manifests across nodes shows two nodes holding different checkpoints
    (or a manifest that arrived altered)."""
    problems: list[str] = []
    digests: dict[str, str] = {}
    label = f": {DIGEST_LABEL} "
    for n in cluster.nodes:
        c = start(
            clients[n.name],
            n,
            ["model", "verify", f"/models/{folder}", "--node", n.name],
            network=network,
            rw=False,
        )
        try:
            out = finish(c, n, "model verify")
        except SyncError as e:
            out = str(e)
            lines = [x for x in out.splitlines() if x.startswith(f"node {n.name}") and label not in x]
            problems.extend(lines or [out])
        for line in out.splitlines():
            if line.startswith(f"node {n.name}{label}"):
                digests[n.name] = line.split(label, 1)[1].strip()
    ref = reference or next((n.name for n in cluster.nodes if n.role == "head"), cluster.nodes[0].name)
    want = digests.get(ref)
    for name, got in digests.items():
        if want is not None and got != want:
            problems.append(
                f"node {name}: /models/{folder}: manifest sha256 {got[:12]}; wanted node {ref}'s "
                f"{want[:12]} (the two nodes hold different checkpoints, or the manifest was altered)"
            )
    return problems


def space_of(client: docker.DockerClient, n: Node, folder: str, network: str) -> dict[str, int]:
    """``{"free": bytes, "bytes": bytes}`` of ``/models/<folder>`` on node ``n``
    (``sparkpair model space`` in a container of its image, its model cache mounted)."""
    import json

    c = start(client, n, ["model", "space", f"/models/{folder}"], network=network, rw=False)
    text = finish(c, n, "model space", timeout_s=600)
    try:
        got = json.loads(text.strip().splitlines()[-1])
        return {"free": int(got["free"]), "bytes": int(got["bytes"])}
    except (ValueError, KeyError, IndexError):
        raise SyncError(
            f"node {n.name}: model space answered {text.strip()[-300:]!r}; wanted its JSON"
        ) from None


def space_problems(
    cluster: Cluster, folder: str, src: Node, clients: dict[str, docker.DockerClient], network: str
) -> list[str]:
    """One line per target node whose model cache has too little room for the source's
    ``/models/<folder>`` (:meth:`.space.Need.problem`), asked before anything is copied."""
    from .space import Need

    total = space_of(clients[src.name], src, folder, network)["bytes"]
    out = []
    for t in cluster.nodes:
        if t is src:
            continue
        got = space_of(clients[t.name], t, folder, network)
        need = Need(f"SPARKPAIR_MODEL_CACHE={_cache(t)} (/models/{folder})", total, got["bytes"], got["free"])
        if why := need.problem(f"node {t.name}"):
            out.append(why)
    return out


def sync(cluster: Cluster, folder: str, source: str, *, port: int = SYNC_PORT, network: str = "host",
         say: Any = print) -> list[str]:  # fmt: skip
    """Copy ``/models/<folder>`` from ``source`` to every other node, then check every node.

    Returns:
        One line per node/file that does not match the source's manifest (empty: all match).

    Raises:
        engines.EngineError: a node is unreachable or lacks the image (nothing was copied).
        SyncError: a step failed.
    """
    if folder.startswith("/") or ".." in folder.split("/"):
        raise SyncError(f"--folder {folder!r}; wanted a path inside SPARKPAIR_MODEL_CACHE, relative, no '..'")
    by_name = {n.name: n for n in cluster.nodes}
    if source not in by_name:
        raise SyncError(f"--from {source!r}; wanted one of the cluster's nodes {sorted(by_name)}")
    from .ops import refusals

    clients, problems = refusals(cluster)
    if problems:
        raise engines.EngineError("\n".join(problems))
    src = by_name[source]
    say(f"{src.name}: manifest of /models/{folder}")
    argv = ["model", "manifest", "--write", f"/models/{folder}"]
    finish(start(clients[src.name], src, argv, network=network, rw=True), src, "model manifest")
    problems = space_problems(cluster, folder, src, clients, network)
    if problems:
        raise SyncError("\n".join([*problems, "nothing was copied"]))
    for t in cluster.nodes:
        if t is src:
            continue
        secret = {TOKEN_ENV: new_token()}  # one per copy: both containers, nobody else
        ip = str(t.env.VLLM_HOST_IP)
        say(f"{src.name} -> {t.name} ({ip}:{port}): copying /models/{folder}")
        argv = ["model", "receive", "--into", f"/models/{folder}", "--bind", ip, "--port", str(port)]
        rx = start(clients[t.name], t, argv, network=network, rw=True, env=secret)
        for _ in range(60):  # the receiver says when it listens
            if b"listening on" in rx.logs():
                break
            rx.reload()
            if rx.status == "exited":
                break
            time.sleep(0.5)
        try:
            tx = start(clients[src.name], src, ["model", "send", f"/models/{folder}", "--to", f"{ip}:{port}"],
                       network=network, rw=False, env=secret)  # fmt: skip
            finish(tx, src, f"model send to {t.name}")
        finally:
            finish(rx, t, "model receive")
    say("checking every node against the manifest")
    return check(cluster, folder, clients, network, reference=src.name)
