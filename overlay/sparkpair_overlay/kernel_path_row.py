"""One row of the probe's ``kernel_paths`` table: one compiled config of one of the overlay's kernels,
timed on the served operands. Its own module so that the plan that reads the rows
(:mod:`sparkpair_overlay.o_proj_configs`) and the probe file's parser
(:mod:`sparkpair_overlay.probe_results`) both import it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .jsonio import Fields

__all__ = ["KernelPathRow"]


@dataclass(frozen=True)
class KernelPathRow:
    """One timing of one compiled config of one of the overlay's kernels, on the served operands.

    Attributes:
        kernel: ``fp8_einsum`` (the o_proj kernel; :mod:`sparkpair_overlay.probe.kernel_paths` writes them).
        path: the kernel's own path name (``sparkpair_overlay.kernels.fp8_einsum.kernel_path``: ``decode``,
            ``tile``, ``tile-split``, ``mx-decode``, ``mx-tile``, ``mx-tile-acc``).
        config: the config name it ran.
        tokens: the token count timed; t_min, t_max: the token counts at which the probe rates this
            config as a candidate of the plan (``t_max`` 2**62 for no end).
        layout: the operand layout it was timed on, ``"<weight layout>/<activation layout>"``
            (:func:`sparkpair_overlay.o_proj_configs.layout_key`); the plan counts only rows on the
            served one.
        ok: correct vs fp64; us: median µs (CUDA-graph replay); err: the error metric.
        triton: the Triton version that compiled it; instructions: the instruction forms found in its
            compiled code (for example ``mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32``).
    """

    kernel: str
    path: str
    config: str
    tokens: int
    t_min: int
    t_max: int
    layout: str
    ok: bool
    us: float | None = None
    err: float | None = None
    triton: str | None = None
    instructions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "path": self.path, "config": self.config, "tokens": self.tokens,
                "t_range": [self.t_min, self.t_max], "layout": self.layout, "ok": self.ok, "us": self.us,
                "err": self.err, "triton": self.triton, "instructions": list(self.instructions)}

    @classmethod
    def from_json(cls, f: Fields) -> KernelPathRow:
        rng = f.ints("t_range", 2)
        if rng is None or not 1 <= rng[0] <= rng[1]:
            raise f.fail("t_range", rng, "[lo, hi] token counts with 1 <= lo <= hi")
        return cls(f.value("kernel", str), f.value("path", str), f.value("config", str),
                   f.value("tokens", int), rng[0], rng[1], f.value("layout", str), f.value("ok", bool),
                   f.optional("us", float), f.optional("err", float), f.optional("triton", str),
                   f.strings("instructions"))
