# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair node init`` and ``sparkpair node discover``: the node env file from what the node's
kernel knows (:mod:`.deploy.discover`), asking only for what it cannot know.

On each node::

    sparkpair node init --peer spark-b=192.168.177.12 --model-cache /srv/sparkpair/models

or from one machine, over every node's Docker engine (discovery runs in a short-lived container
of the image on each node, reading the host's ``/sys`` and ``/proc``), writing every node's env
file and the cluster file::

    sparkpair node init --engine spark-a=unix:///var/run/docker.sock --engine spark-b=ssh://me@spark-b \\
        --model-cache /srv/sparkpair/models --cluster-out configs/cluster.yaml
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from .deploy import discover as dv
from .deploy.nodeenv import NodeEnvError, dotenv_subset_problem, env_file_choice, load_node_env_file
from .deploy.nodeenv_values import NODE_NAME_RE, SECRET_KEYS, shown

err = Console(stderr=True, markup=False, soft_wrap=True)  # paths and values are shown whole
out = Console(markup=False)

EXIT_CONFIG = 2

DISCOVER_TIMEOUT_S = 120
"""Seconds discovery may take in a node's container (an image start and a few file reads)."""


def _pairs(items: list[str], what: str) -> dict[str, str]:
    """``NAME=VALUE`` options as a mapping (exit 2 naming the option on a bad one)."""
    got: dict[str, str] = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k or not v:
            err.print(f"sparkpair node init: {what} {item!r}; wanted NAME=VALUE")
            raise typer.Exit(EXIT_CONFIG)
        got[k.strip()] = v.strip()
    return got


def _example() -> str | None:
    """configs/node.env.example of this checkout (the template the file is written from)."""
    from sparkpair_serving.profile import CONFIGS_DIR

    p = CONFIGS_DIR / "node.env.example"
    return p.read_text() if p.is_file() else None


def render_env_file(prop: dv.Proposal, *, where: str) -> str:
    """The env file text: configs/node.env.example with each proposed value in place, a comment
    above it saying where the value comes from, and a header naming the node and time.

    Raises:
        NodeEnvError: a value would not read back the same in Compose and python-dotenv
            (quotes, ``$``, a backslash, a tab; :func:`.deploy.nodeenv.dotenv_subset_problem`).
    """
    values = {v.key: v for v in prop.values}
    for v in prop.values:
        if why := dotenv_subset_problem(f"{v.key}={v.value}"):
            raise NodeEnvError(f"{v.key}={v.value!r} (from {v.source}) {why}; wanted a plain value")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Written by `sparkpair node init` for node {prop.node} ({where}), {stamp}.",
        "# Each value it set says where it was read or who gave it; the rest are the example's.",
        "# Check it with `sparkpair node validate`; keep it out of git and images (it is ignored).",
        "",
    ]
    seen = set()
    for line in (_example() or "").splitlines():
        key = line.split("=", 1)[0] if "=" in line and not line.lstrip().startswith("#") else None
        if key in values:
            lines.append(f"# node init: {values[key].source}")
            lines.append(f"{key}={values[key].value}")
            seen.add(key)
        else:
            lines.append(line)
    rest = [k for k in values if k not in seen]
    if rest:
        lines += ["", "# --- set by `sparkpair node init` ---"]
        for k in rest:
            lines += [f"# node init: {values[k].source}", f"{k}={values[k].value}"]
    return "\n".join(lines) + "\n"


def show(prop: dv.Proposal, console: Console) -> None:
    """The proposal: every value with its source, then the findings and what is missing."""
    t = Table(title=f"node {prop.node}: proposed settings", show_header=True, header_style="bold")
    t.add_column("setting")
    t.add_column("value", overflow="fold")
    t.add_column("source", overflow="fold")
    for v in sorted(prop.values, key=lambda v: v.key):
        t.add_row(v.key, shown(v.key, v.value) if v.key in SECRET_KEYS else v.value, v.source)
    console.print(t)
    for f in prop.findings:
        console.print(f"node {prop.node}: {f}", highlight=False, soft_wrap=True)
    for m in prop.missing:
        console.print(f"node {prop.node}: not discovered: {m}", highlight=False, soft_wrap=True)


def write_checked(prop: dv.Proposal, path: Path, *, force: bool, where: str) -> None:
    """Write the env file (mode 600) and read it back as ``node validate`` does; exit 2 naming
    the problem when the file exists (without ``force``) or does not validate."""
    if path.exists() and not force:
        err.print(f"sparkpair node init: {path} exists; wanted a new file, or --force to replace it")
        raise typer.Exit(EXIT_CONFIG)
    try:
        text = render_env_file(prop, where=where)
    except NodeEnvError as e:
        err.print(f"sparkpair node init: node {prop.node}: {e}")
        raise typer.Exit(EXIT_CONFIG) from None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    try:
        env = load_node_env_file(path)
    except NodeEnvError as e:
        err.print(f"sparkpair node init: wrote {path}, but it does not validate:\n{e}")
        raise typer.Exit(EXIT_CONFIG) from None
    out.print(
        f"node {env.SPARKPAIR_NODE_NAME}: wrote {path} (mode 600): rank {env.SPARKPAIR_NODE_RANK}/"
        f"{env.SPARKPAIR_NNODES} ({env.role}), fabric {env.VLLM_HOST_IP} on {env.SPARKPAIR_FABRIC_IFNAME}; "
        f"next: sparkpair node validate --env-file {path}",
        highlight=False,
        soft_wrap=True,
    )


def _ask(facts: dv.NodeFacts, peers: dict[str, str], cache: str | None) -> tuple[dict[str, str], str | None]:
    """On a terminal, ask for the peer and the model cache (the two things no node can know)."""
    if not sys.stdin.isatty():
        return peers, cache
    if not peers:
        seen = sorted({ip for ips in facts.arp.values() for ip in ips})
        hint = f" (neighbours this node has seen: {', '.join(seen)})" if seen else ""
        got = typer.prompt(f"the other node, as NAME=FABRIC_ADDRESS{hint}")
        peers = _pairs([got], "peer")
    if not cache:
        cache = typer.prompt(
            "host folder for the checkpoint (SPARKPAIR_MODEL_CACHE)", default="/srv/sparkpair/models"
        )
    return peers, cache


def discover_on_engine(
    client: Any, image: str, *, mounts: dict[str, str] | None = None, live: bool = True
) -> dv.NodeFacts:
    """This node's facts read in a short-lived container of ``image`` on ``client``'s engine: the
    host's ``/sys`` and ``/proc`` mounted read-only under ``/host`` (or ``mounts``: host path ->
    path under ``/host``), the host's network (so ``ip`` lists the host's addresses), and the
    engine's own ``/info``.

    Raises:
        RuntimeError: the container failed; the message has its output.
    """
    mounts = mounts or {"/sys": "/host/sys", "/proc": "/host/proc"}
    argv = ["node", "discover", "--root", "/host", "--json", "--live" if live else "--recorded"]
    volumes = {src: {"bind": dst, "mode": "ro"} for src, dst in mounts.items()}
    c = client.containers.run(image, argv, detach=True, network_mode="host", volumes=volumes)
    try:
        code = c.wait(timeout=DISCOVER_TIMEOUT_S).get("StatusCode", -1)
        stdout = c.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = c.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        c.remove(force=True)
    if code != 0:
        raise RuntimeError(f"`sparkpair node discover` exited {code} in {image}: {stderr.strip()[-1500:]}")
    facts = dv.NodeFacts.from_json(stdout)
    facts.engine = client.info()  # the node's engine, asked through its own API
    facts.errors = [e for e in facts.errors if not e.startswith("Docker engine")]
    return facts


def init_over_engines(
    engines_: dict[str, str], *, image: str, model_cache: str, cluster_out: Path, force: bool,
    facts: dict[str, dv.NodeFacts] | None = None,
) -> list[Path]:  # fmt: skip
    """Every node's env file (``node-<name>.env`` beside the cluster file) and the cluster file,
    from each node's facts read over its engine (or ``facts``, already read); then the cluster
    file is loaded as ``sparkpair up`` loads it, so the files cannot disagree.

    Raises:
        typer.Exit: a node is unreachable, its discovery failed, the nodes share no fabric subnet,
            a file exists (without ``force``) or the result does not validate.
    """
    from .cluster.engines import EngineError
    from .cluster.spec import ClusterError, load_cluster

    if facts is None:
        import docker

        facts = {}
        for name, url in engines_.items():
            try:
                kw: dict[str, Any] = {"use_ssh_client": True} if url.startswith("ssh://") else {}
                client = docker.DockerClient(base_url=url, timeout=60, **kw)
                client.ping()
                facts[name] = discover_on_engine(client, image)
            except Exception as e:  # noqa: BLE001 - the SDK's errors, or the container's
                raise EngineError(
                    f"node {name}: docker={url}: discovery failed: {' '.join(str(e).split())[:600]}"
                ) from None
    try:
        props = dv.propose_pair(facts, model_cache=model_cache)
    except ValueError as e:
        err.print(f"sparkpair node init: {e}")
        raise typer.Exit(EXIT_CONFIG) from None
    written = []
    for name, prop in props.items():
        show(prop, out)
        if prop.missing:
            err.print(f"sparkpair node init: node {name}: not discovered: {'; '.join(prop.missing)}")
            raise typer.Exit(EXIT_CONFIG)
        path = cluster_out.parent / f"node-{name}.env"
        write_checked(prop, path, force=force, where=f"over {engines_.get(name, 'its engine')}")
        written.append(path)
    if cluster_out.exists() and not force:
        err.print(f"sparkpair node init: {cluster_out} exists; wanted a new file, or --force to replace it")
        raise typer.Exit(EXIT_CONFIG)
    checkout = Path.cwd().resolve()
    rel = os.path.relpath(checkout, cluster_out.parent.resolve())
    lines = [
        "# Written by `sparkpair node init` (discovery over each node's Docker engine).",
        "# Every node's env file is beside this file; `sparkpair up` checks they agree.",
        f"project_directory: {rel}",
        "nodes:",
    ]
    for name in props:
        lines.append(f"  {name}: {{env_file: node-{name}.env, docker: '{engines_.get(name, '')}'}}")
    cluster_out.write_text("\n".join(lines) + "\n")
    try:
        cl = load_cluster(cluster_out)
    except ClusterError as e:
        err.print(f"sparkpair node init: wrote {cluster_out}, but the nodes do not agree:\n{e}")
        raise typer.Exit(EXIT_CONFIG) from None
    out.print(
        f"wrote {cluster_out}: {len(cl.nodes)} nodes, head {cl.head.name} ({cl.head.env.VLLM_HOST_IP}); "
        f"next: sparkpair up -c {cluster_out}",
        highlight=False,
        soft_wrap=True,
    )
    return [*written, cluster_out]


def register(app: typer.Typer) -> None:
    """Add ``init`` and ``discover`` to the ``sparkpair node`` group (:mod:`.cmd_node` registers
    the group first).

    Raises:
        RuntimeError: ``app`` has no ``node`` group.
    """
    group = next((g.typer_instance for g in app.registered_groups if g.name == "node"), None)
    if group is None:
        raise RuntimeError("sparkpair_cli.cmd_node_init: register cmd_node first (no `node` group)")
    node: typer.Typer = group

    @node.command("discover")
    def discover_cmd(
        root: Path = typer.Option(
            Path("/"), help="root for /sys and /proc reads (a recorded tree, or /host)"
        ),
        live: bool = typer.Option(
            None, "--live/--recorded", help="run ip and docker [default: live when --root is /]"
        ),
        as_json: bool = typer.Option(False, "--json", help="print the facts as JSON"),
    ) -> None:
        """What this node's kernel knows: RoCE ports (HCA, netdev, link, MTU, IPv4, RoCE v2 GID
        index), GPU, memory, the Docker engine; and the layouts that need a look."""
        facts = dv.discover(root, live=live)
        if as_json:
            print(facts.to_json())
            return
        t = Table(show_header=True, header_style="bold", title="RDMA ports")
        for col in ("hca", "netdev", "state", "link", "MTU", "IPv4", "RoCE v2 GID"):
            t.add_column(col, overflow="fold")
        for p in facts.ports:
            gids = ", ".join(f"{k}: {v}" for k, v in p.roce_v2_gid.items()) or "-"
            link = f"{p.state} / {p.phys_state}"
            t.add_row(
                p.hca, p.netdev or "-", link, p.link_layer, str(p.mtu or "-"), ", ".join(p.ipv4) or "-", gids
            )
        out.print(t)
        gib = (facts.mem_total or 0) / (1 << 30)
        out.print(f"GPU: {facts.gpus or 'none'}; driver {facts.driver or 'none'}; MemTotal {gib:.1f} GiB")
        eng = facts.engine or {}
        out.print(
            f"Docker engine: {eng.get('ServerVersion', 'none')}; runtimes {sorted(eng.get('Runtimes') or {})}"
        )
        for f in dv.findings(facts):
            out.print(f"finding: {f}", highlight=False, soft_wrap=True)

    @node.command("init")
    def init_cmd(
        out_file: Path | None = typer.Option(
            None, "--out", help="the env file to write [default: $SPARKPAIR_NODE_ENV, else configs/node.env]"
        ),
        peer: list[str] = typer.Option(
            [], help="the other node as NAME=FABRIC_ADDRESS (repeat for more nodes)"
        ),
        model_cache: str = typer.Option(None, help="host folder of the checkpoint (SPARKPAIR_MODEL_CACHE)"),
        name: str = typer.Option(None, help="this node's name [default: its hostname]"),
        host_user: str = typer.Option(None, help="the user of a rootless Docker engine"),
        set_: list[str] = typer.Option(
            [], "--set", help="any other setting, KEY=VALUE (wins over discovery)"
        ),
        engine: list[str] = typer.Option(
            [], help="NAME=DOCKER_URL of every node: discover each over its engine (from one machine)"
        ),
        image: str = typer.Option("sparkpair:0.1.0", help="with --engine: the image discovery runs in"),
        cluster_out: Path = typer.Option(
            Path("configs/cluster.yaml"), help="with --engine: the cluster file"
        ),
        root: Path = typer.Option(Path("/"), help="root for /sys and /proc reads (a recorded tree)"),
        force: bool = typer.Option(False, "--force", help="replace files that exist"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print the proposal, write nothing"),
    ) -> None:
        """Propose this node's env file from what the kernel knows (every value with its source),
        ask for the peer and the model cache, write the file (mode 600) and validate it. Exit 2
        naming what could not be discovered."""
        if engine:
            if not model_cache:
                err.print(
                    "sparkpair node init: --engine needs --model-cache (the same host path on every node)"
                )
                raise typer.Exit(EXIT_CONFIG)
            from .cluster.engines import EngineError

            try:
                init_over_engines(_pairs(engine, "--engine"), image=image, model_cache=model_cache,
                                  cluster_out=cluster_out, force=force)  # fmt: skip
            except EngineError as e:
                err.print(f"sparkpair node init: {e}")
                raise typer.Exit(3) from None
            return
        try:
            target = env_file_choice(out_file, option="--out")
        except NodeEnvError as e:
            err.print(f"sparkpair node init: {e}")
            raise typer.Exit(EXIT_CONFIG) from None
        peers = _pairs(peer, "--peer")
        for k, v in peers.items():
            try:
                ipaddress.IPv4Address(v)
            except ValueError:
                err.print(f"sparkpair node init: --peer {k}={v!r}; wanted NAME=IPv4 address on the fabric")
                raise typer.Exit(EXIT_CONFIG) from None
            if not NODE_NAME_RE.match(k):
                err.print(f"sparkpair node init: --peer {k!r}=...; wanted the peer's SPARKPAIR_NODE_NAME")
                raise typer.Exit(EXIT_CONFIG)
        facts = dv.discover(root)
        if not dry_run:
            peers, model_cache = _ask(facts, peers, model_cache)
        prop = dv.propose(facts, peers=peers, model_cache=model_cache, name=name, host_user=host_user)
        for k, v in _pairs(set_, "--set").items():
            prop.set(k, v, "--set")
            prop.missing = [m for m in prop.missing if not m.startswith(f"{k}:")]
        show(prop, out)
        if dry_run:
            return
        if prop.missing:
            keys = ", ".join(m.split(":", 1)[0] for m in prop.missing)
            err.print(
                f"sparkpair node init: node {prop.node}: not discovered and not given: {keys}; nothing "
                "written "
                "(give them with the options named above, or --set KEY=VALUE)",
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_CONFIG)
        write_checked(prop, target, force=force, where=f"on {socket.gethostname()}")
