"""Copying a checkpoint folder between nodes: one TCP connection carrying a tar stream.

The receiver listens on its node's fabric address (``VLLM_HOST_IP``) and unpacks into the
target folder; the sender connects to it and streams the folder with symlinks resolved
(tar ``dereference``), so a Hugging Face snapshot (symlinks into ``blobs/``) arrives as
plain files. Members that would land outside the target folder, and members that are not
plain files or folders, are refused (checked here: the image's Python predates tarfile's
extraction filters). The copy is then checked against the sender's manifest (:mod:`.manifest`).

Before a byte is written, the sender proves it holds the receiver's sync token (a shared
secret, :class:`SyncToken`): the receiver sends a greeting and a fresh random nonce, the sender
answers ``HMAC-SHA256(token, context + nonce)``, the receiver compares it in constant time
(:func:`hmac.compare_digest`) and answers one byte, accept or refuse. A wrong answer, a short
one or none within :data:`HANDSHAKE_TIMEOUT_S` is refused naming the peer's address; the
target folder is not even created. The nonce makes a recorded answer useless for another
connection. The token authenticates the sender only: the stream itself is not encrypted
(the weights are not secret; the fabric is the pair's own cable), and its integrity is the
manifest's SHA-256 check after the copy.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import shutil
import socket
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sparkpair_serving.inputs import read_small_file

from .manifest import CHUNK, MANIFEST_NAME, SKIP_DIRS, files_of

PARTIAL_SUFFIX = ".sparkpair-partial"
"""Suffix of a member being received (renamed to its name once complete)."""

ACCEPT_TIMEOUT_S = 600.0
"""Seconds the receiver waits for a sender that proves the token (refused peers, such as a
port scan, do not end the wait)."""


HANDSHAKE_TIMEOUT_S = 30.0
"""Seconds each side waits for the other's next handshake message (greeting, answer, verdict)."""

STREAM_IDLE_TIMEOUT_S = 300.0
"""Seconds without a byte after which an authenticated stream counts as stalled (a copy at
fabric speed never pauses this long; a stopped sender must not hold the receiver for ever)."""

TOKEN_ENV = "SPARKPAIR_SYNC_TOKEN"
"""Environment variable holding the sync token itself (``model sync`` passes a fresh one to
both ends this way)."""
TOKEN_FILE_ENV = "SPARKPAIR_SYNC_TOKEN_FILE"
"""Environment variable naming the token file (the default of ``--token-file``)."""

TOKEN_MAX_BYTES = 4096
"""Largest token file read (bytes): a token is one line; anything bigger is a mistake."""
TOKEN_MIN_CHARS = 32
"""Shortest token accepted (characters): 128 bits as hex; :func:`new_token` makes 64."""

GREETING = b"SPARKPAIR-SYNC/1"
"""What a receiver sends first, before its nonce (16 bytes)."""
NONCE_BYTES = 32
"""Size of the receiver's random nonce (bytes); the answer is HMAC-SHA256, 32 bytes."""
_CONTEXT = b"sparkpair model send v1\0"
"""Prefixed to the nonce under the HMAC, so the answer is bound to this use of the token."""
_ACCEPT, _REFUSE = b"A", b"R"


class TransferError(RuntimeError):
    """The copy could not be made (connection refused or cut, a refused member or sender)."""


@dataclass(frozen=True)
class SyncToken:
    """The secret a sender must hold; ``repr`` never shows it.

    Attributes:
        secret: the token's bytes (UTF-8 of the stripped line), at least
            :data:`TOKEN_MIN_CHARS` long.
        source: where it came from, for messages (``--token-file=/path`` or ``SPARKPAIR_SYNC_TOKEN``).
    """

    secret: bytes = field(repr=False)
    source: str

    def answer(self, nonce: bytes) -> bytes:
        """``HMAC-SHA256(secret, context + nonce)``: 32 bytes."""
        return hmac.new(self.secret, _CONTEXT + nonce, hashlib.sha256).digest()


def new_token() -> str:
    """A fresh token: 32 random bytes as 64 hex characters (:func:`secrets.token_hex`)."""
    return secrets.token_hex(32)


def _check_token(text: str, source: str) -> SyncToken:
    text = text.strip()
    if "\n" in text or "\r" in text:
        raise TransferError(f"{source}: the token holds {len(text.splitlines())} lines; wanted one line")
    if len(text) < TOKEN_MIN_CHARS:
        raise TransferError(
            f"{source}: the token has {len(text)} characters; wanted at least {TOKEN_MIN_CHARS} "
            "(`sparkpair model receive --token-file PATH` writes a fresh 64-character one "
            "when PATH is absent)"
        )
    return SyncToken(text.encode("utf-8"), source)


def resolve_token(token_file: Path | None, env: Mapping[str, str] | None = None, *,
                  create: bool = False) -> tuple[SyncToken, bool]:  # fmt: skip
    """The sync token from ``token_file``, else ``$SPARKPAIR_SYNC_TOKEN``; with ``create``, a
    missing ``token_file`` is made (a fresh :func:`new_token`, mode 0600) first.

    Returns:
        The token and whether the file was created now.

    Raises:
        TransferError: neither is set, the file is missing (without ``create``), unreadable,
            not a small regular file, not UTF-8, not one line, or shorter than
            :data:`TOKEN_MIN_CHARS`. Messages name the setting and path, never the content.
    """
    env = os.environ if env is None else env
    if token_file is None:
        if env.get(TOKEN_ENV):
            return _check_token(env[TOKEN_ENV], TOKEN_ENV), False
        raise TransferError(
            f"no sync token: --token-file, {TOKEN_FILE_ENV} and {TOKEN_ENV} are unset; wanted "
            "--token-file PATH naming the same token file on both nodes (`model receive` creates "
            "it when absent; copy it to the sender)"
        )
    source = f"--token-file={token_file}"
    created = False
    if create and not os.path.lexists(token_file):
        try:
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as e:
            raise TransferError(f"{source}: cannot create the token file ({e.strerror or e})") from None
        with os.fdopen(fd, "w") as f:
            f.write(new_token() + "\n")
        created = True
    try:
        data = read_small_file(token_file, TOKEN_MAX_BYTES)
    except OSError as e:
        raise TransferError(
            f"{source}: cannot read the token file ({e.strerror or e}); wanted a copy of the "
            "receiver's token file"
        ) from None
    except ValueError as e:
        raise TransferError(f"{source}: the token file is {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TransferError(
            f"{source}: the token file is not UTF-8 text; wanted one line holding the token"
        ) from None
    return _check_token(text, source), created


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    """Up to ``n`` bytes: fewer only when the peer closed the connection."""
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def _authenticate_sender(conn: socket.socket, peer: str, token: SyncToken, timeout_s: float) -> None:
    """The receiver's side of the handshake; returns only when the sender proved the token."""
    wanted = f"wanted a `sparkpair model send` holding this receiver's token ({token.source})"
    nonce = secrets.token_bytes(NONCE_BYTES)
    conn.settimeout(timeout_s)
    try:
        conn.sendall(GREETING + nonce)
        got = _recv_exact(conn, hashlib.sha256().digest_size)  # HMAC-SHA256: 32 bytes
    except TimeoutError:
        raise TransferError(
            f"sender {peer}: sent no authentication within {timeout_s:g} s; {wanted}; "
            "refused, nothing written"
        ) from None
    except OSError as e:
        raise TransferError(
            f"sender {peer}: connection failed during authentication ({e.strerror or e}); {wanted}"
        ) from None
    size = hashlib.sha256().digest_size
    if len(got) < size or not hmac.compare_digest(got, token.answer(nonce)):
        seen = (
            f"closed after {len(got)} of {size} authentication bytes"
            if len(got) < size
            else "answered with another HMAC-SHA256 (a wrong token, or not a sparkpair sender)"
        )
        try:
            conn.sendall(_REFUSE)
        except OSError:
            pass
        raise TransferError(f"sender {peer}: {seen}; {wanted}; refused, nothing written")
    conn.sendall(_ACCEPT)


def _authenticate_to_receiver(sock: socket.socket, where: str, token: SyncToken, timeout_s: float) -> None:
    """The sender's side of the handshake; returns only when the receiver accepted."""
    sock.settimeout(timeout_s)
    try:
        hello = _recv_exact(sock, len(GREETING) + NONCE_BYTES)
        if len(hello) < len(GREETING) + NONCE_BYTES or not hello.startswith(GREETING):
            raise TransferError(
                f"receiver {where}: greeted with {len(hello)} bytes that are not a sparkpair receiver's "
                f"greeting; wanted `sparkpair model receive` ({GREETING.decode()} and a "
                f"{NONCE_BYTES}-byte nonce)"
            )
        sock.sendall(token.answer(hello[len(GREETING) :]))
        verdict = _recv_exact(sock, 1)
    except TimeoutError:
        raise TransferError(
            f"receiver {where}: no handshake within {timeout_s:g} s; "
            "wanted `sparkpair model receive` answering"
        ) from None
    except OSError as e:
        raise TransferError(
            f"receiver {where}: connection failed during authentication ({e.strerror or e})"
        ) from None
    if verdict != _ACCEPT:
        raise TransferError(
            f"receiver {where} refused this sender's token ({token.source}); wanted the same token "
            "as the receiver's (a copy of its --token-file)"
        )


def send(folder: Path, host: str, port: int, *, token: SyncToken,
         on_bytes: Callable[[int], None] | None = None, connect_timeout_s: float = 30.0,
         handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S) -> int:  # fmt: skip
    """Prove ``token`` to the receiver, then stream ``folder`` (and its manifest, when there is
    one) to it; return bytes sent.

    Raises:
        TransferError: the receiver cannot be reached, refused the token, or the connection broke.
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
    with sock:
        _authenticate_to_receiver(sock, f"{host}:{port}", token, handshake_timeout_s)
        sock.settimeout(STREAM_IDLE_TIMEOUT_S)
        raw = sock.makefile("wb")

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
            raw.close()
        except OSError as e:
            raise TransferError(f"sending {folder} to {host}:{port}: {e.strerror or e}") from None
    return sent


def receive(into: Path, bind: str, port: int, *, token: SyncToken,
            on_listen: Callable[[], None] | None = None,
            on_refused: Callable[[TransferError], None] | None = None,
            accept_timeout_s: float = ACCEPT_TIMEOUT_S,
            handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
            idle_timeout_s: float = STREAM_IDLE_TIMEOUT_S) -> list[str]:  # fmt: skip
    """Listen on ``bind:port`` until a sender proves it holds ``token`` (at most
    ``accept_timeout_s`` in all), and unpack its stream into ``into``; return the member names
    written.

    A peer that does not prove the token (wrong, short or no answer within
    ``handshake_timeout_s``: a port scan, a stray client) is refused and closed, nothing
    written, ``on_refused`` called with the error naming it, and the receiver keeps listening.
    Peers are handled one at a time; the listener closes once a sender is accepted.

    Raises:
        TransferError: ``bind:port`` cannot be listened on; no sender proved the token in time
            (the message counts the refused peers and quotes the last refusal); the stream broke
            or stalled ``idle_timeout_s``; or a member was refused (outside ``into``, ``into``
            itself, or not a plain file or folder).
    """
    deadline = time.monotonic() + accept_timeout_s
    refused: list[TransferError] = []
    try:
        srv = socket.create_server((bind, port), reuse_port=False)
    except OSError as e:
        raise TransferError(
            f"cannot listen on {bind}:{port} ({e.strerror or e}); wanted an address of this node "
            "(its VLLM_HOST_IP) and a free port"
        ) from None
    with srv:
        if on_listen:
            on_listen()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                last = f"; the last refusal: {refused[-1]}" if refused else ""
                raise TransferError(
                    f"no sender proved the sync token on {bind}:{port} within {accept_timeout_s:g} s "
                    f"({len(refused)} connection(s) refused{last})"
                )
            srv.settimeout(left)
            try:
                conn, addr = srv.accept()
            except TimeoutError:
                continue
            peer = f"{addr[0]}:{addr[1]}"
            try:
                _authenticate_sender(conn, peer, token, handshake_timeout_s)
            except TransferError as e:
                conn.close()
                refused.append(e)
                if on_refused:
                    on_refused(e)
                continue
            break
    names: list[str] = []
    with conn:
        into.mkdir(parents=True, exist_ok=True)
        conn.settimeout(idle_timeout_s)
        raw = conn.makefile("rb")
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
                    if dest == root:  # '', '.', './': would write <into>.sparkpair-partial beside it
                        raise TransferError(
                            f"member {m.name!r} names the destination {into} itself; wanted a file inside it"
                        )
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
        except TimeoutError:
            raise TransferError(
                f"sender {peer}: sent nothing for {idle_timeout_s:g} s into {into}; wanted the rest of "
                "the stream (the sender stalled or its node went away)"
            ) from None
        except (tarfile.TarError, OSError) as e:
            raise TransferError(f"receiving into {into} on {bind}:{port} from {peer}: {e}") from None
        finally:
            raw.close()
    if not names:
        raise TransferError(
            f"receiving into {into} on {bind}:{port}: the stream held no file; wanted a checkpoint folder"
        )
    return names
