# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair model pull | sync | manifest | verify | send | receive``: the checkpoint
downloaded once, copied to the other nodes over the fabric, and checked on every node
(docs/operations.md#the-checkpoint-once)."""

from __future__ import annotations

import math
import os
import re
import socket
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

err = Console(stderr=True, markup=False)  # paths, node names and server text are shown as given

REVISION_RE = re.compile(r"[0-9a-f]{40}")
"""A full commit id (matched whole: ``fullmatch``)."""
"""A pinned revision: a full 40-hex commit id (a branch or tag name can move)."""


def _bytes_progress(what: str, total: int | None):  # type: ignore[no-untyped-def]
    columns = (TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn())
    prog = Progress(*columns, TransferSpeedColumn(), console=err)
    task = prog.add_task(what, total=total)
    return prog, (lambda n: prog.update(task, advance=n))


def _folder_bytes(folder: Path) -> int:
    from .cluster.manifest import files_of

    return sum(p.stat().st_size for p in files_of(folder) if p.exists())


def _from_profile(name: str, repo_id: str | None, revision: str | None) -> tuple[str, str]:
    """``(repo, revision)`` of a profile's ``server.model`` and ``--revision``; exit 2 naming both
    when REPO_ID or --revision is also given and differs (one source for the pin)."""
    from sparkpair_serving.profile import ProfileError, arg_value, load_profile

    try:
        p = load_profile(name)
    except ProfileError as e:
        err.print(f"model pull: --profile {name}: {e}", highlight=False)
        raise typer.Exit(2) from None
    repo, rev = p.server.model, arg_value(p.server.args, "--revision")
    if not rev:
        err.print(f"model pull: --profile {name}: server.args has no --revision; wanted a profile that "
                  "pins its checkpoint, or REPO_ID --revision COMMIT", highlight=False)  # fmt: skip
        raise typer.Exit(2)
    for what, given, pinned in (("REPO_ID", repo_id, repo), ("--revision", revision, rev)):
        if given and given != pinned:
            err.print(f"model pull: {what} {given!r} and --profile {name}'s {pinned!r} differ; wanted one of "
                      "them (drop it, or the profile)", highlight=False)  # fmt: skip
            raise typer.Exit(2)
    return repo, rev


def register(app: typer.Typer) -> None:
    """Add the ``model`` command group to ``app``."""
    model = typer.Typer(help="The checkpoint: pull once, sync to the other nodes, verify everywhere.")
    app.add_typer(model, name="model")

    @model.command("manifest")
    def manifest_cmd(
        folder: Path = typer.Argument(..., help="checkpoint folder (a snapshot's symlinks are followed)"),
        write: bool = typer.Option(False, "--write", help="write it to FOLDER/.sparkpair-manifest.json"),
    ) -> None:
        """Every file of the checkpoint with its size and SHA-256 (JSON)."""
        from .cluster import manifest as mf

        try:
            prog, tick = _bytes_progress(
                f"hashing {folder}", _folder_bytes(folder) if folder.is_dir() else None
            )
            with prog:
                entries = mf.build(folder, on_bytes=tick)
        except mf.ManifestError as e:
            err.print(f"model manifest: {e}", highlight=False)
            raise typer.Exit(1) from None
        text = mf.to_json(entries)
        if write:
            (folder / mf.MANIFEST_NAME).write_text(text)
            err.print(f"model manifest: {len(entries)} files -> {folder / mf.MANIFEST_NAME}", highlight=False)
        else:
            print(text)

    @model.command("verify")
    def verify(
        folder: Path = typer.Argument(..., help="this node's copy of the checkpoint"),
        manifest: Path | None = typer.Option(None, help="manifest (default FOLDER/.sparkpair-manifest.json)"),
        node: str = typer.Option("", help="this node's name in messages (default SPARKPAIR_NODE_NAME)"),
        hashes: bool = typer.Option(True, "--hashes/--sizes-only", help="compare SHA-256 too"),
    ) -> None:
        """Check this node's copy against the manifest: every file present, same size, same
        SHA-256, nothing extra. Exit 1 naming the node and each bad file."""
        from .cluster import manifest as mf

        name = node or os.environ.get("SPARKPAIR_NODE_NAME") or socket.gethostname()
        src = manifest or folder / mf.MANIFEST_NAME
        try:
            want = mf.from_json(src.read_text(), str(src))
        except OSError as e:
            why = e.strerror or e
            err.print(
                f"model verify: node {name}: manifest {src}: cannot read it ({why}); "
                "wanted the manifest `sparkpair model manifest --write` made on the source node",
                highlight=False,
            )
            raise typer.Exit(1) from None
        except mf.ManifestError as e:
            err.print(f"model verify: node {name}: {e}", highlight=False)
            raise typer.Exit(1) from None
        print(f"node {name}: {mf.DIGEST_LABEL} {mf.digest(want)}")
        problems = mf.check(folder, want, name, hashes=hashes)
        for p in problems:
            print(p)
        if not problems:
            how = "sha256" if hashes else "sizes"
            print(f"node {name}: {folder}: {len(want)} files match the manifest ({how})")
        raise typer.Exit(1 if problems else 0)

    token_help = (
        "the sync token file, the same on both nodes [env SPARKPAIR_SYNC_TOKEN_FILE; or the token "
        "itself in SPARKPAIR_SYNC_TOKEN]"
    )

    @model.command("send")
    def send(
        folder: Path = typer.Argument(..., help="checkpoint folder to send"),
        to: str = typer.Option(..., help="receiver HOST:PORT (its fabric address)"),
        token_file: Path | None = typer.Option(None, envvar="SPARKPAIR_SYNC_TOKEN_FILE", help=token_help),
    ) -> None:
        """Prove the sync token to a `model receive` on another node, then stream FOLDER to it
        (symlinks resolved)."""
        from .cluster import transfer

        host, _, port = to.rpartition(":")
        if not host or not port.isdigit():
            err.print(f"model send: --to {to!r}; wanted HOST:PORT", highlight=False)
            raise typer.Exit(2)
        if not folder.is_dir():
            what = "does not exist" if not folder.exists() else "is not a folder"
            err.print(f"model send: {folder} {what}; wanted the checkpoint folder to send", highlight=False)
            raise typer.Exit(2)
        try:
            token, _ = transfer.resolve_token(token_file)
        except transfer.TransferError as e:
            err.print(f"model send: {e}", highlight=False)
            raise typer.Exit(2) from None
        prog, tick = _bytes_progress(f"sending {folder} to {to}", _folder_bytes(folder))
        try:
            with prog:
                n = transfer.send(folder, host.strip("[]"), int(port), token=token, on_bytes=tick)
        except transfer.TransferError as e:
            err.print(f"model send: {e}", highlight=False)
            raise typer.Exit(1) from None
        err.print(f"model send: {n} bytes to {to}", highlight=False)

    @model.command("receive")
    def receive(
        into: Path = typer.Option(..., help="folder to unpack into"),
        bind: str = typer.Option(..., help="address to listen on (this node's VLLM_HOST_IP)"),
        port: int = typer.Option(29610, min=1024, max=65535, help="TCP port"),
        timeout_s: float = typer.Option(
            600.0, help="seconds to wait for a sender that proves the token (refused peers do not end it)"
        ),
        token_file: Path | None = typer.Option(
            None, envvar="SPARKPAIR_SYNC_TOKEN_FILE", help=token_help + "; created (mode 600) when absent"
        ),
    ) -> None:
        """Accept one `model send` that proves the sync token, and unpack it into INTO. A peer
        without the token is refused, naming its address, before anything is written, and the
        receiver keeps listening until --timeout-s. Exit 2 on bad options, 1 on a failed copy."""
        from sparkpair_serving.inputs import check_output_dir

        from .cluster import transfer

        if not (math.isfinite(timeout_s) and timeout_s > 0):
            err.print(
                f"model receive: --timeout-s {timeout_s}; wanted a positive, finite number of seconds "
                "(default 600)",
                highlight=False,
            )
            raise typer.Exit(2)
        try:
            check_output_dir(into, "--into")
        except ValueError as e:
            err.print(f"model receive: {e}", highlight=False)
            raise typer.Exit(2) from None
        try:
            socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except (OSError, UnicodeError) as e:
            err.print(
                f"model receive: --bind {bind!r}: not an address ({e}); wanted this node's fabric "
                "address (VLLM_HOST_IP), e.g. 10.0.0.1",
                highlight=False,
            )
            raise typer.Exit(2) from None
        try:
            token, created = transfer.resolve_token(token_file, create=True)
        except transfer.TransferError as e:
            err.print(f"model receive: {e}", highlight=False)
            raise typer.Exit(2) from None
        if created:
            err.print(
                f"model receive: wrote a new sync token to {token_file} (mode 600); copy it to the "
                "sending node and pass it to `model send --token-file`",
                highlight=False,
                soft_wrap=True,
            )
        try:
            names = transfer.receive(
                into,
                bind,
                port,
                token=token,
                on_listen=lambda: err.print(
                    f"model receive: listening on {bind}:{port}", highlight=False, soft_wrap=True
                ),
                on_refused=lambda e: err.print(f"model receive: {e}; still listening", highlight=False),
                accept_timeout_s=timeout_s,
            )
        except (transfer.TransferError, OSError) as e:
            err.print(f"model receive: {e}", highlight=False)
            raise typer.Exit(1) from None
        err.print(f"model receive: {len(names)} files into {into}", highlight=False)

    @model.command("space")
    def space_cmd(
        folder: Path = typer.Argument(..., help="a checkpoint folder (it need not exist yet)"),
    ) -> None:
        """Free bytes on FOLDER's file system and the bytes FOLDER already holds, as JSON (what
        `model sync` asks each node before it copies)."""
        import json

        from .cluster import space

        print(
            json.dumps(
                {"path": str(folder), "free": space.free_bytes(folder), "bytes": space.bytes_here(folder)}
            )
        )

    @model.command("pull")
    def pull(
        repo_id: str = typer.Argument(
            None, help="Hugging Face repo id (deepseek-ai/DeepSeek-V4-Flash-0731) [default: the --profile's]"
        ),
        revision: str = typer.Option(
            None, help="the pinned revision: a full 40-hex commit id [default: the --profile's]"
        ),
        profile: str = typer.Option(
            None, help="take the repo and revision from this profile's server.model and --revision"
        ),
        into: Path = typer.Option(..., help="folder to download into (plain files, no symlinks)"),
    ) -> None:
        """Download the checkpoint at a pinned revision (resumable: run it again to continue),
        then write its manifest. Before downloading, the free space on INTO's file system is
        checked against what the hub lists for that revision."""
        if profile:
            repo_id, revision = _from_profile(profile, repo_id, revision)
        if not repo_id or not revision:
            err.print("model pull: wanted REPO_ID and --revision, or --profile NAME (e.g. --profile "
                      "deepseek-v4-flash) to take both from the profile", highlight=False)  # fmt: skip
            raise typer.Exit(2)
        if not REVISION_RE.fullmatch(revision):
            err.print(f"model pull: --revision {revision!r}; wanted a full 40-hex commit id "
                      "(a branch or tag can move between the nodes' pulls)", highlight=False)  # fmt: skip
            raise typer.Exit(2)
        import warnings

        from huggingface_hub import HfApi, snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
        from tqdm import TqdmExperimentalWarning
        from tqdm.rich import tqdm as rich_tqdm  # the hub's per-file bars, drawn with rich

        from .cluster import space

        warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)
        try:
            info = HfApi().model_info(repo_id, revision=revision, files_metadata=True)
            sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
            need = space.Need(
                str(into), sum(sizes.values()), space.bytes_here(into, sizes), space.free_bytes(into)
            )
            if why := need.problem("model pull"):
                err.print(f"{why}; nothing downloaded", highlight=False, soft_wrap=True)
                raise typer.Exit(1)
            gib = (need.missing / space.GIB, need.free / space.GIB)
            err.print(f"model pull: {repo_id}@{revision[:12]}: {gib[0]:.1f} GiB to download into {into} "
                      f"({gib[1]:.1f} GiB free)", highlight=False)  # fmt: skip
            snapshot_download(repo_id=repo_id, revision=revision, local_dir=str(into), tqdm_class=rich_tqdm)
        except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
            why = " ".join(str(e).split())[:300]
            err.print(
                f"model pull: {repo_id}@{revision}: {type(e).__name__}: {why}; "
                "wanted the hub reachable (and HF_HUB_OFFLINE unset) for the first pull",
                highlight=False,
            )
            raise typer.Exit(1) from None
        manifest_cmd(into, write=True)

    @model.command("sync")
    def sync_cmd(
        folder: str = typer.Option(..., help="checkpoint folder inside SPARKPAIR_MODEL_CACHE (relative)"),
        source: str = typer.Option(..., "--from", help="the node that has the checkpoint"),
        cluster: Path = typer.Option(
            Path("configs/cluster.yaml"),
            "--cluster",
            "-c",
            envvar="SPARKPAIR_CLUSTER_FILE",
            help="cluster file",
        ),
        port: int = typer.Option(29610, min=1024, max=65535, help="receiver TCP port on each target"),
        network: str = typer.Option("host", help="container network: host (real nodes) or a simulation's"),
    ) -> None:
        """Copy the checkpoint from one node to every other over the fabric (symlinks resolved),
        then check every node against the source's manifest. Exit 1 naming node and file."""
        from .cluster import engines
        from .cluster.sync import SyncError, sync
        from .cmd_cluster import _load

        try:
            problems = sync(_load(cluster), folder, source, port=port, network=network, say=err.print)
        except (engines.EngineError, SyncError) as e:
            err.print(f"model sync: {e}", highlight=False)
            raise typer.Exit(1) from None
        for p in problems:
            print(p)
        if not problems:
            print(f"every node has /models/{folder} as the manifest of {source} lists it")
        raise typer.Exit(1 if problems else 0)

    @model.command("check")
    def check_cmd(
        folder: str = typer.Option(..., help="checkpoint folder inside SPARKPAIR_MODEL_CACHE (relative)"),
        cluster: Path = typer.Option(
            Path("configs/cluster.yaml"),
            "--cluster",
            "-c",
            envvar="SPARKPAIR_CLUSTER_FILE",
            help="cluster file",
        ),
        network: str = typer.Option("host", help="container network: host (real nodes) or a simulation's"),
    ) -> None:
        """On every node, check the checkpoint against its manifest (same files, sizes, SHA-256),
        and every node's manifest against the head's. Exit 1 naming each node and file that differ."""
        from .cluster import engines, ops
        from .cluster.sync import SyncError, check
        from .cmd_cluster import _load

        c = _load(cluster)
        clients, problems = ops.refusals(c)
        if problems:
            err.print("model check: " + "\n".join(problems), highlight=False)
            raise typer.Exit(1)
        try:
            problems = check(c, folder, clients, network)
        except (engines.EngineError, SyncError) as e:
            err.print(f"model check: {e}", highlight=False)
            raise typer.Exit(1) from None
        for p in problems:
            print(p)
        if not problems:
            print(f"every node's /models/{folder} matches its manifest, the same on every node")
        raise typer.Exit(1 if problems else 0)
