"""Copying a checkpoint folder between nodes: one TCP connection carrying a tar stream.

The receiver listens on its node's fabric address (``VLLM_HOST_IP``) and unpacks into the
target folder; the sender connects to it and streams the folder with symlinks resolved
(tar ``dereference``), so a Hugging Face snapshot (symlinks into ``blobs/``) arrives as
plain files. Members that would land outside the target folder, and members that are not
plain files or folders, are refused (checked here: the image's Python predates tarfile's
extraction filters). The copy is then checked against the sender's manifest (:mod:`.manifest`).
"""

from __future__ import annotations

import os
import shutil
import socket
import tarfile
from collections.abc import Callable
from pathlib import Path

from .manifest import CHUNK, MANIFEST_NAME, SKIP_DIRS, files_of

PARTIAL_SUFFIX = ".sparkpair-partial"
"""Suffix of a member being received (renamed to its name once complete)."""

ACCEPT_TIMEOUT_S = 600.0
"""Seconds the receiver waits for the sender to connect."""


class TransferError(RuntimeError):
    """The copy could not be made (connection refused or cut, a refused member)."""


def send(folder: Path, host: str, port: int, on_bytes: Callable[[int], None] | None = None,
         connect_timeout_s: float = 30.0) -> int:  # fmt: skip
    """Stream ``folder`` (and its manifest, when there is one) to a receiver; return bytes sent.

    Raises:
        TransferError: the receiver cannot be reached or the connection broke.
    """
    if not folder.is_dir():
        raise TransferError(f"{folder}: not a folder; wanted the checkpoint folder to send")
    if not 0 < port < 65536:
        raise TransferError(f"receiver port {port}; wanted 1-65535")
    try:
        sock = socket.create_connection((host, port), timeout=connect_timeout_s)
    except OSError as e:
        raise TransferError(f"receiver {host}:{port}: cannot connect ({e.strerror or e})") from None
    sent = 0
    sock.settimeout(None)
    with sock, sock.makefile("wb") as raw:

        class Counted:
            def write(self, b: bytes) -> int:
                nonlocal sent
                raw.write(b)
                sent += len(b)
                if on_bytes:
                    on_bytes(len(b))
                return len(b)

        try:
            with tarfile.open(fileobj=Counted(), mode="w|", dereference=True) as tar:  # type: ignore[call-overload]
                for p in files_of(folder):
                    tar.add(p, arcname=p.relative_to(folder).as_posix(), recursive=False)
                if (folder / MANIFEST_NAME).is_file():
                    tar.add(folder / MANIFEST_NAME, arcname=MANIFEST_NAME, recursive=False)
        except OSError as e:
            raise TransferError(f"sending {folder} to {host}:{port}: {e.strerror or e}") from None
    return sent


def receive(into: Path, bind: str, port: int, on_listen: Callable[[], None] | None = None,
            accept_timeout_s: float = ACCEPT_TIMEOUT_S) -> list[str]:  # fmt: skip
    """Accept one sender on ``bind:port`` and unpack its stream into ``into``; return the
    member names written.

    Raises:
        TransferError: nobody connected in time, the stream broke, or a member was refused.
    """
    into.mkdir(parents=True, exist_ok=True)
    with socket.create_server((bind, port), reuse_port=False) as srv:
        srv.settimeout(accept_timeout_s)
        if on_listen:
            on_listen()
        try:
            conn, _peer = srv.accept()
        except TimeoutError:
            raise TransferError(
                f"no sender connected to {bind}:{port} within {accept_timeout_s:.0f} s"
            ) from None
    names: list[str] = []
    conn.settimeout(None)
    with conn, conn.makefile("rb") as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r|") as tar:
                root = into.resolve()
                for m in tar:
                    if m.name.split("/", 1)[0] in SKIP_DIRS:
                        continue
                    dest = (root / m.name).resolve()
                    if Path(m.name).is_absolute() or (dest != root and root not in dest.parents):
                        raise TransferError(f"member {m.name!r} would land outside the destination {into}")
                    if m.isdir():
                        dest.mkdir(parents=True, exist_ok=True)
                        continue
                    if not m.isfile():  # the sender resolves links: anything else is refused
                        raise TransferError(f"member {m.name!r} is not a plain file or folder")
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    src = tar.extractfile(m)
                    if src is None:
                        raise TransferError(f"member {m.name!r} has no data")
                    # A member lands under a temporary name and replaces the file only once
                    # complete: a cut or refused stream never truncates a file already there.
                    part = dest.with_name(dest.name + PARTIAL_SUFFIX)
                    try:
                        with part.open("wb") as f:
                            shutil.copyfileobj(src, f, CHUNK)
                        os.replace(part, dest)
                    finally:
                        part.unlink(missing_ok=True)
                    names.append(m.name)
        except (tarfile.TarError, OSError) as e:
            raise TransferError(f"receiving into {into} on {bind}:{port}: {e}") from None
    if not names:
        raise TransferError(
            f"receiving into {into} on {bind}:{port}: the stream held no file; wanted a checkpoint folder"
        )
    return names
