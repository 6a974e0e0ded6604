"""Stability across both nodes: container restarts and OOM-kills, container logs and host kernel logs.

For each node (head, worker) this reads, through the Docker SDK (local engine, a
``tcp://`` URL or ``ssh://user@host``):

- every serving container's state: running or not, ``RestartCount``, ``State.OOMKilled``,
  exit code;
- its stdout/stderr (the last ``log_tail`` lines; every restart of one container shares one
  log, so a restart loop shows as repeats);

and, through an injectable command runner (local, or ``ssh user@host``), the host kernel log
(``journalctl -k``, falling back to ``dmesg``) and, at start, the previous boot's kernel
journal (``journalctl -k -b -1``): a Spark that hard-reset after ``NV_ERR_NO_MEMORY`` logs
nothing afterwards, so only the previous boot's journal tells (field-bugs B13).

All text goes through the log scanner's catalogue (:mod:`sparkpair_health.logscan`); a
``fatal-if-repeated`` pattern escalates at the catalogue's threshold, per source.

Verdict rules:

- ``fatal``: a container missing or not running; an OOM-kill; a restart since the baseline
  (the first observation, e.g. the gateway's start); a fatal log finding in a container log
  or the current boot's kernel log.
- ``warning``: restarts that predate the baseline; warning-level log findings; anything
  found in the previous boot's journal (history: reported, does not block), and an
  unclean end of the previous boot.
- ``error``: the suite could not look (Docker unreachable, ``journalctl`` and ``dmesg``
  both unusable); not a verdict about the node, but not a pass either.

Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sparkpair_serving.inputs import check_node_name

from .logscan import CATALOGUE, Pattern, ScanResult, scan_text
from .node_access import CommandRunner, docker_client, ended_cleanly, read_kernel_log, runner_for

Severity = Literal["fatal", "warning", "error"]

CONTAINER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
"""A Docker container name or id (the characters Docker allows in a name)."""


# --------------------------------------------------------------------------- settings


class StabilityNode(BaseModel):
    """One node to watch.

    Attributes:
        name: ``head`` / ``worker`` (used in every message).
        docker_url: Docker engine: ``None`` = the local one (``DOCKER_HOST`` honoured),
            ``unix://``, ``tcp://host:2376`` or ``ssh://user@host`` (uses the ``ssh`` binary).
        containers: names (or ids) of the serving containers on that node.
        kernel_log: ``local`` (this host), ``ssh://user@host``, or ``none``.
        previous_boot: also read ``journalctl -k -b -1``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    docker_url: str | None = None
    containers: list[str] = Field(default_factory=list)
    kernel_log: str = "none"
    previous_boot: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_node_name(v, "node name")

    @field_validator("docker_url")
    @classmethod
    def _docker_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(unix://|tcp://|ssh://)[^\s]+$", v):
            raise ValueError(
                f"docker_url={v!r}: wanted unix:///path/docker.sock, tcp://host:port or ssh://user@host"
            )
        return v

    @field_validator("containers")
    @classmethod
    def _containers(cls, v: list[str]) -> list[str]:
        bad = [c for c in v if not CONTAINER_NAME_RE.match(c)]
        if bad:
            raise ValueError(
                f"containers {bad!r}: wanted Docker container names or ids ({CONTAINER_NAME_RE.pattern})"
            )
        if len(set(v)) != len(v):
            raise ValueError(f"containers {v!r}: a container is named twice")
        return v

    @field_validator("kernel_log")
    @classmethod
    def _kernel_log(cls, v: str) -> str:
        runner_for(v)  # raises naming the value and the accepted forms
        return v


class StabilitySettings(BaseModel):
    """What to watch and how.

    Attributes:
        nodes: the nodes (both halves of the pair).
        log_tail: container log lines read per container.
        kernel_since: ``journalctl --since`` value for the current boot (``None``: whole boot).
        docker_timeout_s: one Docker API call, seconds.
        command_timeout_s: one kernel-log command, seconds.
    """

    model_config = ConfigDict(extra="forbid")

    nodes: list[StabilityNode] = Field(default_factory=list)
    log_tail: int = Field(default=5000, gt=0, le=1_000_000)
    kernel_since: str | None = None
    docker_timeout_s: float = Field(default=20.0, gt=0, le=600, allow_inf_nan=False)
    command_timeout_s: float = Field(default=20.0, gt=0, le=600, allow_inf_nan=False)

    @field_validator("nodes")
    @classmethod
    def _unique_names(cls, v: list[StabilityNode]) -> list[StabilityNode]:
        names = [n.name for n in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"nodes {names}: {twice} named more than once; wanted one entry per node")
        return v


# --------------------------------------------------------------------------- results


@dataclass
class ContainerHealth:
    """One container's state as Docker reports it (``docker inspect``)."""

    node: str
    name: str
    id: str = ""
    status: str = ""
    running: bool = False
    restart_count: int = 0
    oom_killed: bool = False
    exit_code: int | None = None
    error: str = ""


@dataclass
class StabilityFinding:
    """One problem, with where it was seen.

    Attributes:
        node: node name.
        source: ``container:<name>``, ``kernel``, ``kernel-previous-boot`` or ``docker``.
        severity: ``fatal`` / ``warning`` / ``error``.
        id: a catalogue pattern id, or one of ``oom_killed``, ``restarted``, ``not_running``,
            ``missing``, ``previous_boot_unclean``, ``unreachable``, ``kernel_log_unreadable``.
        message: one line naming the node, the thing, what was seen and what was wanted.
        samples: matching log lines (at most 3).
        count: matches (log findings) or restarts.
    """

    node: str
    source: str
    severity: Severity
    id: str
    message: str
    samples: list[str] = field(default_factory=list)
    count: int = 1


@dataclass
class StabilityReport:
    """The outcome of one look at every node."""

    containers: list[ContainerHealth] = field(default_factory=list)
    findings: list[StabilityFinding] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def status(self) -> Literal["pass", "fail", "error"]:
        """``fail`` if any fatal finding, else ``error`` if any could not be looked at, else ``pass``."""
        sev = {f.severity for f in self.findings}
        return "fail" if "fatal" in sev else ("error" if "error" in sev else "pass")

    def message(self) -> str:
        """One line: the first fatal (or error) finding, or what was looked at."""
        for sev in ("fatal", "error"):
            bad = [f for f in self.findings if f.severity == sev]
            if bad:
                more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
                return bad[0].message + more
        warns = sum(1 for f in self.findings if f.severity == "warning")
        return (
            f"{len(self.containers)} container(s) up, no restart or OOM-kill since the baseline, no fatal "
            f"log line in {len(self.sources)} source(s)" + (f"; {warns} warning(s)" if warns else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message(),
            "containers": [asdict(c) for c in self.containers],
            "findings": [asdict(f) for f in self.findings],
            "sources": self.sources,
            "duration_s": round(self.duration_s, 3),
        }


def _findings_from_scan(node: str, source: str, res: ScanResult, history: bool) -> list[StabilityFinding]:
    out = []
    for f in res.findings:
        sev: Severity = "warning" if history else f.severity
        escal = (
            f" ({f.count} matches >= threshold {f.pattern.threshold}: escalated)"
            if f.pattern.severity == "fatal-if-repeated" and f.severity == "fatal"
            else (f" ({f.count} matches)" if f.count > 1 else "")
        )
        when = " in the previous boot (history)" if history else ""
        out.append(
            StabilityFinding(
                node,
                source,
                sev,
                f.pattern.id,
                f"{node} {source}{when}: {f.pattern.meaning} [{f.pattern.bug}]{escal}; fix: {f.pattern.fix}",
                f.samples,
                f.count,
            )
        )
    return out


class StabilityMonitor:
    """Looks at every node; remembers the first restart counts as the baseline.

    Args:
        settings: see :class:`StabilitySettings`.
        runners: per-node kernel-log runner overrides (tests inject recorded outputs).
        clients: per-node Docker client overrides.
        catalogue: the log scanner's catalogue (default: :data:`sparkpair_health.logscan.CATALOGUE`).
    """

    def __init__(
        self,
        settings: StabilitySettings,
        runners: dict[str, CommandRunner | None] | None = None,
        clients: dict[str, Any] | None = None,
        catalogue: Sequence[Pattern] = CATALOGUE,
    ) -> None:
        self.s = settings
        self.runners = runners or {}
        self.clients = clients or {}
        self.catalogue = catalogue
        self.baseline: dict[tuple[str, str], int] | None = None
        self.previous_boot_done: set[str] = set()
        self.logs_since: int | None = None

    def new_epoch(self, at: float | None = None) -> None:
        """Start judging afresh from ``at`` (unix seconds; default now): the next look takes its
        restart counts as the new baseline and reads container logs written from ``at`` on only.

        Wedge recovery calls it once the pair it restarted serves again: the restarts it made
        (and compose's, during the same reload) and the log lines of the wedge it acted on are
        accounted for in its own events, so they must not keep the pair failing for ever.
        """
        self.baseline = None
        self.logs_since = int(time.time() if at is None else at)

    def _runner(self, node: StabilityNode) -> CommandRunner | None:
        return self.runners[node.name] if node.name in self.runners else runner_for(node.kernel_log)

    def _containers(
        self, node: StabilityNode, rep: StabilityReport, base: dict[tuple[str, str], int]
    ) -> None:
        if not node.containers:
            return
        where = node.docker_url or "the local Docker engine"
        try:
            client = self.clients.get(node.name) or docker_client(node.docker_url, self.s.docker_timeout_s)
        except Exception as e:  # noqa: BLE001 - docker raises DockerException and plain OSErrors
            rep.findings.append(
                StabilityFinding(
                    node.name,
                    "docker",
                    "error",
                    "unreachable",
                    f"{node.name}: cannot reach {where}: {type(e).__name__}: {e}",
                )
            )
            return
        import docker.errors

        for cname in node.containers:
            try:
                c = client.containers.get(cname)
            except docker.errors.NotFound:
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        f"container:{cname}",
                        "fatal",
                        "missing",
                        f"{node.name}: no container named {cname!r} on {where}; wanted it running",
                    )
                )
                continue
            except Exception as e:  # noqa: BLE001
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        "docker",
                        "error",
                        "unreachable",
                        f"{node.name}: docker inspect {cname} on {where} failed: {type(e).__name__}: {e}",
                    )
                )
                continue
            st = c.attrs.get("State", {})
            h = ContainerHealth(
                node.name,
                cname,
                c.id[:12],
                st.get("Status", ""),
                bool(st.get("Running")),
                int(c.attrs.get("RestartCount", 0)),
                bool(st.get("OOMKilled")),
                st.get("ExitCode"),
                st.get("Error", ""),
            )
            rep.containers.append(h)
            src = f"container:{cname}"
            if h.oom_killed:
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        src,
                        "fatal",
                        "oom_killed",
                        f"{node.name}: container {cname} was OOM-killed (State.OOMKilled=true, exit "
                        f"code {h.exit_code}); wanted no OOM-kill (B13/B14: memory budget)",
                    )
                )
            if not h.running:
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        src,
                        "fatal",
                        "not_running",
                        f"{node.name}: container {cname} is {h.status} (exit code {h.exit_code}"
                        f"{', ' + h.error if h.error else ''}); wanted running",
                    )
                )
            key = (node.name, cname)
            before = base.get(key)
            if before is None:
                base[key] = h.restart_count
                if h.restart_count:
                    rep.findings.append(
                        StabilityFinding(
                            node.name,
                            src,
                            "warning",
                            "restarted",
                            f"{node.name}: container {cname} had restarted {h.restart_count} time(s) "
                            "before the baseline (RestartCount)",
                            count=h.restart_count,
                        )
                    )
            elif h.restart_count > before:
                n = h.restart_count - before
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        src,
                        "fatal",
                        "restarted",
                        f"{node.name}: container {cname} restarted {n} time(s) since the baseline "
                        f"(RestartCount {before} -> {h.restart_count}); wanted 0",
                        count=n,
                    )
                )
            try:
                since = {} if self.logs_since is None else {"since": self.logs_since}
                logs = c.logs(stdout=True, stderr=True, tail=self.s.log_tail, **since).decode(
                    "utf-8", "replace"
                )
            except Exception as e:  # noqa: BLE001
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        src,
                        "error",
                        "logs_unreadable",
                        f"{node.name}: docker logs {cname} failed: {type(e).__name__}: {e}",
                    )
                )
                continue
            rep.sources.append(f"{node.name}:{src}")
            rep.findings += _findings_from_scan(
                node.name, src, scan_text(logs, self.catalogue), history=False
            )

    def _kernel(self, node: StabilityNode, rep: StabilityReport) -> None:
        runner = self._runner(node)
        if runner is None:
            return
        text, how = read_kernel_log(runner, False, self.s.kernel_since, self.s.command_timeout_s)
        if text is None:
            rep.findings.append(
                StabilityFinding(
                    node.name,
                    "kernel",
                    "error",
                    "kernel_log_unreadable",
                    f"{node.name}: host kernel log unreadable ({how}); wanted journalctl -k or dmesg "
                    "(the container needs the host journal mounted, or CAP_SYSLOG for dmesg)",
                )
            )
        else:
            rep.sources.append(f"{node.name}:kernel ({how})")
            rep.findings += _findings_from_scan(
                node.name, "kernel", scan_text(text, self.catalogue), history=False
            )
        if node.previous_boot and node.name not in self.previous_boot_done:
            self.previous_boot_done.add(node.name)
            prev, how = read_kernel_log(runner, True, None, self.s.command_timeout_s)
            if prev is None or not prev.strip():
                rep.sources.append(f"{node.name}:kernel-previous-boot (none: {how or 'empty'})")
                return
            rep.sources.append(f"{node.name}:kernel-previous-boot ({how})")
            rep.findings += _findings_from_scan(
                node.name, "kernel-previous-boot", scan_text(prev, self.catalogue), history=True
            )
            if not ended_cleanly(prev):
                last = prev.strip().splitlines()[-1][:200]
                rep.findings.append(
                    StabilityFinding(
                        node.name,
                        "kernel-previous-boot",
                        "warning",
                        "previous_boot_unclean",
                        f"{node.name}: the previous boot's kernel journal ends without a shutdown or "
                        f"reboot line (last: {last!r}): an unclean reset, e.g. after NV_ERR_NO_MEMORY "
                        "(B13)",
                        [last],
                    )
                )

    def check(self) -> StabilityReport:
        """Look at every node once (containers, their logs, kernel logs); never raises."""
        t0 = time.monotonic()
        rep = StabilityReport()
        base = self.baseline if self.baseline is not None else {}
        for node in self.s.nodes:
            self._containers(node, rep, base)
            self._kernel(node, rep)
        self.baseline = base
        order = {"fatal": 0, "error": 1, "warning": 2}
        rep.findings.sort(key=lambda f: order[f.severity])
        rep.duration_s = time.monotonic() - t0
        return rep


def stability_check_spec(monitor: StabilityMonitor, timeout_s: float = 120.0) -> Any:
    """The monitor as a health-suite ``CheckSpec`` (id ``stability``) for ``run_suite(checks=...)``."""
    from .checks import CheckSpec, Fail, Passed
    from .client import SuiteError

    def fn(ctx: Any, deadline: Any) -> Any:
        rep = monitor.check()
        if rep.status == "fail":
            raise Fail(rep.message(), rep.to_dict())
        if rep.status == "error":
            raise SuiteError(rep.message())
        return Passed(rep.message(), rep.to_dict())

    return CheckSpec(
        "stability",
        "both nodes: containers up, no restart/OOM-kill, no fatal line in container or kernel logs",
        "B08, B13, B14 (restart loop), B17, B18",
        fn,
        timeout_s,
    )
