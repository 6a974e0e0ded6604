"""The gateway's Prometheus metrics, in their own registry; every name is ``sparkpair_``-prefixed.

The series and what they mean are listed in ``docs/observability.md`` (the Grafana dashboards
of the compose ``metrics`` profile read them). Runs in the slim client.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import SecretStr
from sparkpair_serving.apikey import redact


class GatewayMetrics:
    """The gateway's Prometheus metrics, in their own registry (all ``sparkpair_``-prefixed).

    Args:
        key: the server's API key: every label value that is not the gateway's own word passes
            :func:`~sparkpair_serving.apikey.redact` with it.
    """

    STATUSES = ("pass", "fail", "skip", "error")

    def __init__(self, key: SecretStr | None = None) -> None:
        self.key = key
        r = self.registry = CollectorRegistry()
        self.ready = Gauge("sparkpair_ready", "1 when /readyz answers 200", registry=r)
        self.check_status = Gauge(
            "sparkpair_check_status",
            "1 for the status of each check in the latest report",
            ["check", "status"],
            registry=r,
        )
        self.check_duration = Gauge(
            "sparkpair_check_duration_seconds",
            "wall time of each check in the latest report",
            ["check"],
            registry=r,
        )
        self.spec_acceptance = Gauge(  # from the spec_acceptance check (checks/speculation.py); NaN: no rate
            "sparkpair_spec_acceptance_rate", "accepted / drafted tokens, latest suite run", registry=r
        )
        self.suite_runs = Counter("sparkpair_suite_runs", "suite runs started", registry=r)
        self.suite_passed = Gauge("sparkpair_suite_passed", "1 when the latest report passed", registry=r)
        self.suite_duration = Gauge(
            "sparkpair_suite_duration_seconds", "latest suite run, seconds", registry=r
        )
        self.canary_latency = Histogram(
            "sparkpair_canary_latency_seconds",
            "latency of successful canary completions",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )
        self.canary_last_latency = Gauge(
            "sparkpair_canary_last_latency_seconds", "latency of the latest canary (ok or not)", registry=r
        )
        self.canary_total = Counter(
            "sparkpair_canary", "canary completions by result", ["result"], registry=r
        )
        self.canary_consecutive_failures = Gauge(
            "sparkpair_canary_consecutive_failures", "canary failures since the last success", registry=r
        )
        self.engine_busy = Gauge(
            "sparkpair_engine_busy",
            "1 while the last canary was slow on an engine whose own counters moved (busy, not wedged)",
            registry=r,
        )

        self.stability_findings = Gauge(
            "sparkpair_stability_findings",
            "findings of the latest stability look",
            ["node", "severity"],
            registry=r,
        )
        self.container_restarts = Gauge(
            "sparkpair_container_restart_count",
            "Docker RestartCount of each serving container",
            ["node", "container"],
            registry=r,
        )
        self.container_oom_killed = Gauge(
            "sparkpair_container_oom_killed",
            "1 when Docker says the container was OOM-killed",
            ["node", "container"],
            registry=r,
        )

        self.peer_down = Gauge(
            "sparkpair_peer_down",
            "1 for each peer the gateway names down, labelled with how (peers.PEER_STATES)",
            ["peer", "state"],
            registry=r,
        )

        self.recovery_restarts = Counter(
            "sparkpair_recovery_restarts", "pair restarts done by the wedge recovery", registry=r
        )
        self.recovery_exhausted = Gauge(
            "sparkpair_recovery_exhausted",
            "1 once the wedge recovery spent its restarts in the window and stopped",
            registry=r,
        )

    def _label(self, value: Any) -> str:
        return str(redact(str(value), self.key))

    def record_stability(self, rep: Any) -> None:
        self.stability_findings.clear()
        counts: dict[tuple[str, str], int] = {}
        for f in rep.findings:
            counts[(f.node, f.severity)] = counts.get((f.node, f.severity), 0) + 1
        for (node, sev), n in counts.items():
            self.stability_findings.labels(self._label(node), sev).set(n)
        for c in rep.containers:
            node, name = self._label(c.node), self._label(c.name)
            self.container_restarts.labels(node, name).set(c.restart_count)
            self.container_oom_killed.labels(node, name).set(1.0 if c.oom_killed else 0.0)

    def record_peer(self, peer: Any) -> None:
        """``sparkpair_peer_down``: the peer named down (a
        :class:`~sparkpair_health.peers.PeerDown`), or none."""
        self.peer_down.clear()
        if peer is not None:
            self.peer_down.labels(self._label(peer.name), peer.state).set(1.0)

    def record_report(self, checks: list[dict[str, Any]], passed: bool, duration_s: float) -> None:
        self.check_status.clear()
        self.check_duration.clear()
        for c in checks:
            cid = self._label(c["id"])
            for st in self.STATUSES:
                self.check_status.labels(cid, st).set(1.0 if c["status"] == st else 0.0)
            self.check_duration.labels(cid).set(float(c.get("latency_ms", 0.0)) / 1000.0)
            if c["id"] == "spec_acceptance":
                rate = (c.get("evidence") or {}).get("acceptance_rate")
                self.spec_acceptance.set(float("nan") if rate is None else float(rate))
        self.suite_passed.set(1.0 if passed else 0.0)
        self.suite_duration.set(duration_s)
