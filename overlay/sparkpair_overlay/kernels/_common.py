"""Shared pieces of the sparkpair Triton kernels: the config record and the Triton guard.

This package runs inside vLLM: it imports only ``torch`` and ``triton``, and importing it
never touches a GPU, so it imports on a CPU-only machine. When Triton is absent
(``HAS_TRITON`` is False) the kernels' launchers raise ``RuntimeError`` when called.
"""

from __future__ import annotations

import importlib.metadata
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
    "GB10_SHARED_MEMORY_BYTES",
    "HAS_TRITON",
    "SEMAPHORES",
    "KernelConfig",
    "SemaphorePool",
    "cdiv",
    "make_config",
    "require_triton",
    "tl",
    "triton",
    "triton_problem",
    "triton_requirement",
]

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


def triton_requirement() -> str | None:
    """The Triton requirement of sparkpair's ``kernels`` extra (``"triton==X.Y.Z"``), read from the
    installed distribution's metadata: pyproject.toml's extra, the one place the project names
    the Triton its kernels are built and tested with (the image's: the one its torch requires).
    ``None`` when sparkpair is not installed as a distribution or names no Triton there."""
    try:
        reqs = importlib.metadata.requires("sparkpair") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for req in reqs:
        spec, _, marker = req.partition(";")
        if spec.replace(" ", "").startswith("triton") and "kernels" in marker:
            return spec.replace(" ", "")
    return None


def triton_problem(version: str | None = None) -> str:
    """Why the Triton ``version`` (default: the importable one) is not the release series the
    kernels are built and tested with (:func:`triton_requirement`: same major.minor; the image's
    base may carry a later patch release of it), or ``""``. The kernels' instructions differ by
    Triton version (Triton 3.6 upcasts fp8 MMAs for sm_121; 3.8 emits native ones:
    docs/reference/triton-gb10.md)."""
    want = triton_requirement()
    if version is None:
        if not HAS_TRITON:
            return f"Triton is not importable here; wanted {want or 'Triton'}"
        version = str(triton.__version__)
    if want is None or "==" not in want:
        return ""  # not installed as a distribution (a source tree on sys.path): nothing to compare
    pin = want.split("==", 1)[1]
    if version.split(".")[:2] != pin.split(".")[:2]:
        return (
            f"Triton {version} is installed; sparkpair's kernels are built and tested with {want} "
            f"(its {'.'.join(pin.split('.')[:2])} series, the image's Triton)"
        )
    return ""


def require_triton() -> None:
    """Raise ``RuntimeError`` when Triton is not importable."""
    if not HAS_TRITON:
        raise RuntimeError(
            f"sparkpair kernels need Triton (pip install '{triton_requirement() or 'triton'}'); it is not "
            "importable here"
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
