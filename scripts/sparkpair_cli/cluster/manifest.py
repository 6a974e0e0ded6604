"""A checkpoint's manifest (every file, its size and SHA-256) and the check of a copy against it.

The manifest is taken on the node that downloaded the checkpoint and checked on every node
before serving, so a shard that is missing, cut short or different on one node is named
(node and file) instead of surfacing as a load error or wrong output. Symlinks are followed:
a Hugging Face snapshot folder holds symlinks into ``blobs/``, and what counts is the bytes
behind them; a symlink whose target is gone is reported as such.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = ".sparkpair-manifest.json"
"""File name of the manifest inside the checkpoint folder (not itself listed)."""

SCHEMA = "sparkpair-checkpoint-manifest/1"

SKIP_DIRS = frozenset({".cache", ".git"})
"""Folders that are not the checkpoint: huggingface_hub's download metadata (``.cache/``
of a ``local_dir`` download) and a git clone's ``.git``."""

DIGEST_LABEL = "manifest sha256"
"""``model verify`` prints ``node N: manifest sha256 <hex>`` (:func:`digest`); ``model check``
compares them across nodes."""

CHUNK = 8 << 20
"""Bytes read per hashing step (8 MiB)."""


class ManifestError(ValueError):
    """The folder or the manifest cannot be read."""


@dataclass(frozen=True)
class Entry:
    """One file: path relative to the checkpoint folder (POSIX), size in bytes, SHA-256 hex."""

    path: str
    size: int
    sha256: str


def files_of(folder: Path) -> list[Path]:
    """Every file of the checkpoint (symlinks followed; :data:`SKIP_DIRS` and the manifest
    left out), sorted. Dangling symlinks are included (their check reports them).

    Raises:
        ManifestError: a symlinked folder leads back into a folder already walked (a loop), or
            an entry is neither a plain file nor a folder behind its links (a FIFO, a device:
            reading one would block or never end); the message names the entry.
    """
    out: list[Path] = []
    seen: set[tuple[int, int]] = set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        st = os.stat(root)
        if (st.st_dev, st.st_ino) in seen:
            raise ManifestError(
                f"{root}: a symlinked folder that leads back to a folder already listed (a loop); "
                "wanted a checkpoint folder without symlink loops"
            )
        seen.add((st.st_dev, st.st_ino))
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for n in names:
            if n == MANIFEST_NAME:
                continue
            p = Path(root) / n
            if p.exists() and not p.is_file():
                raise ManifestError(
                    f"{p}: not a plain file (a FIFO, socket or device behind it); wanted only files"
                )
            out.append(p)
    return sorted(out)


def sha256_of(path: Path, on_bytes: Callable[[int], None] | None = None) -> str:
    """SHA-256 of the bytes behind ``path`` (symlinks followed); ``on_bytes(n)`` after each chunk."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            if on_bytes:
                on_bytes(len(chunk))
    return h.hexdigest()


def build(folder: Path, on_bytes: Callable[[int], None] | None = None) -> list[Entry]:
    """The manifest of ``folder``.

    Raises:
        ManifestError: not a folder, or a file cannot be read (a dangling symlink included).
    """
    if not folder.is_dir():
        raise ManifestError(f"{folder}: not a folder; wanted the checkpoint folder")
    out = []
    for p in files_of(folder):
        rel = p.relative_to(folder).as_posix()
        try:
            out.append(Entry(rel, p.stat().st_size, sha256_of(p, on_bytes)))
        except OSError as e:
            raise ManifestError(f"{folder}: {rel}: cannot read it ({e.strerror or e})") from None
    return out


def to_json(entries: list[Entry]) -> str:
    """The manifest as JSON (``{"schema", "files": [{path, size, sha256}]}``)."""
    return json.dumps({"schema": SCHEMA, "files": [e.__dict__ for e in entries]}, indent=1)


def from_json(text: str, source: str) -> list[Entry]:
    """Parse a manifest written by :func:`to_json`.

    Raises:
        ManifestError: not JSON, another schema, or malformed entries.
    """
    try:
        d = json.loads(text)
        if d.get("schema") != SCHEMA:
            raise ManifestError(f"{source}: schema {d.get('schema')!r}; wanted {SCHEMA!r}")
        out = []
        for f in d["files"]:
            path, size, sha = f["path"], f["size"], f["sha256"]
            parts = str(path).split("/")
            if not isinstance(path, str) or path.startswith("/") or ".." in parts or "" in parts:
                raise ManifestError(f"{source}: path {path!r}; wanted a relative path inside the folder")
            if type(size) is not int or size < 0:
                raise ManifestError(f"{source}: {path}: size {size!r}; wanted a whole number of bytes >= 0")
            if not isinstance(sha, str) or len(sha) != 64:
                raise ManifestError(f"{source}: {path}: sha256 {sha!r}; wanted 64 hex digits")
            out.append(Entry(path, size, sha))
        return out
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
        if isinstance(e, ManifestError):
            raise
        raise ManifestError(f"{source}: not a checkpoint manifest ({type(e).__name__}: {e})") from None


def digest(entries: list[Entry]) -> str:
    """SHA-256 of the manifest's content (paths, sizes, hashes; order-independent): equal on
    two nodes exactly when both copies were checked against the same manifest."""
    return hashlib.sha256(to_json(sorted(entries, key=lambda e: e.path)).encode()).hexdigest()


def check(folder: Path, want: list[Entry], node: str, *, hashes: bool = True) -> list[str]:
    """Compare the copy in ``folder`` with the manifest ``want``; one line per problem, each
    naming ``node`` and the file: missing (or a dangling symlink), a different size, a
    different SHA-256 (only with ``hashes``), or a file the manifest does not list."""
    problems: list[str] = []
    listed = set()
    for e in want:
        listed.add(e.path)
        p = folder / e.path
        if not p.exists():
            what = f"a dangling symlink to {os.readlink(p)}" if p.is_symlink() else "missing"
            problems.append(
                f"node {node}: {folder}/{e.path}: {what}; wanted {e.size} bytes, sha256 {e.sha256[:12]}"
            )
            continue
        size = p.stat().st_size
        if size != e.size:
            problems.append(
                f"node {node}: {folder}/{e.path}: {size} bytes; wanted {e.size} bytes (the manifest's)"
            )
            continue
        if hashes:
            got = sha256_of(p)
            if got != e.sha256:
                problems.append(
                    f"node {node}: {folder}/{e.path}: sha256 {got[:12]}; wanted {e.sha256[:12]} "
                    "(the manifest's)"
                )
    if folder.is_dir():
        for p in files_of(folder):
            rel = p.relative_to(folder).as_posix()
            if rel not in listed:
                problems.append(
                    f"node {node}: {folder}/{rel}: not in the manifest; wanted only the manifest's files"
                )
    return problems
