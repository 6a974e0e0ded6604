"""Wedge recovery: notice a pair that stopped serving and restart it, a bounded number of times.

Off by default (``SPARKPAIR_RECOVERY=true`` turns it on); it lives in the gateway, which
already judges the pair (canary, peers) and reaches both nodes' Docker engines through the
stability settings (see ``docs/observability.md`` for why here and not in the node supervisor).

What counts as a wedge (:meth:`Recovery.observe`, called by the gateway once per canary):

- **engine dead**: the canary's cause says the engine died or the server went away, or a
  peer node is named down (:mod:`sparkpair_health.peers`);
- **canary timeouts while /health answers**: ``recovery_after_failures`` canaries in a row
  failed (a timeout on a server whose ``/health`` still answers 200 is the field's wedge);
- **tokens stopped**: vLLM's own counters (its ``/metrics``) show requests running
  (``vllm:num_requests_running`` > 0) while ``vllm:generation_tokens_total`` has not moved for
  ``recovery_stall_s`` seconds (:class:`TokenProgress`).

The policy (:class:`RestartBudget`): at most ``recovery_max_restarts`` restarts within any
``recovery_window_s``; the next wedge beyond that is not restarted: recovery stops for good,
and ``/readyz`` (``failing_check: recovery``) and the log say why, with every restart's cause.

The restart (:func:`restart_pair`): stop the head's containers (the API stops serving), restart
every worker's containers, then start the head's, in that order, each through its node's
Docker engine (``stability.nodes[].docker_url`` and ``containers``): the head waits for the
workers to join when it starts, so the workers must be up again first. Runs in the slim client.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engine_load import ENGINE_SAMPLES, read_samples
from .node_access import docker_client
from .stability import StabilityNode


def _say(line: str) -> None:
    print(f"sparkpair gateway: recovery: {line}", file=sys.stderr, flush=True)


DEAD_CAUSES = ("engine died", "server went away")
"""Prefixes/fragments of the gateway canary's causes that mean the engine is gone
(:meth:`sparkpair_health.gateway.canary.CanaryMixin.canary_once` writes them)."""


def vllm_progress(metrics_text: str) -> tuple[float, float] | None:
    """(requests running, generated tokens total) summed over label sets from vLLM's
    Prometheus text, or ``None`` when either series is absent or a sample of them is not a
    finite number (names: :data:`sparkpair_health.engine_load.ENGINE_SAMPLES`, read by its one
    parser)."""
    got = read_samples(metrics_text, {k: ENGINE_SAMPLES[k] for k in ("running", "generated")})
    return None if got is None else (got["running"], got["generated"])


class TokenProgress:
    """Says when generated tokens stopped advancing while requests run.

    Args:
        stall_s: seconds without a new generated token, with requests running, that make a wedge.
        clock: seconds, monotonic.
    """

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self.tokens: float | None = None
        self.since: float | None = None

    def observe(self, running: float, tokens: float) -> str:
        """Feed one sample; returns why the engine counts as wedged, or ``""``."""
        now = self.clock()
        if self.tokens is None or tokens != self.tokens or running <= 0:
            self.tokens, self.since = tokens, now
            return ""
        assert self.since is not None
        idle = now - self.since
        if idle >= self.stall_s:
            return (
                f"tokens stopped: vllm:generation_tokens_total stayed {tokens:g} for {idle:.0f} s with "
                f"{running:g} request(s) running (recovery_stall_s={self.stall_s:g})"
            )
        return ""


class RestartBudget:
    """At most ``max_restarts`` restarts within any ``window_s`` seconds.

    Args:
        max_restarts: restarts allowed in a window (>= 1).
        window_s: the sliding window, seconds.
        clock: seconds, monotonic.
    """

    def __init__(
        self, max_restarts: int, window_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.clock = clock
        self.times: deque[float] = deque()

    def used(self) -> int:
        """Restarts within the window ending now."""
        now = self.clock()
        while self.times and now - self.times[0] > self.window_s:
            self.times.popleft()
        return len(self.times)

    def take(self) -> bool:
        """Spend one restart if the window allows it (True), else False (nothing spent)."""
        if self.used() >= self.max_restarts:
            return False
        self.times.append(self.clock())
        return True


def restart_pair(nodes: Sequence[StabilityNode], head: str = "head", timeout_s: float = 60.0) -> list[str]:
    """Restart the pair's containers in order: stop the head's, restart the workers', start the head's.

    Args:
        nodes: the stability nodes (``name``, ``docker_url``, ``containers``); the one named
            ``head`` is the head, the others are workers.
        timeout_s: Docker's stop timeout per container, seconds.

    Returns:
        One line per action done, in order.

    Raises:
        RuntimeError: a node's Docker engine or a container could not be reached or acted
            on; the message names the node, the container and Docker's error.
    """
    heads = [n for n in nodes if n.name == head]
    workers = [n for n in nodes if n.name != head]
    done: list[str] = []

    def act(node: StabilityNode, what: str) -> None:
        where = node.docker_url or "the local Docker engine"
        try:
            client = docker_client(node.docker_url, timeout_s + 30)
            for name in node.containers:
                c = client.containers.get(name)
                if what == "stop":
                    c.stop(timeout=int(timeout_s))
                elif what == "start":
                    c.start()
                else:
                    c.restart(timeout=int(timeout_s))
                done.append(f"{what} {node.name}/{name}")
        except Exception as e:  # noqa: BLE001 - docker raises DockerException, APIError, OSError
            raise RuntimeError(
                f"{node.name}: docker {what} on {where} failed: {type(e).__name__}: {e}"
            ) from None

    for n in heads:
        act(n, "stop")
    for n in workers:
        act(n, "restart")
    for n in heads:
        act(n, "start")
    return done


@dataclass
class RecoveryEvent:
    """One wedge seen: when (unix s), why, and what recovery did (``restarted``, ``exhausted``,
    ``failed``), or ``recovered``: the first successful canary after a restart."""

    at: float
    cause: str
    action: str
    detail: str = ""


@dataclass
class Recovery:
    """The gateway's wedge recovery (see the module docstring).

    Args:
        budget: the restart policy.
        after_failures: canary failures in a row that make a wedge.
        progress: the token-progress detector (``None``: not used).
        restart: the action (default: :func:`restart_pair` of the stability nodes); tests inject one.
        grace_s: after a restart, seconds in which no new wedge is declared until a canary
            succeeds again (the pair loads; the gateway uses ``ready_timeout_s``).
        clock: seconds, monotonic.
        say: where each event's line goes (default: the gateway's stderr, i.e. the container log).
    """

    budget: RestartBudget
    after_failures: int
    restart: Callable[[], list[str]]
    progress: TokenProgress | None = None
    grace_s: float = 0.0
    clock: Callable[[], float] = time.monotonic
    say: Callable[[str], None] = _say
    events: list[RecoveryEvent] = field(default_factory=list)
    exhausted: str | None = None
    last_restart_at: float | None = None
    served_since_restart: bool = True

    def wedge_cause(
        self, canary_ok: bool, canary_cause: str, failures: int, peer_down: str | None, metrics: str | None
    ) -> str:
        """Why the pair counts as wedged now, or ``""`` (pure: no action)."""
        if peer_down:
            return f"a peer is down: {peer_down}"
        if not canary_ok and any(m in canary_cause for m in DEAD_CAUSES):
            return f"engine dead: {canary_cause}"
        if not canary_ok and failures >= self.after_failures:
            return (
                f"{failures} canaries failed in a row "
                f"(recovery_after_failures={self.after_failures}): {canary_cause}"
            )
        if self.progress is not None and metrics is not None:
            p = vllm_progress(metrics)
            if p is not None:
                return self.progress.observe(*p)
        return ""

    def observe(
        self,
        canary_ok: bool,
        canary_cause: str,
        failures: int,
        peer_down: str | None = None,
        metrics: str | None = None,
    ) -> RecoveryEvent | None:
        """Judge one canary tick; restart the pair when it is wedged and the budget allows.

        Returns the event when a wedge was acted on (restarted, exhausted, failed) or the pair
        serves again after a restart (recovered), else None. Never raises (a failed restart is
        an event naming the error).
        """
        if self.exhausted is not None:
            return None
        now = self.clock()
        if canary_ok and peer_down is None and not self.served_since_restart:
            self.served_since_restart = True
            last = self.events[-1].cause if self.events else ""
            back = RecoveryEvent(
                time.time(),
                last,
                "recovered",
                f"serving again {now - (self.last_restart_at or now):.0f} s after the restart",
            )
            self.say(f"the pair serves again after the wedge ({last}): {back.detail}")
            self.events.append(back)
            return back
        if (
            not self.served_since_restart
            and self.last_restart_at is not None
            and now - self.last_restart_at < self.grace_s
        ):
            return None  # the pair is loading again after a restart
        cause = self.wedge_cause(canary_ok, canary_cause, failures, peer_down, metrics)
        if not cause:
            return None
        if not self.budget.take():
            self.exhausted = (
                f"recovery stopped: {self.budget.max_restarts} restart(s) within recovery_window_s="
                f"{self.budget.window_s:g} s did not keep the pair serving; last wedge: {cause}"
            )
            ev = RecoveryEvent(time.time(), cause, "exhausted", self.exhausted)
            self.say(self.exhausted)
        else:
            self.last_restart_at = now
            self.served_since_restart = False
            try:
                done = self.restart()
                ev = RecoveryEvent(time.time(), cause, "restarted", "; ".join(done))
                self.say(f"wedge ({cause}); restarted the pair: {ev.detail}")
            except Exception as e:  # noqa: BLE001 - the verdict must say it; the gateway goes on
                ev = RecoveryEvent(time.time(), cause, "failed", f"{type(e).__name__}: {e}")
                self.say(f"wedge ({cause}); the restart failed: {ev.detail}")
            if self.progress is not None:
                self.progress.tokens = None
        self.events.append(ev)
        return ev

    def state(self) -> dict[str, Any]:
        """For ``/status`` and ``/readyz``: restarts in the window, the budget, exhaustion, the events."""
        return {
            "restarts_in_window": self.budget.used(),
            "max_restarts": self.budget.max_restarts,
            "window_s": self.budget.window_s,
            "exhausted": self.exhausted,
            "events": [e.__dict__ for e in self.events[-10:]],
        }
