"""Load a few vLLM 0.32.0 source files verbatim, without vLLM installed (shared by the GPU tests).

Why: the GPU machine has torch and triton but no vLLM, and importing the real package pulls ~600
vLLM modules and dozens of third-party packages (pydantic, fastapi, zmq, xgrammar, transformers,
regex, ...), and its platform detection would need vLLM's CUDA build. So a test names the vLLM files
it needs (a :class:`VllmSet`); :func:`load` executes **those files, unmodified**, under their real
module names, over

* namespace stand-ins for the packages above them (their real ``__init__`` files import half of
  vLLM; the stand-ins' ``__path__`` points into the source folder, so ``from pkg import sub``
  still finds the real file), and
* small shims, written here, for the few vLLM names those files import whose real modules would
  drag in the rest of vLLM. Each shim below says what it reproduces (with vLLM file:line) and why.

Sets (module name -> path under the ``vllm/`` package folder):

* :data:`O_PROJ` (``tests/gpu/test_vllm_o_proj_path.py``): ``_version.py``, ``envs.py``,
  ``model_executor/warmup/jit_warmup.py``, ``model_executor/warmup/jit_warmup_triton_helper.py``,
  ``models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py``; shims ``vllm.platforms``,
  ``vllm.triton_utils``, ``vllm.utils.torch_utils``, ``vllm.utils.deep_gemm``.
* :data:`ROUTER` (``tests/gpu/test_vllm_router_path.py``): ``_version.py``, ``envs.py``,
  ``model_executor/utils.py``, ``model_executor/custom_op.py`` (the real ``PluggableLayer``:
  ``__new__`` looks up ``op_registry_oot[cls.__name__]``, custom_op.py:46-65; ``register_oot``,
  :82-99), ``model_executor/parameter.py`` (``ModelWeightParameter``),
  ``model_executor/layers/linear.py`` (the real ``ReplicatedLinear``, ``LinearBase``,
  ``UnquantizedLinearMethod``), ``model_executor/layers/fused_moe/router/bf16x3_router_gemm_rocm.py``
  (``platform_supported()``, called by ``GateLinear.__init__``, gate_linear.py:151-159) and
  ``model_executor/layers/fused_moe/router/gate_linear.py`` (``GateLinear``); shims
  ``vllm.platforms``, ``vllm.triton_utils``, ``vllm.utils.torch_utils``, ``vllm.logger``,
  ``vllm.config``, ``vllm.distributed``, ``vllm._custom_ops``,
  ``vllm.model_executor.determinism.batch_invariant``, ``vllm.model_executor.layers.quantization``
  (+ ``.base_config``), ``vllm.model_executor.layers.utils``.

Shims (what is stood in, and why the real module is not loaded):

* ``vllm.platforms.current_platform`` (:class:`ShimPlatform`): a CUDA platform. The real
  ``platforms/__init__.py`` resolves the platform through plugin entry points and NVML and imports
  ``platforms/cuda.py`` (vLLM's compiled ``_C``). Members as in platforms/interface.py:
  ``has_device_capability`` (:531-551), ``is_device_capability`` (:554-574),
  ``is_device_capability_family`` (:577-588), ``is_cuda_alike`` (:227-229),
  ``use_sync_weight_loader`` = False (:1381-1383), ``make_synced_weight_loader`` (:1386-1397), and
  ``is_arch_support_pdl`` = major >= 9 (platforms/cuda.py:735-741). The capability is the real
  device's unless the set is loaded with ``capability=`` (the router test passes the
  ``SPARKPAIR_FAKE_CAPABILITY`` value, 12.1, so ``GateLinear`` decides its tiers as on GB10).
* ``vllm.triton_utils``: ``triton``, ``tl``, ``HAS_TRITON`` (the real one probes for a driver).
* ``vllm.utils.torch_utils``: ``direct_register_custom_op`` (define + impl + fake on a ``vllm``
  FRAGMENT library; same steps as utils/torch_utils.py:1068-1105) and ``is_torch_equal_or_newer``
  (numeric compare of ``torch.__version__``; the real one needs ``packaging``,
  torch_utils.py:954-968). The real module imports vllm.envs, vllm.logger, numpy, packaging, ...
* ``vllm.utils.deep_gemm.get_tma_aligned_size``: ``align(x, 16 // element_size)`` (the real module
  imports DeepGEMM).
* ``vllm.logger.init_logger``: a stdlib logger with ``debug_once``/``info_once``/``warning_once``
  (the real logger.py imports ``vllm.logging_utils`` and configures logging globally).
* ``vllm.config``: ``get_current_vllm_config_or_none`` -> None (no engine config: the
  ``UnquantizedLinearMethod`` then picks ``linear_backend="auto"``, linear.py:170-175);
  ``get_current_vllm_config``/``get_cached_compilation_config`` raise (used only by layers and
  ``CustomOp`` paths these tests never take). The real package imports pydantic and all configs.
* ``vllm.distributed``: ``divide`` as in distributed/utils.py; TP rank 0, world size 1 (one GPU;
  ``GateLinear`` is a ``ReplicatedLinear``); the collectives raise (not called by replicated layers).
  The real package imports torch.distributed groups, NCCL wrappers, ...
* ``vllm._custom_ops``: ``fp32_router_gemm`` raises (vLLM's compiled CUDA op; ``GateLinear``'s
  tier 2 only, gate_linear.py:400-411, disabled off Hopper / family 100, gate_linear.py:108-121).
* ``vllm.model_executor.determinism.batch_invariant.linear_batch_invariant``: raises (used only
  with ``VLLM_BATCH_INVARIANT=1``, linear.py:235-239; the real module imports NCCL helpers).
* ``vllm.model_executor.layers.quantization`` and ``.base_config``: ``QuantizationConfig`` (empty
  base), ``QuantizeMethodBase`` (same abstract ``create_weights``/``apply`` and class flags as
  base_config.py:23-57), ``resolve_quant_method`` raises (only for a ``quant_config``; the gate has
  none). The real base_config.py imports ``regex`` and ``transformers``, absent on the GPU machine.
* ``vllm.model_executor.layers.utils.dispatch_unquantized_gemm``: as layers/utils.py:620-632 on
  CUDA with ``linear_backend="auto"`` (not a FlashInfer backend key, utils.py:148-154):
  ``default_unquantized_gemm`` = ``F.linear(x, weight, bias)`` (utils.py:83-89). The real module
  imports ``_custom_ops``, aiter and FlashInfer helpers.

Source folder, first found (:func:`vllm_source_root`): ``$SPARKPAIR_VLLM_SRC`` (a ``vllm/``
folder), ``.gpu-carry/vllm`` in the checkout (made by :func:`stage`, i.e.
``python tests/gpu/vllm_harness.py stage`` or ``python tests/gpu/test_vllm_o_proj_path.py stage``,
from an installed vLLM; git-ignored through ``.git/info/exclude``, never committed), or the
installed ``vllm`` package's folder (found without importing it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[2]
CARRY = REPO / ".gpu-carry" / "vllm"


@dataclass(frozen=True)
class VllmSet:
    """What one test loads: ``files`` (module -> path under ``vllm/``, loaded in this order),
    ``packages`` (namespace stand-ins) and ``shims`` (names of :data:`SHIM_BUILDERS`)."""

    files: Mapping[str, str]
    packages: tuple[str, ...]
    shims: tuple[str, ...]


O_PROJ = VllmSet(
    files={
        "vllm._version": "_version.py",
        "vllm.envs": "envs.py",
        "vllm.model_executor.warmup.jit_warmup": "model_executor/warmup/jit_warmup.py",
        "vllm.model_executor.warmup.jit_warmup_triton_helper":
            "model_executor/warmup/jit_warmup_triton_helper.py",
        "vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant":
            "models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py",
    },
    packages=(
        "vllm", "vllm.utils", "vllm.model_executor", "vllm.model_executor.warmup", "vllm.models",
        "vllm.models.deepseek_v4", "vllm.models.deepseek_v4.common",
        "vllm.models.deepseek_v4.common.ops",
    ),
    shims=("vllm.platforms", "vllm.triton_utils", "vllm.utils.torch_utils", "vllm.utils.deep_gemm"),
)

ROUTER = VllmSet(
    files={
        "vllm._version": "_version.py",
        "vllm.envs": "envs.py",
        "vllm.model_executor.utils": "model_executor/utils.py",
        "vllm.model_executor.custom_op": "model_executor/custom_op.py",
        "vllm.model_executor.parameter": "model_executor/parameter.py",
        "vllm.model_executor.layers.linear": "model_executor/layers/linear.py",
        "vllm.model_executor.layers.fused_moe.router.bf16x3_router_gemm_rocm":
            "model_executor/layers/fused_moe/router/bf16x3_router_gemm_rocm.py",
        "vllm.model_executor.layers.fused_moe.router.gate_linear":
            "model_executor/layers/fused_moe/router/gate_linear.py",
    },
    packages=(
        "vllm", "vllm.utils", "vllm.model_executor", "vllm.model_executor.layers",
        "vllm.model_executor.layers.fused_moe", "vllm.model_executor.layers.fused_moe.router",
        "vllm.model_executor.determinism",
    ),
    shims=(
        "vllm.platforms", "vllm.triton_utils", "vllm.utils.torch_utils", "vllm.logger", "vllm.config",
        "vllm.distributed", "vllm._custom_ops", "vllm.model_executor.determinism.batch_invariant",
        "vllm.model_executor.layers.quantization", "vllm.model_executor.layers.quantization.base_config",
        "vllm.model_executor.layers.utils",
    ),
)

#: The router's peer (benchmarks/bench_router_peer.py): vLLM's CuteDSL low-latency bf16
#: router GEMM (Tier 1 of GateLinear on Hopper / family 100), imported at benchmark time, never
#: copied into the project. Its modules import from vLLM only ``vllm.platforms.current_platform``
#: and ``vllm.utils.torch_utils.current_stream`` (both shims here); CuteDSL itself
#: (``nvidia-cutlass-dsl``) must be importable.
PEER = VllmSet(
    files={
        "vllm._version": "_version.py",
        "vllm.model_executor.kernels.linear.cute_dsl._ll_bf16_dotprod":
            "model_executor/kernels/linear/cute_dsl/_ll_bf16_dotprod.py",
        "vllm.model_executor.kernels.linear.cute_dsl._ll_bf16_splitk":
            "model_executor/kernels/linear/cute_dsl/_ll_bf16_splitk.py",
        "vllm.model_executor.kernels.linear.cute_dsl.ll_bf16":
            "model_executor/kernels/linear/cute_dsl/ll_bf16.py",
    },
    packages=(
        "vllm", "vllm.utils", "vllm.model_executor", "vllm.model_executor.kernels",
        "vllm.model_executor.kernels.linear", "vllm.model_executor.kernels.linear.cute_dsl",
    ),
    shims=("vllm.platforms", "vllm.utils.torch_utils"),
)

#: Every file :func:`stage` copies (the union of the sets).
ALL_FILES: dict[str, str] = {**O_PROJ.files, **ROUTER.files, **PEER.files}


# --------------------------------------------------------------------------- finding/staging vLLM


def vllm_source_root(files: Mapping[str, str]) -> tuple[Path | None, str]:
    """The ``vllm/`` folder holding ``files``, and where it came from (or None, why)."""
    tried = []
    env = os.environ.get("SPARKPAIR_VLLM_SRC", "")
    cands: list[tuple[Path, str]] = []
    if env:
        cands.append((Path(env), "SPARKPAIR_VLLM_SRC"))
    cands.append((CARRY, ".gpu-carry"))
    spec = importlib.util.find_spec("vllm") if "vllm" not in sys.modules else None
    if spec is not None and spec.submodule_search_locations:
        cands.append((Path(list(spec.submodule_search_locations)[0]), "installed vllm"))
    for root, what in cands:
        missing = [p for p in files.values() if not (root / p).is_file()]
        if not missing:
            return root, f"{what}: {root}"
        tried.append(f"{what} {root} lacks {missing[0]}")
    return None, "vLLM's sources not found (" + "; ".join(tried or ["no candidates"]) + ")"


def stage(dest: Path = CARRY, files: Mapping[str, str] = ALL_FILES) -> Path:
    """Copy ``files`` from the installed vLLM into ``dest`` (+ MANIFEST.json with sha256)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("stage: vllm is not installed in this interpreter")
    src = Path(list(spec.submodule_search_locations)[0])
    if dest.exists():
        shutil.rmtree(dest)
    manifest: dict[str, Any] = {"source": str(src), "files": {}}
    for rel in dict.fromkeys(files.values()):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
        manifest["files"][rel] = hashlib.sha256((src / rel).read_bytes()).hexdigest()
    (dest / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return dest


# --------------------------------------------------------------------------- shims


class DeviceCapability(NamedTuple):
    """As platforms/interface.py:93-130: ``(major, minor)``, ``to_int() = major*10 + minor``."""

    major: int
    minor: int

    def to_int(self) -> int:
        return self.major * 10 + self.minor


class ShimPlatform:
    """Stand-in for ``vllm.platforms.current_platform`` (the CUDA platform's few used members)."""

    def __init__(self, device_type: str, capability: tuple[int, int] | None = None) -> None:
        self.device_type = device_type
        self.dispatch_key = "CUDA" if device_type == "cuda" else "CPU"
        self.capability = capability  # None: the real device's
        self.simple_compile_backend = "inductor"

    def is_cuda(self) -> bool:
        return self.device_type == "cuda"

    def is_cuda_alike(self) -> bool:
        return self.device_type == "cuda"

    def is_rocm(self) -> bool:
        return False

    def is_cpu(self) -> bool:
        return self.device_type == "cpu"

    def is_xpu(self) -> bool:
        return False

    def is_tpu(self) -> bool:
        return False

    def is_out_of_tree(self) -> bool:
        return False

    def get_device_capability(self, device_id: int = 0) -> DeviceCapability | None:
        if self.capability is not None:
            return DeviceCapability(*self.capability)
        import torch

        if not torch.cuda.is_available():
            return None
        return DeviceCapability(*torch.cuda.get_device_capability(device_id))

    def has_device_capability(self, capability: tuple[int, int] | int, device_id: int = 0) -> bool:
        cur = self.get_device_capability(device_id)
        if cur is None:
            return False
        return tuple(cur) >= capability if isinstance(capability, tuple) else cur.to_int() >= capability

    def is_device_capability(self, capability: tuple[int, int] | int, device_id: int = 0) -> bool:
        cur = self.get_device_capability(device_id)
        if cur is None:
            return False
        return tuple(cur) == capability if isinstance(capability, tuple) else cur.to_int() == capability

    def is_device_capability_family(self, capability: int, device_id: int = 0) -> bool:
        cur = self.get_device_capability(device_id)
        return cur is not None and cur.to_int() // 10 == capability // 10

    def use_sync_weight_loader(self) -> bool:
        return False

    def make_synced_weight_loader(self, original_weight_loader: Callable) -> Callable:
        return original_weight_loader

    def is_arch_support_pdl(self) -> bool:  # as vllm/platforms/cuda.py:735-741
        import torch

        try:
            major, _ = torch.cuda.get_device_capability(torch.cuda.current_device())
        except Exception:  # noqa: BLE001
            return False
        return major >= 9


class _OnceLogger:
    """``vllm.logger``'s logger surface: a stdlib logger plus the ``*_once`` helpers."""

    def __init__(self, name: str) -> None:
        self._log = logging.getLogger(name)
        self._seen: set[tuple[str, str, tuple]] = set()

    def __getattr__(self, item: str) -> Any:
        return getattr(self._log, item)

    def _once(self, level: str, msg: str, *args: Any, **kwargs: Any) -> None:
        key = (level, msg, tuple(map(str, args)))
        if key not in self._seen:
            self._seen.add(key)
            kwargs.pop("scope", None)
            getattr(self._log, level)(msg, *args, **kwargs)

    def debug_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._once("debug", msg, *args, **kwargs)

    def info_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._once("info", msg, *args, **kwargs)

    def warning_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self._once("warning", msg, *args, **kwargs)


def _not_on_this_path(what: str) -> Callable[..., Any]:
    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{what}: stood in by tests/gpu/vllm_harness.py; not on the tested path")

    stub.__name__ = what.rsplit(".", 1)[-1]
    return stub


def _is_torch_equal_or_newer(target: str) -> bool:
    import torch

    def nums(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0].split(".dev")[0])[:3])

    return nums(str(torch.__version__)) >= nums(target)


def _shim_platforms(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    m.current_platform = ctx["platform"]
    m.DeviceCapability = DeviceCapability


def _shim_triton_utils(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    import triton
    import triton.language as tl

    m.triton, m.tl, m.HAS_TRITON = triton, tl, True


def _shim_torch_utils(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    import torch

    lib = ctx["lib"]
    plat = ctx["platform"]

    def direct_register_custom_op(op_name, op_func, mutates_args=None, fake_impl=None,  # noqa: ANN001, ANN202
                                  target_lib=None, dispatch_key=None, tags=()):
        schema = torch.library.infer_schema(op_func, mutates_args=mutates_args or [])
        my_lib = target_lib or lib
        my_lib.define(op_name + schema, tags=tags)
        my_lib.impl(op_name, op_func, dispatch_key=dispatch_key or plat.dispatch_key)
        if fake_impl is not None:
            my_lib._register_fake(op_name, fake_impl)

    m.direct_register_custom_op, m.vllm_lib = direct_register_custom_op, lib
    m.is_torch_equal_or_newer = _is_torch_equal_or_newer
    m.current_stream = torch.cuda.current_stream  # vllm/utils/torch_utils.py: the current CUDA stream


def _shim_deep_gemm(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    m.get_tma_aligned_size = lambda x, element_size: -(-x // (16 // element_size)) * (16 // element_size)


def _shim_logger(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    m.init_logger = _OnceLogger


def _shim_config(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    m.get_current_vllm_config_or_none = lambda: None
    m.get_current_vllm_config = _not_on_this_path("vllm.config.get_current_vllm_config")
    m.get_cached_compilation_config = _not_on_this_path("vllm.config.get_cached_compilation_config")


def _shim_distributed(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    def divide(numerator: int, denominator: int) -> int:  # distributed/utils.py
        assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
        return numerator // denominator

    m.divide = divide
    m.get_tensor_model_parallel_rank = lambda: 0
    m.get_tensor_model_parallel_world_size = lambda: 1
    for name in ("split_tensor_along_last_dim", "tensor_model_parallel_all_gather",
                 "tensor_model_parallel_all_reduce"):
        setattr(m, name, _not_on_this_path(f"vllm.distributed.{name}"))


def _shim_custom_ops(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    m.fp32_router_gemm = _not_on_this_path("vllm._custom_ops.fp32_router_gemm")


def _shim_batch_invariant(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    m.linear_batch_invariant = _not_on_this_path("vllm.model_executor.determinism.linear_batch_invariant")


def _quant_classes() -> tuple[type, type]:
    from abc import ABC, abstractmethod

    import torch

    class QuantizeMethodBase(ABC):
        """As base_config.py:23-57 (class flags and the two abstract methods)."""

        requires_device_loading: bool = True
        uses_meta_device: bool = False
        supports_pre_processed_weights: bool = False

        @abstractmethod
        def create_weights(self, layer: torch.nn.Module, *weight_args: Any, **extra_attrs: Any) -> None:
            raise NotImplementedError

        @abstractmethod
        def apply(self, layer: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.Tensor:
            raise NotImplementedError

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            return

    class QuantizationConfig(ABC):  # noqa: B024 - a type for annotations and isinstance only
        """Placeholder for vLLM's ``QuantizationConfig`` (the gate is built with none)."""

    return QuantizeMethodBase, QuantizationConfig


def _shim_quantization(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    if "quant" not in ctx:
        ctx["quant"] = _quant_classes()
    m.QuantizeMethodBase, m.QuantizationConfig = ctx["quant"]
    m.resolve_quant_method = _not_on_this_path("vllm.model_executor.layers.quantization.resolve_quant_method")


def _shim_layers_utils(m: types.ModuleType, ctx: dict[str, Any]) -> None:
    import torch

    def default_unquantized_gemm(layer, x, weight, bias=None):  # noqa: ANN001, ANN202 - utils.py:83-89
        return torch.nn.functional.linear(x, weight, bias)

    def dispatch_unquantized_gemm(linear_backend: str = "auto"):  # noqa: ANN202 - utils.py:620-632
        if linear_backend != "auto":
            raise NotImplementedError(f"linear_backend={linear_backend!r}: not stood in")
        return default_unquantized_gemm

    m.default_unquantized_gemm = default_unquantized_gemm
    m.dispatch_unquantized_gemm = dispatch_unquantized_gemm


SHIM_BUILDERS: dict[str, Callable[[types.ModuleType, dict[str, Any]], None]] = {
    "vllm.platforms": _shim_platforms,
    "vllm.triton_utils": _shim_triton_utils,
    "vllm.utils.torch_utils": _shim_torch_utils,
    "vllm.utils.deep_gemm": _shim_deep_gemm,
    "vllm.logger": _shim_logger,
    "vllm.config": _shim_config,
    "vllm.distributed": _shim_distributed,
    "vllm._custom_ops": _shim_custom_ops,
    "vllm.model_executor.determinism.batch_invariant": _shim_batch_invariant,
    "vllm.model_executor.layers.quantization": _shim_quantization,
    "vllm.model_executor.layers.quantization.base_config": _shim_quantization,
    "vllm.model_executor.layers.utils": _shim_layers_utils,
}


# --------------------------------------------------------------------------- the harness


def _vllm_modules() -> dict[str, Any]:
    return {n: m for n, m in sys.modules.items() if n == "vllm" or n.startswith("vllm.")}


def install_shims(root: Path, vset: VllmSet, device_type: str,
                  capability: tuple[int, int] | None = None) -> dict[str, Any]:
    """Put the namespace and shim modules into ``sys.modules``; return the state to restore."""
    import torch

    saved = _vllm_modules()
    for name in list(saved):
        del sys.modules[name]
    for name in vset.packages:
        m = types.ModuleType(name)
        m.__path__ = [str(root.joinpath(*name.split(".")[1:]))]  # submodules resolve to real files
        m.__sparkpair_harness__ = True
        sys.modules[name] = m
    lib = torch.library.Library("vllm", "FRAGMENT")  # noqa: TOR901 - vLLM's own op namespace
    ctx: dict[str, Any] = {"platform": ShimPlatform(device_type, capability), "lib": lib}
    for name in vset.shims:
        m = types.ModuleType(name)
        SHIM_BUILDERS[name](m, ctx)
        m.__sparkpair_harness__ = True
        sys.modules[name] = m
    return {"saved": saved, "lib": lib, "platform": ctx["platform"]}


def restore(state: dict[str, Any]) -> None:
    """Put ``sys.modules``' ``vllm`` entries back as they were and drop the ``vllm`` op library."""
    for name in list(_vllm_modules()):
        del sys.modules[name]
    sys.modules.update(state["saved"])
    state["lib"]._destroy()


def load(root: Path, vset: VllmSet, device_type: str = "cuda",
         capability: tuple[int, int] | None = None) -> dict[str, Any]:
    """Load ``vset.files`` (real files, in order) over the shims; return the state.

    Pass the state to :func:`restore` when done (the shims stay in ``sys.modules`` until then:
    some loaded code imports vLLM names at call time). ``state["modules"]`` maps each loaded
    module name to its module.
    """
    state = install_shims(root, vset, device_type, capability)
    try:
        for name, rel in vset.files.items():
            if name in sys.modules:  # already imported by an earlier file (the same real file)
                continue
            spec = importlib.util.spec_from_file_location(name, root / rel)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            parent, _, leaf = name.rpartition(".")
            setattr(sys.modules[parent], leaf, mod)
        sys.modules["vllm"].__version__ = sys.modules["vllm._version"].__version__
    except BaseException:
        restore(state)
        raise
    state["modules"] = {name: sys.modules[name] for name in vset.files}
    return state


def write_results_json(env_var: str, what: str, where: str, version: str, cases: list) -> None:
    """Write ``cases`` with the run's provenance to the path in ``$env_var`` (nothing if unset/empty)."""
    out = os.environ.get(env_var)
    if not out or not cases:
        return
    import torch
    import triton

    doc = {"what": what, "vllm_source": where, "vllm_version": version,
           "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "cuda": torch.version.cuda,
           "git_sha": os.environ.get("SPARKPAIR_GIT_SHA", ""), "cases": cases}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=1) + "\n")


def loaded_vllm_modules() -> dict[str, str]:
    """Every ``vllm`` module now in ``sys.modules`` -> ``"shim"``, ``"package"`` or its file."""
    out = {}
    for name, mod in _vllm_modules().items():
        if getattr(mod, "__sparkpair_harness__", False):
            out[name] = "package" if hasattr(mod, "__path__") else "shim"
        else:
            out[name] = str(getattr(mod, "__file__", None))
    return out


if __name__ == "__main__":
    if sys.argv[1:] == ["stage"]:
        print(stage())
    else:
        raise SystemExit("usage: python tests/gpu/vllm_harness.py stage")
