"""Run the node's vLLM process as a child and turn "stopped serving" into a failed exit.

vLLM returns exit status 0 when its engine fails, for example after the other node of the
pair died (docs/reference/node-env.md, "vLLM's exit status when a peer dies"), the same
status as a requested stop. Compose's ``restart: on-failure`` then never restarts the node.
``sparkpair node run`` therefore does not ``exec`` vLLM: it starts it as a child, forwards
SIGTERM/SIGINT to it, and when the child ends without having been asked to stop it exits
with :data:`EXIT_PEER_LOST`, its last log line naming the peer.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

EXIT_PEER_LOST = 5
"""Exit status of ``sparkpair node run`` when vLLM stopped serving on its own (status 0,
which vLLM also uses for an engine that died with its peer). Non-zero so compose's
``restart: on-failure`` restarts the node; 2-4 are the node's config/preflight/cluster
errors (cmd_node.py)."""

FORWARDED = (signal.SIGTERM, signal.SIGINT)
"""Signals passed on to the child: docker stop (SIGTERM via tini) and Ctrl-C."""


@dataclass(frozen=True)
class ChildExit:
    """How the child ended.

    Attributes:
        returncode: ``Popen.returncode``: the exit status, or ``-N`` when killed by signal N.
        stop_signal: the signal this process received and forwarded (a requested stop), or
            ``None`` when nobody asked the node to stop.
        runtime_s: seconds the child ran.
    """

    returncode: int
    stop_signal: int | None
    runtime_s: float


def run_child(
    argv: list[str],
    env: Mapping[str, str],
    *,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 5.0,
) -> ChildExit:
    """Start ``argv`` with ``env``, forward :data:`FORWARDED` signals to it, wait for it.

    ``on_tick(elapsed_s)`` runs every ``tick_s`` seconds while the child lives (the caller
    samples who its peers are). Signal handlers are restored before returning.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=dict(env))
    box: dict[str, int] = {}

    def forward(signum: int, _frame: object) -> None:
        box.setdefault("sig", signum)
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        while True:
            try:
                rc = proc.wait(timeout=tick_s)
                break
            except subprocess.TimeoutExpired:
                if on_tick is not None:
                    on_tick(time.monotonic() - t0)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    return ChildExit(rc, box.get("sig"), time.monotonic() - t0)


def exit_status(child: ChildExit) -> int:
    """The node's exit status for how its vLLM child ended.

    - asked to stop (``stop_signal`` set): 0 when the child exited 0 or by that signal,
      else the child's status (a stop that went wrong is still reported);
    - not asked, child exited 0: :data:`EXIT_PEER_LOST`;
    - not asked, child killed by signal N: ``128 + N`` (the shell's convention);
    - not asked, child exited N > 0: N.
    """
    rc = child.returncode
    sig = child.stop_signal
    if sig is not None and rc in (0, -sig, 128 + sig):
        return 0
    if sig is None and rc == 0:
        return EXIT_PEER_LOST
    return 128 - rc if rc < 0 else rc


def last_line(child: ChildExit, *, node: str, role: str, peers: str) -> str:
    """The node's last log line: what vLLM did, what that means, which peer, which exit.

    ``peers`` names the other node(s) as this node knows them (the head's address for a
    worker; the workers last seen connected for the head).
    """
    code = exit_status(child)
    rc = child.returncode
    how = f"was killed by signal {-rc}" if rc < 0 else f"exited {rc}"
    ran = f"after {child.runtime_s:.0f} s"
    if child.stop_signal is not None:
        name = signal.Signals(child.stop_signal).name
        return f"node {node} ({role}): stopped on {name}; vLLM {how} {ran}; exit {code}"
    if rc == 0:
        return (
            f"node {node} ({role}): vLLM {how} {ran} without a stop request: its engine stopped, "
            f"which is what vLLM does when a peer of the pair dies; peer: {peers}; exit {code} "
            "so compose's restart policy restarts this node"
        )
    return (
        f"node {node} ({role}): vLLM {how} {ran} without a stop request (peer: {peers}); exit {code} "
        "so compose's restart policy restarts this node"
    )
