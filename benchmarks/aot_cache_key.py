"""Print what goes into Triton's cache key for one router config on sm_90a (to compare the AOT
build machine with the GPU machine when the shipped cache misses)."""

from __future__ import annotations

import json
import os

import triton
from sparkpair_overlay.kernels import aot
from triton._C.libtriton import get_cache_invalidating_env_vars
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend

backend = make_backend(GPUTarget("cuda", 90, 32))
v = aot.router_variants()[0]
info = {
    "triton": triton.__version__,
    "backend_hash": backend.hash(),
    "env_vars": get_cache_invalidating_env_vars(),
    "fn_cache_key": v.fn.cache_key,
    "TRITON_PTXAS_PATH": os.environ.get("TRITON_PTXAS_PATH"),
    "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR"),
}
print(json.dumps(info, indent=1, default=str))
