"""Reads of ``/sys``, ``/proc``, ``/etc`` and command output, under an injectable root.

On a live system ``root`` is ``/`` and commands run. Under a recorded tree (tests), files
are read below ``root`` and each command's output comes from ``root/_cmd/<name>.json``
(``{"argv": [...], "rc": 0, "stdout": "..."}``), recorded from the real command.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path


class CommandUnavailable(RuntimeError):
    """The command is not installed here (or not recorded in the tree)."""


@dataclass(frozen=True)
class CmdResult:
    """Exit status and combined output of a command."""

    rc: int
    stdout: str


class Host:
    """One node's view: files below ``root``; commands live or recorded.

    Args:
        root: ``/`` on a live node, or a recorded tree.
        live: run commands (``True``) or read their recordings (``False``); default: live
            when ``root`` is ``/``.
        host_etc: where the host's ``/etc`` is visible (the container mounts the host's
            ``/etc/systemd`` at ``/run/host/etc/systemd``); falls back to ``etc``.
    """

    def __init__(
        self, root: Path = Path("/"), host_etc: str = "run/host/etc", live: bool | None = None
    ) -> None:
        self.root = Path(root)
        self.host_etc = host_etc
        # live commands with files under another root: a container reading the host's /sys
        # and /proc mounted at /host, on the host's network (`sparkpair node discover`)
        self.live = self.root == Path("/") if live is None else live

    def path(self, rel: str) -> Path:
        """``root/rel`` (``rel`` given without a leading slash)."""
        return self.root / rel.lstrip("/")

    def read(self, rel: str) -> str | None:
        """Text of ``root/rel`` stripped, or ``None`` when it cannot be read."""
        try:
            return self.path(rel).read_text(errors="replace").strip()
        except OSError:
            return None

    def listdir(self, rel: str) -> list[str]:
        """Sorted entry names of ``root/rel`` (empty when missing)."""
        p = self.path(rel)
        try:
            return sorted(x.name for x in p.iterdir())
        except OSError:
            return []

    def etc(self, rel: str) -> str | None:
        """A host ``/etc`` file: the mounted host copy first, then the local one."""
        got = self.read(f"{self.host_etc}/{rel}")
        return got if got is not None else self.read(f"etc/{rel}")

    def etc_glob(self, pattern_dir: str) -> list[str]:
        """Texts of ``*.conf`` files in a host ``/etc`` folder (sorted by name)."""
        for base in (f"{self.host_etc}/{pattern_dir}", f"etc/{pattern_dir}"):
            names = [n for n in self.listdir(base) if n.endswith(".conf")]
            if names:
                return [self.read(f"{base}/{n}") or "" for n in names]
        return []

    def run(self, name: str, argv: list[str], timeout_s: float = 60.0) -> CmdResult:
        """Run ``argv`` (live) or return the recording ``_cmd/<name>.json``.

        Raises:
            CommandUnavailable: not installed (live) or not recorded (tree).
        """
        if not self.live:
            rec = self.path(f"_cmd/{name}.json")
            if not rec.is_file():
                raise CommandUnavailable(f"{name}: not recorded in {self.root}")
            data = json.loads(rec.read_text())
            return CmdResult(int(data["rc"]), str(data["stdout"]))
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except FileNotFoundError:
            raise CommandUnavailable(f"{argv[0]}: not installed") from None
        except subprocess.TimeoutExpired as e:
            return CmdResult(124, f"timed out after {timeout_s:.0f} s: {e}")
        return CmdResult(r.returncode, r.stdout + r.stderr)
