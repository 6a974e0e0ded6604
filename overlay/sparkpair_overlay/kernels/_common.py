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
    triton = None
    tl = None
    HAS_TRITON = False

__all__ = [
    "GB10_SHARED_MEMORY_BYTES", "SM90_SHARED_MEMORY_BYTES", "HAS_TRITON", "SEMAPHORES", "KernelConfig",
    "SemaphorePool", "cdiv", "make_config", "require_triton", "tl", "triton",
]

#: GB10 (sm_121) shared memory per block, in bytes: 99 KiB (DGX Spark / GB10 spec;
#: ``cudaDevAttrMaxSharedMemoryPerBlockOptin`` = 101376 on sm_120/sm_121).
GB10_SHARED_MEMORY_BYTES = 101_376
#: Compute capability 9.0 (H100 / H200) shared memory per block with the opt-in, in bytes: 227 KiB
#: (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability":
#: https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications).
SM90_SHARED_MEMORY_BYTES = 232_448


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


class SemaphorePool:
    """Zeroed int32 tile counters for the single-launch split-K "last CTA reduces" pattern.

    A split-K kernel writes its fp32 partial to a workspace, then bumps its output tile's counter
    (one ``atomic_add`` with acq_rel semantics); the CTA that sees ``SPLIT - 1`` sums the partials
    in split order 0, 1, ... (fixed order: bitwise deterministic, whichever CTA arrives last) and
    resets the counter to 0, so the buffer is zero again when the kernel ends.

    One arena per device, allocated and zeroed on the first call made outside CUDA-graph capture;
    each CUDA stream gets its own slot, so kernels on concurrent streams never share counters.
    Streams are assigned slots in Python (no allocation), which works during capture too.
    ``get`` returns ``None`` (the caller falls back to a two-launch reduction) when the arena does
    not exist yet and we are capturing, when the slots are used up, or when more tiles are needed
    than a slot holds. Two graphs captured on one stream must not be replayed concurrently.
    """

    SLOTS = 32
    TILES_PER_SLOT = 4096

    def __init__(self) -> None:
        self._arena: dict[int, Any] = {}
        self._slot: dict[tuple[int, int], int] = {}

    def get(self, device: Any, n_tiles: int) -> Any:
        import torch

        if n_tiles > self.TILES_PER_SLOT:
            return None
        if device.type == "cpu":  # TRITON_INTERPRET=1 runs programs one by one on the CPU
            if -1 not in self._arena:
                self._arena[-1] = torch.zeros((self.TILES_PER_SLOT,), dtype=torch.int32)
            return self._arena[-1]
        if device.type != "cuda":
            return None
        idx = device.index if device.index is not None else torch.cuda.current_device()
        arena = self._arena.get(idx)
        if arena is None:
            if torch.cuda.is_current_stream_capturing():
                return None
            with torch.cuda.device(idx):
                arena = torch.zeros((self.SLOTS, self.TILES_PER_SLOT), dtype=torch.int32, device=device)
                torch.cuda.current_stream().synchronize()
            self._arena[idx] = arena
        key = (idx, torch.cuda.current_stream(idx).cuda_stream)
        slot = self._slot.get(key)
        if slot is None:
            used = sum(1 for (d, _s) in self._slot if d == idx)
            if used >= self.SLOTS:
                return None
            slot = self._slot[key] = used
        return arena[slot]


SEMAPHORES = SemaphorePool()
