"""sparkpair's own Triton kernels (imports only torch and triton; safe on a CPU-only machine).

* :mod:`.router_gemm` — MoE router GEMM, ``torch.ops.sparkpair.router_gemm``.
* :mod:`.fp8_einsum` — block-scaled ``bhr,hdr->bhd`` for DeepSeek-V4's o_proj,
  ``torch.ops.sparkpair.fp8_einsum`` (the launcher); the kernels compute capability family 120
  runs, one file per path, in :mod:`.fp8_einsum_sm120`; their configs in
  :mod:`.fp8_einsum_configs`; the config per token count in :mod:`.fp8_einsum_plan`.
* :mod:`.aot` — ahead-of-time compilation of every config for a GPU target (no GPU needed).

Submodules are imported on first attribute access, so ``import sparkpair_overlay.kernels`` is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

KERNEL_MODULES = ("router_gemm", "fp8_einsum")

__all__ = ["KERNEL_MODULES", "router_gemm", "fp8_einsum", "aot"]


def __getattr__(name: str) -> Any:
    if name in ("router_gemm", "fp8_einsum", "aot"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
