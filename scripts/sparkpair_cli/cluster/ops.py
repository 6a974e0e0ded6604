"""``up``, ``down``, ``status`` and ``logs`` across every node of the cluster file.

A node is started exactly as an operator starts it by hand: ``docker compose`` with the
node's env file and its role's profiles, run here with ``DOCKER_HOST`` set to the node's
engine (one way to start a node: the compose file stays the single description of a node's
containers). Everything that can be known before starting is checked first, for every node:
the engine answers, the image is there and is the same image everywhere, the env files
describe one cluster. Then workers and head start (order does not matter: each waits for
the others within SPARKPAIR_JOIN_TIMEOUT_S), and ``up`` ends with the health gateway's verdict.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import docker
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text
from sparkpair_health.client import Deadline, HealthClient, RequestTimeout, SuiteError

from . import engines
from .spec import Cluster, Node

SERVICES = {"head": ("head", "health"), "worker": ("worker",)}
"""compose.yaml profiles (= services) each role runs."""

ALL_SERVICES = ("head", "worker", "health")

POLL_S = 2.0
"""Seconds between two looks at every node's containers while ``up`` waits: a container that
cannot start, exits or restarts stops ``up`` within a few seconds."""

GATEWAY_POLL_S = 5.0
"""Seconds between two questions to the gateway's ``/readyz`` while ``up`` waits."""


COMPOSE_PROGRESS = re.compile(
    r"^\s*(Volume|Network|Container|Image)\s+\S+\s+(Creating|Created|Starting|Started|Stopping|Stopped|"
    r"Removing|Removed|Waiting|Healthy|Running|Recreate|Recreated)\s*$"
)
"""A progress line of ``docker compose up/down`` (one object's step), left out of error messages
so that compose's own error is what is shown."""


class ComposeError(RuntimeError):
    """``docker compose`` failed on a node (the message names the node and shows compose's output)."""


class NodeFailed(RuntimeError):
    """A node's container cannot start, exited, restarts or is unhealthy; the message is Docker's
    own account of each such container (:func:`.engines.failure_report`)."""


def failures(
    cluster: Cluster, clients: dict[str, docker.DockerClient], started: dict[str, float]
) -> list[str]:
    """Docker's account of every failed container (:func:`.engines.failure`) of the nodes in
    ``started`` (node name -> ``time.monotonic()`` when its ``compose up`` returned)."""
    out = []
    for n in cluster.nodes:
        if n.name not in started or n.name not in clients:
            continue
        for c in engines.project_containers(clients[n.name], cluster.spec.project, SERVICES[n.role]):
            why = engines.failure(c, created_for_s=time.monotonic() - started[n.name])
            if why:
                out.append(engines.failure_report(n.name, c, why))
    return out


def compose(
    cluster: Cluster, node: Node, *args: str, profiles: tuple[str, ...], timeout_s: float = 900
) -> str:
    """Run ``docker compose <args>`` for ``node`` (its engine, env file, profiles); return its output.

    Compose is the program :func:`..deploy.compose_cli.find_compose` finds (its exit status is its
    own). It gets this machine's environment without the node settings and ``COMPOSE_*``
    variables (compose would take an exported value over the env file's, or another project
    or file list), so each node's services get exactly that node's env file.

    Raises:
        ComposeError: compose exited non-zero, ran past ``timeout_s``, or there is no Compose v2.
    """
    from ..deploy.compose_cli import ComposeUnavailable
    from ..deploy.compose_cli import run as run_compose
    from ..deploy.nodeenv_keys import COMPOSE_INTERPOLATED_KEYS, container_keys

    argv = [
        "-p",
        cluster.spec.project,
        "--project-directory",
        str(cluster.project_directory),
    ]
    for f in cluster.compose_files():
        argv += ["-f", str(f)]
    argv += ["--env-file", str(node.env_file)]
    for p in profiles:
        argv += ["--profile", p]
    drop = container_keys() | COMPOSE_INTERPOLATED_KEYS | {"DOCKER_CONTEXT", "SPARKPAIR_NODE_ENV"}
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("COMPOSE_")}
    env["DOCKER_HOST"] = node.docker
    try:
        r = run_compose([*argv, *args], env=env, timeout_s=timeout_s)
    except ComposeUnavailable as e:
        raise ComposeError(f"node {node.name}: {e}") from None
    except subprocess.TimeoutExpired:
        raise ComposeError(
            f"node {node.name}: docker compose {' '.join(args)} ran past {timeout_s:.0f} s"
        ) from None
    if r.returncode != 0:
        said = [x for x in (r.stdout + r.stderr).strip().splitlines() if not COMPOSE_PROGRESS.match(x)]
        tail = "\n".join(said)[-2000:]
        raise ComposeError(
            f"node {node.name}: docker compose {' '.join(args)} exited {r.returncode}:\n{tail}"
        )
    return r.stdout + r.stderr


def connect_all(cluster: Cluster) -> tuple[dict[str, docker.DockerClient], list[str]]:
    """Clients for every node that answers, and one line per node that does not."""
    clients: dict[str, docker.DockerClient] = {}
    problems: list[str] = []
    for n in cluster.nodes:
        try:
            clients[n.name] = engines.connect(n)
        except engines.EngineError as e:
            problems.append(str(e))
    return clients, problems


def refusals(cluster: Cluster) -> tuple[dict[str, docker.DockerClient], list[str]]:
    """Everything that stops ``up`` before any container starts: unreachable engines, then a
    missing or different image. (The env files were checked by :func:`.spec.load_cluster`.)"""
    clients, problems = connect_all(cluster)
    if not problems:
        problems = engines.image_problems(cluster.nodes, clients)
    return clients, problems


@dataclass
class Verdict:
    """The gateway's answer: ``ready`` and the ``/readyz`` body (or why there was none)."""

    ready: bool
    body: dict[str, Any]


GATEWAY_GET = """
import sys
from sparkpair_health.client import HealthClient, SuiteError
with HealthClient("http://127.0.0.1:" + sys.argv[1], request_timeout_s=10.0) as c:
    try:
        r = c.get(sys.argv[2])
    except SuiteError as e:
        print(0)
        print(e)
        raise SystemExit(0)
print(r.status_code)
print(r.text)
"""
"""Run inside the head's ``health`` container (``python3 -c``): one GET on the gateway through
the project's HTTP client; prints the status (0: no answer) and the body."""


def gateway_get(cluster: Cluster, clients: dict[str, docker.DockerClient], path: str) -> tuple[int, str]:
    """``(HTTP status, body)`` of ``path`` on the head's health gateway; status 0 when there was
    no answer (the body says why). Through ``gateway_url`` when the cluster file gives one,
    else inside the head's ``health`` container through the head's engine."""
    head = cluster.head
    if head.gateway_url:
        with HealthClient(head.gateway_url, request_timeout_s=10.0) as c:
            try:
                r = c.get(path)
            except SuiteError as e:
                return 0, f"gateway {head.gateway_url} did not answer: {e}"
        return r.status_code, r.text
    if head.name not in clients:
        return 0, f"node {head.name}: engine unreachable"
    found = engines.project_containers(clients[head.name], cluster.spec.project, ("health",))
    running = [c for c in found if c.status == "running"]
    if not running:
        return 0, f"node {head.name}: no running health container ({len(found)} found)"
    argv = ["python3", "-c", GATEWAY_GET, str(head.env.SPARKPAIR_GATEWAY_PORT), path]
    res = running[0].exec_run(argv, demux=True)
    stdout, stderr = (b.decode("utf-8", "replace") if b else "" for b in res.output)
    first, _, body = stdout.partition("\n")
    if res.exit_code != 0 or not first.strip().isdigit():
        why = (stdout + stderr).strip()[-300:]
        return 0, f"node {head.name}: asking the gateway in {running[0].name} failed: {why}"
    return int(first), body


def readyz(cluster: Cluster, clients: dict[str, docker.DockerClient]) -> Verdict:
    """The gateway's ``/readyz`` once (see :func:`gateway_get`)."""
    status, text = gateway_get(cluster, clients, "/readyz")
    if status == 0:
        return Verdict(False, {"cause": text})
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = {"cause": f"/readyz answered HTTP {status} with no JSON"}
    if not isinstance(body, dict):
        body = {"cause": f"/readyz answered HTTP {status} with JSON that is not an object: {text[:200]!r}"}
    return Verdict(status == 200 and bool(body.get("ready")), body)


def report(cluster: Cluster, clients: dict[str, docker.DockerClient]) -> dict[str, Any] | None:
    """The gateway's ``/report`` (the suite's report, with the kernel plan); None when there is none yet."""
    status, text = gateway_get(cluster, clients, "/report")
    if status != 200:
        return None
    try:
        d = json.loads(text)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None


def up(cluster: Cluster, console: Console, *, wait: bool = True) -> Verdict:
    """Refuse or start every node, then wait for the verdict (see the module docstring).

    Every node's containers are looked at every :data:`POLL_S` seconds: one that cannot start,
    exits, restarts or turns unhealthy ends ``up`` at once with Docker's account of it
    (:class:`NodeFailed`), instead of a wait for the verdict's timeout.

    Raises:
        engines.EngineError: a node is unreachable or its image is wrong (nothing was started).
        NodeFailed: compose failed on a node, or a node's container failed (nothing more is
            started; the nodes already started are left as they are for inspection).
    """
    clients, problems = refusals(cluster)
    if problems:
        raise engines.EngineError("\n".join(problems))
    started: dict[str, float] = {}
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(), console=console
    ) as prog:
        tasks = {n.name: prog.add_task(f"{n.name} ({n.role}): waiting to start") for n in cluster.nodes}
        for n in cluster.nodes:
            prog.update(tasks[n.name], description=f"{n.name} ({n.role}): docker compose up")
            try:
                compose(cluster, n, "up", "-d", profiles=SERVICES[n.role])
            except ComposeError as e:
                seen = failures(cluster, clients, {n.name: -1e9})  # its containers, created ones included
                raise NodeFailed("\n".join([str(e), *seen])) from None
            started[n.name] = time.monotonic()
            prog.update(tasks[n.name], description=f"{n.name} ({n.role}): started")
            if bad := failures(cluster, clients, started):
                raise NodeFailed("\n".join(bad))
        if not wait:
            return Verdict(False, {"cause": "not waited for (--no-wait)"})
        where = f"{cluster.head.name}'s gateway /readyz"
        gw = prog.add_task(f"verdict ({where}): waiting")
        deadline = Deadline(cluster.spec.verdict_timeout_s, f"sparkpair up: the verdict of {where}")
        verdict = Verdict(False, {"cause": "not asked yet"})
        asked = -GATEWAY_POLL_S
        while True:
            for n in cluster.nodes:
                cs = engines.project_containers(clients[n.name], cluster.spec.project, SERVICES[n.role])
                states = ", ".join(
                    f"{c.labels['com.docker.compose.service']} {engines.container_state(c)}" for c in cs
                )
                prog.update(tasks[n.name], description=f"{n.name} ({n.role}): {states or 'no container'}")
            if bad := failures(cluster, clients, started):
                raise NodeFailed("\n".join(bad))
            if time.monotonic() - asked >= GATEWAY_POLL_S:
                asked = time.monotonic()
                verdict = readyz(cluster, clients)
                phase = verdict.body.get("phase") or verdict.body.get("cause", "")
                prog.update(gw, description=f"verdict ({where}): {'ready' if verdict.ready else phase}"[:160])
                if verdict.ready:
                    return verdict
            try:
                time.sleep(min(POLL_S, deadline.left()))
                deadline.left()
            except RequestTimeout as e:
                verdict.body.setdefault("cause", str(e))
                verdict.body["timeout"] = str(e)
                return verdict


def down(cluster: Cluster, console: Console, *, volumes: bool = False) -> list[str]:
    """``docker compose down`` on every node (every node is tried); one line per node that failed,
    an unreachable engine included (nothing can be said to be down there)."""
    clients, failed = connect_all(cluster)
    for n in cluster.nodes:
        if n.name not in clients:
            continue
        args = ["down", "-t", "30", *(["-v"] if volumes else [])]
        try:
            with console.status(f"{n.name}: docker compose down"):
                compose(cluster, n, *args, profiles=ALL_SERVICES)
            console.print(f"{n.name}: down", highlight=False)
        except ComposeError as e:
            failed.append(str(e))
    return failed


def status(cluster: Cluster, console: Console) -> tuple[Table, Verdict]:
    """Each node's containers, the kernel plan and the verdict + canary from the gateway."""
    t = Table(show_header=True, header_style="bold", title=f"cluster {cluster.path}")
    for col in ("node", "role", "engine", "containers"):
        t.add_column(col, overflow="fold")
    clients: dict[str, docker.DockerClient] = {}
    failed: list[str] = []
    for n in cluster.nodes:
        try:
            clients[n.name] = engines.connect(n)
            cs = engines.project_containers(clients[n.name], cluster.spec.project, SERVICES[n.role])
            states = "\n".join(f"{c.name}: {engines.container_state(c)}" for c in cs) or "no container"
            for c in cs:
                # created with no start error: `up` may still be starting it, so only an engine
                # error or a long wait counts here
                why = engines.failure(c, created_for_s=engines.CREATED_GRACE_S + 1)
                if why:
                    failed.append(engines.failure_report(n.name, c, why, tail=10))
        except engines.EngineError as e:
            states = f"unreachable: {e}"
        t.add_row(n.name, n.role, n.docker, states)
    verdict = readyz(cluster, clients)
    rep = report(cluster, clients)
    console.print(t)
    for line in failed:
        console.print(line, highlight=False, soft_wrap=True)
    colour = "green" if verdict.ready else "red"
    console.print(
        Text.assemble(
            f"verdict ({cluster.head.name}'s gateway /readyz): ",
            ("ready" if verdict.ready else "not ready", colour),
        ),
        highlight=False,
    )
    for k in ("phase", "failing_check", "cause", "peer_down"):
        if k in verdict.body:
            console.print(f"  {k}: {verdict.body[k]}", highlight=False)
    canary = verdict.body.get("last_canary")
    console.print(f"canary: {json.dumps(canary) if canary else 'none yet'}", highlight=False)
    plan = (rep or {}).get("overlay_plan")
    console.print(
        f"kernel plan: {json.dumps(plan) if plan else 'none in the report yet'}",
        highlight=False,
        soft_wrap=True,
    )
    return t, verdict


def logs(cluster: Cluster, *, follow: bool, tail: int, out: Any = None) -> list[str]:
    """Print every node's containers' logs, each line prefixed ``node/service |``; with
    ``follow`` keep printing until interrupted. Returns one line per unreachable node."""
    out = out or sys.stdout
    lock = threading.Lock()
    clients, problems = connect_all(cluster)
    threads = []

    def pump(prefix: str, c: Any) -> None:
        for chunk in c.logs(stream=True, follow=follow, tail=tail):
            for line in chunk.decode("utf-8", "replace").splitlines():
                with lock:
                    print(f"{prefix} | {line}", file=out, flush=True)

    for n in cluster.nodes:
        if n.name not in clients:
            continue
        for c in engines.project_containers(clients[n.name], cluster.spec.project, SERVICES[n.role]):
            prefix = f"{n.name}/{c.labels['com.docker.compose.service']}"
            th = threading.Thread(target=pump, args=(prefix, c), daemon=True)
            th.start()
            threads.append(th)
    for th in threads:
        th.join()
    return problems
