"""What every preflight check shares: a result, a node's report, and the context a check writes to.

Every check returns its findings through :meth:`Ctx.add` as a :class:`Result` with
``pass``/``warn``/``fail`` and a message naming the node, the setting, the value seen and the
value wanted.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..deploy.nodeenv import NodeEnv
    from .host import Host

Status = Literal["pass", "warn", "fail"]


@dataclass(frozen=True)
class Result:
    """One check on one node."""

    id: str
    node: str
    status: Status
    setting: str
    seen: str
    wanted: str
    note: str = ""

    @property
    def message(self) -> str:
        """``node X: SETTING=seen; wanted W (note)``."""
        tail = f" ({self.note})" if self.note else ""
        return f"node {self.node}: {self.setting}={self.seen}; wanted {self.wanted}{tail}"


@dataclass
class Report:
    """All results of a preflight run, plus the facts other nodes compare against."""

    node: str
    results: list[Result] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[Result]:
        """Results with status ``fail``."""
        return [r for r in self.results if r.status == "fail"]

    def to_json(self) -> str:
        """The report as JSON (results and facts)."""
        return json.dumps(
            {"node": self.node, "results": [asdict(r) for r in self.results], "facts": self.facts}, indent=2
        )


class Ctx:
    """What a check needs: the node env, the profile, the host view and a result sink."""

    def __init__(self, env: NodeEnv, profile: Any, host: Host) -> None:
        self.env = env
        self.profile = profile
        self.host = host
        self.node = env.SPARKPAIR_NODE_NAME
        self.report = Report(self.node)

    def add(self, id: str, status: Status, setting: str, seen: object, wanted: str, note: str = "") -> None:
        if status == "fail" and id in self.env.waived:
            status = "warn"
            note = (note + "; " if note else "") + "waived by SPARKPAIR_PREFLIGHT_WAIVE"
        self.report.results.append(Result(id, self.node, status, setting, str(seen), wanted, note))
