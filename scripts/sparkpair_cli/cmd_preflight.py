# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair preflight``: per-node host checks and cross-node comparisons; and
``sparkpair nccl-allreduce``: the two-rank NCCL all-reduce between nodes."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from .deploy.nodeenv import (
    NodeEnvError,
    env_file_choice,
    in_container,
    load_node_env_file,
    load_node_env_from_environ,
)

err = Console(stderr=True)


def register(app: typer.Typer) -> None:
    """Add ``preflight`` and ``nccl-allreduce`` to ``app``."""

    @app.command("preflight")
    def preflight(
        local: bool = typer.Option(True, "--local/--no-local", help="run this node's checks"),
        env_file: Path | None = typer.Option(
            None,
            help="node env file [default: in a container the environment, on the host $SPARKPAIR_NODE_ENV, "
            "else configs/node.env, as node validate]",
        ),
        root: Path = typer.Option(Path("/"), help="root for /sys, /proc, /etc reads (recorded trees)"),
        only: str = typer.Option("", help="comma list of check groups (rdma,netdev,gid,memory,...)"),
        facts_out: Path | None = typer.Option(None, help="write this node's report (with facts) as JSON"),
        compare: list[Path] = typer.Option(
            [],
            help="reports of every node (--facts-out files) to compare: --compare A.json B.json, "
            "or --compare A.json --compare B.json",
        ),
        more_reports: list[Path] = typer.Argument(
            None, metavar="REPORTS", help="more reports for --compare (after --compare A.json)"
        ),
        list_ids: bool = typer.Option(False, "--list", help="list check ids and exit"),
    ) -> None:
        """Check this node (fabric, memory, shm, logind, kernel, driver, ptxas, FlashInfer,
        checkpoint); with --compare, check the nodes agree. Exit 1 on any failure."""
        from .preflight import checks as pf
        from .preflight.ids import CHECK_IDS

        if list_ids:
            for k, v in CHECK_IDS.items():
                print(f"{k:20s} {v}")
            return
        # Click options take one value each: the files after the first one of a
        # `--compare A.json B.json` arrive as arguments, which only --compare may have.
        if more_reports and not compare:
            given = escape(str([str(p) for p in more_reports]))
            err.print(
                f"[red]preflight:[/red] report files {given} given without "
                "--compare; wanted `preflight --compare A.json B.json`",
                highlight=False,
            )
            raise typer.Exit(2)
        compare = [*compare, *(more_reports or [])]
        try:
            groups = pf.parse_only(only)
            if facts_out is not None:
                pf.check_facts_out(facts_out)
            reports = pf.load_reports(compare)
            results = pf.compare(reports) if compare else []
        except pf.PreflightInputError as e:
            err.print(f"[red]preflight:[/red] {escape(str(e))}", highlight=False)
            raise typer.Exit(2) from None
        failed = False
        if compare:
            pf.print_report(results, err)
            failed |= any(r.status == "fail" for r in results)
        if local and not compare:
            from sparkpair_serving.profile import ProfileError, load_profile

            # in the node's container compose gave the settings as the environment; anywhere else
            # (the host, or a container of another kind) they are in the env file
            on_host = not (in_container() and "SPARKPAIR_NODE_NAME" in os.environ)
            try:
                if env_file is not None or on_host:
                    env_file = env_file_choice(env_file)
                env = load_node_env_file(env_file) if env_file else load_node_env_from_environ()
            except NodeEnvError as e:
                err.print(f"[red]invalid node env[/red]\n{escape(str(e))}", highlight=False)
                raise typer.Exit(2) from None
            try:
                profile = load_profile(env.SPARKPAIR_PROFILE)
            except ProfileError as e:
                err.print(escape(str(e)), highlight=False)
                raise typer.Exit(2) from None
            report = pf.run_local(env, profile, root=root, only=groups)
            pf.print_report(report, err)
            if on_host and root == Path("/"):
                err.print(escape(pf.in_image_note(env, env_file, groups)), highlight=False, soft_wrap=True)
            if facts_out:
                try:
                    facts_out.write_text(report.to_json())
                except OSError as e:
                    err.print(
                        f"[red]preflight:[/red] --facts-out {escape(str(facts_out))}: cannot write it "
                        f"({escape(str(e.strerror or e))}); wanted a writable file path. The report:",
                        highlight=False,
                    )
                    print(report.to_json())
                    raise typer.Exit(2) from None
            failed |= bool(report.failed)
        raise typer.Exit(1 if failed else 0)

    @app.command("nccl-allreduce")
    def nccl_allreduce(
        env_file: Path | None = typer.Option(None, help="node env file (default: the environment)"),
        port: int = typer.Option(29599, help="rendezvous port on the head for this test"),
        max_bytes: str = typer.Option("1G", help="largest buffer (capped at 4G: B05 froze a node at 16G)"),
        floor_gbps: float = typer.Option(15.0, help="bus-bandwidth floor in GB/s at the largest size"),
        parse: Path | None = typer.Option(None, help="only parse a recorded log (nccl-tests or this test)"),
        transport: str = typer.Option("IB", help="the data path wanted: IB (RoCE) or Socket"),
        hcas: str = typer.Option("", help="with --parse: RDMA devices NCCL must list (default: NCCL_IB_HCA)"),
    ) -> None:
        """Two-rank NCCL all-reduce between the nodes (run on every node at once); asserts the
        data path is NET/IB (not NET/Socket) and busbw >= the floor. Exit 1 otherwise."""
        from .preflight import nccl

        if parse is not None:
            want = [h for h in hcas.split(",") if h] or None
            verdict = nccl.judge(
                nccl.parse_log(parse.read_text()), floor_gbps=floor_gbps, transport=transport, want_hcas=want
            )
            print(verdict.message)
            raise typer.Exit(0 if verdict.ok else 1)
        try:
            env = load_node_env_file(env_file) if env_file else load_node_env_from_environ()
        except NodeEnvError as e:
            err.print(f"[red]invalid node env[/red]\n{escape(str(e))}", highlight=False)
            raise typer.Exit(2) from None
        cap = nccl.parse_size(max_bytes)
        err.print(
            f"nccl-allreduce: rank {env.SPARKPAIR_NODE_RANK} of {env.SPARKPAIR_NNODES} on "
            f"{env.SPARKPAIR_NODE_NAME}: waiting for "
            f"the other node at {env.SPARKPAIR_HEAD_ADDR}:{port} (run this on every node at once; gives up "
            f"after SPARKPAIR_NCCL_TIMEOUT_S={os.environ.get('SPARKPAIR_NCCL_TIMEOUT_S', '600')} s)",
            highlight=False,
        )
        log = nccl.run_allreduce(env, port=port, max_bytes=cap, environ=dict(os.environ))
        log_path = Path(os.environ.get("TMPDIR", "/tmp")) / "sparkpair-nccl-allreduce.log"
        log_path.write_text(log)
        parsed = nccl.parse_log(log)
        verdict = nccl.judge(
            parsed,
            floor_gbps=floor_gbps,
            transport=transport,
            want_hcas=env.hcas if transport == "IB" else None,
            node=env.SPARKPAIR_NODE_NAME,
        )
        print(verdict.message)
        if not parsed.rows:  # no table: what the rank said last is the reason
            tail = [ln for ln in log.strip().splitlines() if ln.strip()][-3:]
            print(f"the rank's last lines ({log_path}):\n  " + "\n  ".join(tail or ["(no output)"]))
        raise typer.Exit(0 if verdict.ok else 1)
