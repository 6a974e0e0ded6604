"""One finding of the upgrade lane (:class:`ReportLine`) and its bad-input error (:class:`LaneError`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportLine:
    """One line of the lane's report: ``[status] section: text``."""

    section: str
    status: str
    text: str

    def __str__(self) -> str:
        return f"[{self.status}] {self.section}: {self.text}"


class LaneError(RuntimeError):
    """Bad input: the message names the value seen and the value wanted."""
