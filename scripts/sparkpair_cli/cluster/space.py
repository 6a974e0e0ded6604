"""Free disk space for the checkpoint (~155 GiB for DeepSeek-V4-Flash-0731): checked before a
download and before a copy, so a full disk is named before hours of transfer, not after.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30

HEADROOM_BYTES = 1 * GIB
"""Room left free beyond the checkpoint itself: the download's and the copy's partial files
(``*.incomplete``, ``*.sparkpair-partial``) of the largest shard, and the manifest."""


def existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest folder that exists (where the files will land's file system)."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s file system (``statvfs``
    ``f_bavail``, via :func:`shutil.disk_usage`)."""
    return shutil.disk_usage(existing_ancestor(path)).free


def bytes_here(folder: Path, sizes: dict[str, int] | None = None) -> int:
    """Bytes of ``folder`` already on disk: every file (symlinks followed, as copies resolve
    them), or with ``sizes`` (relative path -> size) only the files already of that size (what a
    resumed download skips)."""
    if not folder.is_dir():
        return 0
    if sizes is None:
        from .manifest import files_of

        return sum(p.stat().st_size for p in files_of(folder) if p.exists())
    have = 0
    for rel, size in sizes.items():
        p = folder / rel
        if p.is_file() and os.stat(p).st_size == size:
            have += size
    return have


@dataclass(frozen=True)
class Need:
    """What a download or a copy into ``target`` will write."""

    target: str
    total: int
    """Bytes of the whole checkpoint."""
    have: int
    """Bytes of it already there."""
    free: int
    """Free bytes on the target's file system."""

    @property
    def missing(self) -> int:
        return max(self.total - self.have, 0)

    def shortfall(self) -> int:
        """Bytes more the file system must free for the transfer (0: it fits with
        :data:`HEADROOM_BYTES` to spare)."""
        if self.missing == 0:
            return 0
        return max(self.missing + HEADROOM_BYTES - self.free, 0)

    def problem(self, who: str) -> str | None:
        """One line naming ``who`` (a node, or the command) and the shortfall, or ``None``."""
        short = self.shortfall()
        if not short:
            return None
        free, missing, total, have = (x / GIB for x in (self.free, self.missing, self.total, self.have))
        return (
            f"{who}: {self.target} has {free:.1f} GiB free; the checkpoint needs {missing:.1f} GiB more "
            f"({total:.1f} GiB in all, {have:.1f} GiB already there) plus {HEADROOM_BYTES / GIB:.0f} GiB of "
            f"headroom: short by {short / GIB:.1f} GiB; wanted that much freed on it, or another folder"
        )
