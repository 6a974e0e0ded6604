"""What a report is made of: its sections (:data:`SECTIONS`, each a :class:`Section`), the options
it is asked with (:class:`Options`) and what one node gave (:class:`NodeFacts`).

:mod:`.collect` reads the nodes into :class:`NodeFacts`; :mod:`.node_sections` and
:mod:`.api_sections` build the sections; :mod:`.gather` assembles and redacts the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

SectionState = Literal["filled", "partial", "empty"]

SECTIONS: tuple[tuple[str, str], ...] = (
    ("summary", "Summary"),
    ("image", "Image and versions"),
    ("env", "Node environment (redacted)"),
    ("preflight", "Preflight and --compare"),
    ("nccl", "NCCL all-reduce"),
    ("kernels", "Kernels: probe and plan"),
    ("health", "Health verdict"),
    ("stability", "Stability and log findings"),
    ("gpu", "GPU clocks, power and throttling"),
    ("accuracy", "Accuracy set (greedy)"),
    ("bench", "Benchmark"),
    ("compare", "Earlier reports"),
)
"""Every section of a report, in page order: ``(id, title)``. A report always has all of them."""

REPORT_SCHEMA = "sparkpair-report/1"

SECRET_NAME = re.compile(
    r"^(?!.*_(?:FILE|PATH|DIR)$)(?!.*(?:DISABLE|ENABLE))"
    r".*(?:^|_)(?:API)?(?:KEYS?|TOKENS?|SECRETS?|PASSWORD|PASSWD|PASS|AUTH|AUTHORIZATION|CREDENTIALS?)(?:_|$)",
    re.IGNORECASE,
)
"""Environment names whose values are secrets: shown as set/unset, and removed wherever they appear.
Any name with a part KEY, TOKEN, SECRET, PASSWORD, PASSWD, PASS, AUTH or CREDENTIAL (``HF_TOKEN``,
``SPARKPAIR_SYNC_TOKEN``, ``AWS_SECRET_ACCESS_KEY``, ``OPENAI_APIKEY``, ``MY_AUTH_HEADER``), except
names of a file, path or folder (``SPARKPAIR_API_KEY_FILE``: its value is where the secret is) and
switches (``HF_HUB_DISABLE_IMPLICIT_TOKEN=1``)."""

NO_CUDA = "no CUDA device"
"""How every GPU-only part of a report names its absence (the CPU simulation has none)."""


@dataclass
class Section:
    """One section of the report.

    Attributes:
        id: from :data:`SECTIONS`.
        title: its heading.
        state: ``filled`` / ``partial`` / ``empty``.
        why: what could not be filled, one reason each (empty when filled).
        data: the section's facts (JSON-serialisable).
    """

    id: str
    title: str
    state: SectionState = "filled"
    why: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def missing(self, reason: str, *, all_of_it: bool = False) -> None:
        """Record ``reason``; the section becomes ``partial`` (``empty`` with ``all_of_it``)."""
        self.why.append(reason)
        self.state = "empty" if all_of_it or self.state == "empty" else "partial"


@dataclass
class Options:
    """What the report asks for (the ``sparkpair report`` options; see its ``--help``)."""

    base_url: str | None = "http://127.0.0.1:8000"
    gateway: str | None = None
    profile: str | None = None
    api_key: SecretStr | None = None
    private_hosts: tuple[str, ...] = ()
    run_root: str = ""
    node_timeout_s: float = 120.0
    request_timeout_s: float = 60.0
    window_s: float = 30.0
    accuracy: bool = True
    accuracy_max_tokens: int = 32
    bench: bool = False
    bench_workload: str = "standard"
    bench_timeout_s: float = 3600.0
    bench_dir: Path | None = None
    nccl_log: Path | None = None
    compare: tuple[Path, ...] = ()
    extra_tokens: tuple[tuple[str, SecretStr], ...] = ()
    """Other secrets to remove, each with where it comes from (``SPARKPAIR_SYNC_TOKEN (env)``)."""
    time_limit_s: float = 600.0


@dataclass
class NodeFacts:
    """What one node gave (each key ``None`` where it could not), and why not (``why``)."""

    name: str
    where: str
    inspect: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    kernel: str | None = None
    gpu: list[dict[str, Any]] = field(default_factory=list)
    gpu_why: str | None = None
    preflight: dict[str, Any] | None = None
    probe: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    plan_lines: list[str] = field(default_factory=list)
    log: str | None = None
    nccl_log: str | None = None
    why: dict[str, str] = field(default_factory=dict)
    timed_out: str | None = None
