"""Shared pieces of the sparkpair Triton kernels: the config record and the Triton guard.

This package runs inside vLLM: it imports only ``torch`` and ``triton``, and importing it
never touches a GPU, so it imports on a CPU-only machine. When Triton is absent
(``HAS_TRITON`` is False) the kernels' launchers raise ``RuntimeError`` when called.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

try:  # Triton is optional at import time (slim CPU installs have none).
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only without Triton
    triton = None  # type: ignore[assignment]
    tl = None  # type: ignore[assignment]
    HAS_TRITON = False

#: GB10 (sm_121) shared memory per block, in bytes: 99 KiB (DGX Spark / GB10 spec;
#: ``cudaDevAttrMaxSharedMemoryPerBlockOptin`` = 101376 on sm_120/sm_121).
GB10_SHARED_MEMORY_BYTES = 101_376


@dataclass(frozen=True)
class KernelConfig:
    """One compiled variant of a kernel: its tile sizes and launch options.

    ``name`` is unique within a kernel family; ``kernel`` names the ``@triton.jit`` function
    it launches (a family can hold variants of several jitted functions); ``meta`` holds the
    ``tl.constexpr`` tile parameters; ``num_warps`` / ``num_stages`` are Triton launch options.
    """

    name: str
    kernel: str
    meta: tuple[tuple[str, Any], ...]
    num_warps: int = 4
    num_stages: int = 3

    def constexprs(self) -> dict[str, Any]:
        """The ``tl.constexpr`` keyword arguments of this config."""
        return dict(self.meta)

    def __getitem__(self, key: str) -> Any:
        return dict(self.meta)[key]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for reports and benchmark rows)."""
        d = asdict(self)
        d["meta"] = dict(self.meta)
        return d


def make_config(name: str, kernel: str, num_warps: int, num_stages: int, **meta: Any) -> KernelConfig:
    """Build a :class:`KernelConfig` from keyword tile parameters."""
    return KernelConfig(
        name=name, kernel=kernel, meta=tuple(sorted(meta.items())), num_warps=num_warps, num_stages=num_stages
    )


def require_triton() -> None:
    """Raise ``RuntimeError`` when Triton is not importable."""
    if not HAS_TRITON:
        raise RuntimeError(
            "sparkpair kernels need Triton (pip install triton==3.6.0); it is not importable here"
        )


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints."""
    return -(-a // b)
