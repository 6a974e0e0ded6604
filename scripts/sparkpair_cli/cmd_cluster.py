# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair up | down | status | logs``: every node of the cluster file, from one machine
(docs/operations.md)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

err = Console(stderr=True, markup=False)  # paths, node names and server text are shown as given
out = Console(markup=False)

EXIT_NOT_READY = 1
EXIT_CONFIG = 2
EXIT_REFUSED = 3

CLUSTER_OPT = typer.Option(
    Path("configs/cluster.yaml"),
    "--cluster",
    "-c",
    envvar="SPARKPAIR_CLUSTER_FILE",
    help="cluster file: every node's env file and Docker engine (configs/cluster.yaml.example)",
)


def _load(path: Path):  # type: ignore[no-untyped-def]
    from .cluster.spec import ClusterError, load_cluster

    try:
        return load_cluster(path)
    except ClusterError as e:
        err.print(f"sparkpair: {e}\nnothing was started or stopped", highlight=False)
        raise typer.Exit(EXIT_CONFIG) from None


def register(app: typer.Typer) -> None:
    """Add ``up``, ``down``, ``status`` and ``logs`` to ``app``."""

    @app.command("up")
    def up(
        cluster: Path = CLUSTER_OPT,
        wait: bool = typer.Option(True, "--wait/--no-wait", help="wait for the health verdict"),
    ) -> None:
        """Start every node (workers and head, any order) and wait for the health verdict.
        Refuses before starting anything when a node is unreachable, its image differs, or the
        env files disagree. Exit 0 ready, 1 not ready, 2 bad cluster/env file, 3 refused."""
        from .cluster import engines, ops

        c = _load(cluster)
        try:
            verdict = ops.up(c, err, wait=wait)
        except engines.EngineError as e:
            err.print(f"sparkpair up: refused; nothing was started\n{e}", highlight=False)
            raise typer.Exit(EXIT_REFUSED) from None
        except ops.NodeFailed as e:
            err.print(
                f"sparkpair up: a node failed; nothing more was started\n{e}\n"
                f"(`sparkpair status -c {cluster}` shows every node; `sparkpair down -c {cluster}` "
                "stops those that started)",
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(EXIT_NOT_READY) from None
        if not wait:
            raise typer.Exit(0)
        if verdict.ready:
            out.print(
                f"[green]ready[/green]: {c.head.name}'s gateway /readyz answered 200 "
                "(suite passed, canary fresh)",
                highlight=False,
            )
            raise typer.Exit(0)
        body = verdict.body
        err.print(
            f"not ready: {body.get('failing_check', '')} {body.get('cause', '')} "
            f"(`sparkpair status -c {cluster}`, `sparkpair logs -c {cluster}`)",
            highlight=False,
        )
        raise typer.Exit(EXIT_NOT_READY)

    @app.command("down")
    def down(
        cluster: Path = CLUSTER_OPT,
        volumes: bool = typer.Option(
            False, "--volumes", help="also remove the named volumes (JIT caches, state)"
        ),
    ) -> None:
        """Stop and remove every node's containers (every node is tried). Exit 1 if one failed."""
        from .cluster import ops

        failed = ops.down(_load(cluster), err, volumes=volumes)
        for line in failed:
            err.print(f"{line}", highlight=False)
        raise typer.Exit(1 if failed else 0)

    @app.command("status")
    def status(cluster: Path = CLUSTER_OPT) -> None:
        """Each node's containers, the verdict, the last canary and the kernel plan. Exit 0 when
        the verdict is ready, 1 otherwise."""
        from .cluster import ops

        _table, verdict = ops.status(_load(cluster), out)
        raise typer.Exit(0 if verdict.ready else 1)

    @app.command("logs")
    def logs(
        cluster: Path = CLUSTER_OPT,
        follow: bool = typer.Option(False, "--follow", "-f", help="keep printing new lines"),
        tail: int = typer.Option(200, min=0, help="lines per container to start with"),
    ) -> None:
        """Every node's container logs, each line prefixed with node/service."""
        from .cluster import ops

        try:
            problems = ops.logs(_load(cluster), follow=follow, tail=tail)
        except KeyboardInterrupt:
            raise typer.Exit(0) from None
        for line in problems:
            err.print(f"{line}", highlight=False)
        raise typer.Exit(1 if problems else 0)
