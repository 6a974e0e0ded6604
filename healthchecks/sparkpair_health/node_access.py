"""Reaching a node from the health side: its commands, its host kernel log, its Docker engine.

- command runners: ``runner(argv, timeout_s) -> CommandResult`` on this host
  (:func:`local_runner`) or on a node over ``ssh -o BatchMode=yes`` (:func:`ssh_runner`);
  :func:`runner_for` maps a node's ``kernel_log`` setting (``local``, ``none``,
  ``ssh://user@host``) to one;
- the host kernel log: ``journalctl -k`` for the current or the previous boot, falling back to
  ``dmesg`` (:func:`read_kernel_log`), and whether a boot ended with a clean shutdown
  (:func:`ended_cleanly`);
- a Docker SDK client for a node's engine (:func:`docker_client`).

The stability watch (:mod:`sparkpair_health.stability`), the restart path
(:mod:`sparkpair_health.recovery`), the peer watch and ``sparkpair report`` read nodes through
these. Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

CLEAN_SHUTDOWN_MARKERS = (
    "reboot: Restarting system",
    "reboot: Power down",
    "reboot: System halted",
    "systemd-shutdown",
    "kvm: exiting hardware virtualization",
)
"""Kernel-log lines a clean shutdown or reboot ends with (Linux ``kernel/reboot.c``, systemd)."""


# --------------------------------------------------------------------------- command runners


@dataclass
class CommandResult:
    """What a command gave: exit code, stdout, stderr (text)."""

    rc: int
    stdout: str
    stderr: str = ""


CommandRunner = Callable[[Sequence[str], float], CommandResult]
"""``runner(argv, timeout_s) -> CommandResult``; never raises for a failing command."""


def local_runner(argv: Sequence[str], timeout_s: float) -> CommandResult:
    """Run ``argv`` on this host (``rc`` 127: not installed, 124: timed out)."""
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s, errors="replace")
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{shlex.join(argv)}: no exit within {timeout_s:g} s")
    return CommandResult(p.returncode, p.stdout, p.stderr)


def ssh_runner(target: str, base: CommandRunner = local_runner) -> CommandRunner:
    """A runner that runs each command on ``target`` (``user@host``) with ``ssh -o BatchMode=yes``."""

    def run(argv: Sequence[str], timeout_s: float) -> CommandResult:
        ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, int(timeout_s))}", target]
        return base([*ssh, shlex.join(argv)], timeout_s)

    return run


def runner_for(kernel_log: str) -> CommandRunner | None:
    """The runner a node's ``kernel_log`` setting names (``None`` for ``none``).

    Raises:
        ValueError: an unknown value (names the setting, the value and the accepted forms).
    """
    if kernel_log == "none":
        return None
    if kernel_log == "local":
        return local_runner
    if kernel_log.startswith("ssh://"):
        return ssh_runner(kernel_log.removeprefix("ssh://"))
    raise ValueError(f"kernel_log={kernel_log!r}: wanted 'local', 'none' or 'ssh://user@host'")


# --------------------------------------------------------------------------- kernel log


def journal_commands(previous_boot: bool, since: str | None) -> list[list[str]]:
    """The commands tried in order for one kernel log (the first that exits 0 wins)."""
    if previous_boot:
        return [["journalctl", "-k", "-b", "-1", "--no-pager", "-q", "-o", "short-iso"]]
    cur = ["journalctl", "-k", "-b", "0", "--no-pager", "-q", "-o", "short-iso"]
    if since:
        cur += ["--since", since]
    return [cur, ["dmesg", "--ctime"], ["dmesg"]]


def read_kernel_log(
    runner: CommandRunner, previous_boot: bool = False, since: str | None = None, timeout_s: float = 20.0
) -> tuple[str | None, str]:
    """(text, what was run or why nothing could be read); ``text`` is ``None`` when unreadable."""
    tried = []
    for argv in journal_commands(previous_boot, since):
        r = runner(argv, timeout_s)
        if r.rc == 0:
            return r.stdout, shlex.join(argv)
        tried.append(f"{shlex.join(argv)}: exit {r.rc}: {(r.stderr or r.stdout).strip()[:160]}")
    return None, "; ".join(tried)


def ended_cleanly(kernel_text: str, tail_lines: int = 200) -> bool:
    """True when one of :data:`CLEAN_SHUTDOWN_MARKERS` is among the last ``tail_lines`` lines."""
    tail = kernel_text.splitlines()[-tail_lines:]
    return any(m in line for line in tail for m in CLEAN_SHUTDOWN_MARKERS)


# --------------------------------------------------------------------------- docker


def docker_client(url: str | None, timeout_s: float) -> Any:
    """A ``docker.DockerClient`` for ``url`` (``None``: the environment's, as the CLI does).

    ``ssh://`` URLs use the system ``ssh`` binary (``use_ssh_client=True``), so paramiko is
    not needed.
    """
    import docker

    if url is None:
        return docker.from_env(timeout=int(timeout_s))
    return docker.DockerClient(base_url=url, timeout=int(timeout_s), use_ssh_client=url.startswith("ssh://"))
