"""Benchmark workloads: a YAML file in ``configs/bench/`` describing a grid of cells.

A cell is one (context length, output length, concurrency, thinking mode) point. Every
cell sends ``concurrency * requests_per_user`` measured requests with at most
``concurrency`` in flight, after ``warmup_requests`` warm-up requests that are recorded
but excluded from every summary. Prompts are vLLM's ``random`` dataset, reproducible from
a seed derived from the workload's ``seed`` and the cell id, each prefixed with a unique
tag (:func:`sparkpair_cli.bench.runner.prompt_tag`), so no two requests share a prompt
prefix (a shared prefix would hit the server's prefix cache and fake a fast TTFT).

Errors are :class:`WorkloadError` naming the file, the setting, the value seen and the
value wanted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sparkpair_serving.inputs import load_yaml
from sparkpair_serving.profile import CONFIGS_DIR

WORKLOADS_DIR = CONFIGS_DIR / "bench"
"""``configs/bench`` of a source checkout or of the installed copy (:data:`CONFIGS_DIR`)."""

QUICK_WORKLOAD = "quick"
"""The preset ``--quick`` loads: fits the tiny CPU demo server (max_model_len 2048)."""

CHAT_TEMPLATE_ALLOWANCE_TOKENS = 64
"""Tokens reserved for the chat template around the random prompt when a cell is checked
against the server's ``max_model_len`` (the tiny model's template adds 5; DeepSeek-V4's
encoder adds fewer than 20)."""


class WorkloadError(ValueError):
    """A workload file is missing, is not valid YAML, or does not match the schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _unique_positive(name: str, values: list[int]) -> list[int]:
    if len(set(values)) != len(values):
        dup = sorted({v for v in values if values.count(v) > 1})
        raise ValueError(f"{name} lists {dup} more than once; want each value once")
    return sorted(values)


def _mode_name(x: Any) -> Any:
    """YAML 1.1 reads unquoted ``off``/``on`` as booleans; map them back to the mode names."""
    if x is True:
        return "on"
    if x is False:
        return "off"
    return x


class Grid(_Strict):
    """The cross product of these lists is the set of cells."""

    context_tokens: list[int] = Field(
        min_length=1, description="prompt length in tokens (vLLM random dataset --random-input-len)"
    )
    output_tokens: list[int] = Field(
        min_length=1, description="generated tokens per request (ignore_eos, so exact)"
    )
    concurrency: list[int] = Field(min_length=1, description="users: requests in flight at once")
    thinking: list[str] = Field(default_factory=lambda: ["off"], min_length=1)

    @field_validator("thinking", mode="before")
    @classmethod
    def _yaml_bools(cls, v: Any) -> Any:
        return [_mode_name(x) for x in v] if isinstance(v, list) else v

    @field_validator("context_tokens", "output_tokens", "concurrency")
    @classmethod
    def _check_ints(cls, v: list[int], info: Any) -> list[int]:
        limits = {"context_tokens": (1, 2_097_152), "output_tokens": (1, 131_072), "concurrency": (1, 512)}
        lo, hi = limits[info.field_name]
        bad = [x for x in v if not lo <= x <= hi]
        if bad:
            raise ValueError(f"values {bad} are outside [{lo}, {hi}]")
        return _unique_positive(info.field_name, v)


class ThinkingMode(_Strict):
    """How one thinking mode is requested: ``chat_template_kwargs`` sent with every request.

    DeepSeek-V4 reads ``thinking`` (and ``reasoning_effort``); Qwen-style templates read
    ``enable_thinking`` (docs/reference/spark-deployments.md#deepseek-v4-flash-model-facts).
    """

    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)


class Sampling(_Strict):
    """Sampling parameters sent with every request; ``None`` leaves the server's default."""

    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)


class Workload(_Strict):
    """One benchmark workload (see ``docs/bench.md``)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    seed: int = Field(0, ge=0, le=2**31 - 1)
    requests_per_user: int = Field(
        2, ge=1, le=1000, description="measured requests per cell = this x concurrency"
    )
    warmup_requests: int = Field(1, ge=0, le=100, description="per cell, excluded from summaries")
    metrics_interval_s: float = Field(1.0, ge=0.2, le=60.0, description="seconds between /metrics samples")
    thinking_modes: dict[str, ThinkingMode] = Field(default_factory=lambda: {"off": ThinkingMode()})
    sampling: Sampling = Field(default_factory=Sampling)
    grid: Grid

    @field_validator("thinking_modes", mode="before")
    @classmethod
    def _yaml_bool_keys(cls, v: Any) -> Any:
        return {_mode_name(k): x for k, x in v.items()} if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _thinking_known(self) -> Workload:
        unknown = [t for t in self.grid.thinking if t not in self.thinking_modes]
        if unknown:
            raise ValueError(
                f"grid.thinking names {unknown}, which are not keys of thinking_modes "
                f"(known: {sorted(self.thinking_modes)}); add them to thinking_modes or drop them"
            )
        return self

    def cells(self) -> list[Cell]:
        """The grid's cells in run order: thinking, context, output, then concurrency ascending."""
        out = []
        for thinking in self.grid.thinking:
            for ctx in self.grid.context_tokens:
                for olen in self.grid.output_tokens:
                    for conc in self.grid.concurrency:
                        out.append(
                            Cell(
                                context_tokens=ctx,
                                output_tokens=olen,
                                concurrency=conc,
                                thinking=thinking,
                                num_requests=conc * self.requests_per_user,
                                warmup_requests=self.warmup_requests,
                                workload_seed=self.seed,
                            )
                        )
        return out


class Cell(_Strict):
    """One point of the grid."""

    context_tokens: int
    output_tokens: int
    concurrency: int
    thinking: str
    num_requests: int
    warmup_requests: int
    workload_seed: int

    @property
    def id(self) -> str:
        """Stable id, e.g. ``ctx1024-out256-c4-off``; ``compare`` matches cells by it."""
        return f"ctx{self.context_tokens}-out{self.output_tokens}-c{self.concurrency}-{self.thinking}"

    def seed(self, phase: str) -> int:
        """Seed of vLLM's random dataset for ``phase`` (``"measured"`` or ``"warmup"``).

        Derived from (workload seed, cell id, phase) with SHA-256, so it is reproducible and
        no two cells or phases share prompts. Range [0, 2**31).
        """
        digest = hashlib.sha256(f"{self.workload_seed}:{self.id}:{phase}".encode()).digest()
        return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF

    def check_fits(self, max_model_len: int) -> None:
        """Raise :class:`WorkloadError` when the cell cannot fit the server's context.

        Needs ``context_tokens + output_tokens + CHAT_TEMPLATE_ALLOWANCE_TOKENS <= max_model_len``.
        """
        need = self.context_tokens + self.output_tokens + CHAT_TEMPLATE_ALLOWANCE_TOKENS
        if need > max_model_len:
            raise WorkloadError(
                f"cell {self.id}: context_tokens {self.context_tokens} + output_tokens "
                f"{self.output_tokens} + {CHAT_TEMPLATE_ALLOWANCE_TOKENS} for the chat template = "
                f"{need} tokens, but the server's max_model_len is {max_model_len} (from /v1/models); "
                f"want <= {max_model_len}: lower grid.context_tokens/output_tokens, or serve with "
                f"--max-model-len >= {need}"
            )


def _format_errors(e: ValidationError) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg} (seen {err.get('input')!r})")
    return "; ".join(parts)


def parse_workload(data: Any, source: str = "<data>") -> Workload:
    """Validate a workload mapping.

    Raises:
        WorkloadError: naming ``source``, each bad setting, the value seen and what is wanted.
    """
    if not isinstance(data, dict):
        raise WorkloadError(f"workload {source}: top level is {type(data).__name__}; want a mapping")
    try:
        return Workload.model_validate(data)
    except ValidationError as e:
        raise WorkloadError(f"workload {source}: {_format_errors(e)}") from None


def known_workloads() -> list[str]:
    """Names of the workloads in ``configs/bench/``."""
    return sorted(p.stem for p in WORKLOADS_DIR.glob("*.yaml")) if WORKLOADS_DIR.is_dir() else []


def load_workload(name_or_path: str | Path) -> Workload:
    """Load a workload by name (``configs/bench/<name>.yaml``) or by path.

    Raises:
        WorkloadError: no such file, YAML that does not parse, or a schema mismatch.
    """
    p = Path(name_or_path)
    if not p.suffix:
        p = WORKLOADS_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        raise WorkloadError(
            f"workload {name_or_path!r}: no file {p}; known workloads: {', '.join(known_workloads())}"
        )
    try:
        data = load_yaml(p.read_text())
    except yaml.YAMLError as e:
        raise WorkloadError(f"workload {p}: not valid YAML: {e}") from None
    except UnicodeDecodeError as e:
        raise WorkloadError(
            f"workload {p}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
            "wanted a workload YAML file"
        ) from None
    return parse_workload(data, str(p))
