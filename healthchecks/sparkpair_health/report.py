"""Results of the health suite: one :class:`CheckResult` per check, one :class:`Report` per run.

The report is the stable, serialisable product of :func:`sparkpair_health.suite.run_suite`;
the demo, the CLI and the gateway read it. JSON (``Report.to_json``) is the full record;
JUnit XML (``Report.to_junit_xml``) is for CI dashboards.

Statuses:
    ``pass``  the server did what the check demands;
    ``fail``  the server did something wrong (the verdict is about the server/model);
    ``skip``  the check does not apply (the reason is stated, e.g. by the profile);
    ``error`` the suite could not judge: connection refused, a timeout, the server or the
              engine went away. Counts against the verdict, but is reported as what it is.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Status = Literal["pass", "fail", "skip", "error"]


class ReportWriteError(OSError):
    """A report file could not be written; the message names the path and the reason."""


class CheckResult(BaseModel):
    """The outcome of one check.

    Attributes:
        id: stable check id (e.g. ``stream``), used in JSON and JUnit.
        title: one line saying what the check demands.
        status: ``pass`` / ``fail`` / ``skip`` / ``error`` (see the module docstring).
        message: why, in one or two sentences (what was seen, what was wanted).
        evidence: request/response facts behind the verdict (JSON-serialisable).
        latency_ms: wall time of the check, milliseconds.
        catches: field-bug ids or behaviours this check exists to catch.
    """

    id: str
    title: str
    status: Status
    message: str = ""
    evidence: dict[str, Any] = Field(default_factory=dict)
    latency_ms: float = 0.0
    catches: str = ""


class ReadyInfo(BaseModel):
    """How the readiness gate ended.

    Attributes:
        ready: ``True`` once a real completion decoded.
        stage: the last stage reached: ``health``, ``models``, ``decode`` or ``ready``.
        waited_s: seconds spent in the gate.
        detail: what the last probe saw.
    """

    ready: bool
    stage: str
    waited_s: float
    detail: str = ""


class Report(BaseModel):
    """One run of the health suite against one server.

    ``passed`` is true only when the server was ready, no check failed or errored and the
    run was not aborted; skips do not count against it.
    """

    base_url: str
    served_model_name: str
    profile: str
    started_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    duration_s: float = 0.0
    ready: ReadyInfo | None = None
    checks: list[CheckResult] = Field(default_factory=list)
    aborted: str | None = Field(
        default=None, description="why the run stopped early (engine died, server went away), else null"
    )
    server_version: str | None = None
    overlay_plan: Any | None = Field(
        default=None, description="the overlay plugin's kernel plan JSON, when given"
    )
    overlay_plan_note: str = ""

    @property
    def passed(self) -> bool:
        """True when ready, not aborted, and every check passed or was skipped."""
        return (
            self.ready is not None
            and self.ready.ready
            and self.aborted is None
            and all(c.status in ("pass", "skip") for c in self.checks)
        )

    def counts(self) -> dict[str, int]:
        """Number of checks per status."""
        out = {"pass": 0, "fail": 0, "skip": 0, "error": 0}
        for c in self.checks:
            out[c.status] += 1
        return out

    def check(self, check_id: str) -> CheckResult:
        """The result with id ``check_id``.

        Raises:
            KeyError: no check with that id ran.
        """
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(f"no check {check_id!r} in the report; checks: {[c.id for c in self.checks]}")

    def to_json(self) -> str:
        """The whole report as indented JSON (``passed`` and ``counts`` included)."""
        d = self.model_dump(mode="json")
        d["passed"] = self.passed
        d["counts"] = self.counts()
        return json.dumps(d, indent=2, default=str)

    def to_junit_xml(self) -> str:
        """The report as JUnit XML: one ``testsuite`` (the profile), one ``testcase`` per check.

        ``fail`` maps to ``<failure>``, ``error`` to ``<error>``, ``skip`` to ``<skipped>``; an
        aborted run or a server that never became ready adds a ``readiness`` error case.
        """
        c = self.counts()
        suite = ET.Element(
            "testsuite",
            name=f"sparkpair-health.{self.profile}",
            tests=str(len(self.checks) + 1),
            failures=str(c["fail"]),
            errors=str(c["error"] + (0 if self.ready and self.ready.ready and not self.aborted else 1)),
            skipped=str(c["skip"]),
            time=f"{self.duration_s:.3f}",
            timestamp=self.started_at,
        )
        props = ET.SubElement(suite, "properties")
        for k, v in (
            ("base_url", self.base_url),
            ("served_model_name", self.served_model_name),
            ("server_version", self.server_version or ""),
        ):
            ET.SubElement(props, "property", name=k, value=v)
        rc = ET.SubElement(
            suite,
            "testcase",
            classname="sparkpair_health",
            name="readiness",
            time=f"{self.ready.waited_s:.3f}" if self.ready else "0",
        )
        if self.ready is None or not self.ready.ready:
            ET.SubElement(
                rc, "error", message=f"not ready: {self.ready.detail if self.ready else 'gate not run'}"
            )
        if self.aborted:
            ET.SubElement(rc, "error", message=f"aborted: {self.aborted}")
        for r in self.checks:
            tc = ET.SubElement(
                suite, "testcase", classname="sparkpair_health", name=r.id, time=f"{r.latency_ms / 1000:.3f}"
            )
            if r.status == "fail":
                el = ET.SubElement(tc, "failure", message=r.message)
                el.text = json.dumps(r.evidence, indent=1, default=str)[:20000]
            elif r.status == "error":
                el = ET.SubElement(tc, "error", message=r.message)
                el.text = json.dumps(r.evidence, indent=1, default=str)[:20000]
            elif r.status == "skip":
                ET.SubElement(tc, "skipped", message=r.message)
        ET.indent(suite)
        return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"

    def write(self, json_path: Path | None = None, junit_path: Path | None = None) -> None:
        """Write the JSON report and/or the JUnit XML (parent folders are created).

        Both are attempted even when the first fails.

        Raises:
            ReportWriteError: a file could not be written; the message names each path and why.
        """
        problems = []
        for label, path, text in (
            ("JSON report", json_path, self.to_json),
            ("JUnit XML", junit_path, self.to_junit_xml),
        ):
            if path is not None:
                p = Path(path)
                try:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_text(text())
                except OSError as e:
                    problems.append(f"cannot write the {label} to {p}: {e.strerror or e}")
        if problems:
            raise ReportWriteError("; ".join(problems))
