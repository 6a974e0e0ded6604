"""o_proj patch: rebind ``fp8_einsum`` in its consumer modules to a per-call dispatcher.

Why rebinding the consumers (docs/reference/vllm-code-paths.md#o_proj-callers,
docs/reference/vllm-code-paths.md#plugin-load-order):
``vllm/models/deepseek_v4/nvidia/ops/o_proj.py:16`` does ``from vllm.utils.deep_gemm import
fp8_einsum`` and reads that module global at call time (:89); in spawned engine/worker
processes that module is imported (via the pickled quant config) *before* plugins run,
so patching only ``vllm.utils.deep_gemm`` would miss it. We import every consumer module
explicitly and set its global, plus the source module's (for modules imported later). The
same holds for ``compute_fp8_einsum_recipe``, bound by name in the attention modules and
called in their ``__init__`` (flashmla.py:15-16,59; flashinfer_sparse.py:19-20,239,671 and
the deepseek_v41 copies), so it is patched before the model is constructed.

``vllm.utils.deep_gemm._fp8_einsum_impl`` is never touched: ``_lazy_init`` returns early as
soon as any ``_*_impl`` is set (deep_gemm.py:255-276), which would leave the other DeepGEMM
symbols unresolved. No ``functools.cache`` predicate of vLLM has its inputs changed here, so
no ``cache_clear()`` is needed (see PATCHES.md).
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._log import get_logger
from ..o_proj_route import einsum_route
from ..plan import Capability, OProjDecision, Recipe, recipe_scales_tma_aligned
from ..targets import (
    FP8_EINSUM_CONSUMERS_OPTIONAL,
    FP8_EINSUM_CONSUMERS_REQUIRED,
    RECIPE_CONSUMERS_OPTIONAL,
    RECIPE_CONSUMERS_REQUIRED,
)

logger = get_logger("o_proj")

# module name -> the object its global held before we patched it
_ORIGINAL_EINSUM: dict[str, Any] = {}
_ORIGINAL_RECIPE: dict[str, Any] = {}


class Fp8EinsumDispatcher:
    """Drop-in for ``vllm.utils.deep_gemm.fp8_einsum(equation, a, b, out, recipe=...)``.

    Each call is routed by :func:`sparkpair_overlay.o_proj_route.einsum_route` (capability, equation,
    recipe, operand and scale dtypes/shapes, and the plan): to our Triton kernel
    (``sparkpair_overlay.kernels.fp8_einsum.fp8_einsum``, same calling convention) or to the
    original function (vLLM's DeepGEMM wrapper). Writes ``out`` in place and returns what
    the chosen function returns. A call the plan wanted on Triton but the predicate refused
    is logged once per reason (warning), never silently.

    Attributes:
        original: the function this dispatcher replaced.
        decision: the plan's o_proj decision.
        capability: the device capability the plan was made for.
        calls: ``Counter`` of routes taken (``triton`` / ``deepgemm``), per Python call
            (a CUDA-graph replay does not re-enter Python).
    """

    sparkpair = True

    def __init__(
        self,
        original: Callable[..., Any],
        decision: OProjDecision,
        capability: Capability | None,
        kernel: Callable[..., Any] | None,
    ) -> None:
        self.original = original
        self.decision = decision
        self.capability = capability
        self.kernel = kernel
        self.calls: Counter[str] = Counter()
        self._warned: set[str] = set()
        self.__name__ = "fp8_einsum"
        self.__qualname__ = "Fp8EinsumDispatcher"
        self.__doc__ = Fp8EinsumDispatcher.__doc__

    def route(self, *args: Any, **kwargs: Any) -> tuple[str, str]:
        """The route ``(triton|deepgemm, reason)`` this call would take (no side effects)."""
        if len(args) != 4 or set(kwargs) != {"recipe"}:
            return "deepgemm", "call is not fp8_einsum(equation, a, b, out, recipe=...)"
        if self.kernel is None and self.decision.backend == "triton":
            return "deepgemm", "Triton kernel not bound"
        return einsum_route(self.decision, self.capability, args[0], args[1], args[2], args[3],
                            kwargs["recipe"])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        route, reason = self.route(*args, **kwargs)
        self.calls[route] += 1
        if route == "triton":
            assert self.kernel is not None
            return self.kernel(*args, recipe=tuple(kwargs["recipe"]))
        if self.decision.backend == "triton" and reason not in self._warned:
            self._warned.add(reason)
            logger.warning("sparkpair o_proj: plan says triton but this fp8_einsum call goes to "
                           "DeepGEMM: %s", reason)
        return self.original(*args, **kwargs)


class SwitchRefused(RuntimeError):
    """A vLLM switch makes DeepSeek-V4's o_proj unservable; raised at model construction.

    The message names the switch, the value seen, what it breaks and the way out.
    """


def o_proj_switch_problem() -> str | None:
    """Why DeepSeek-V4's o_proj cannot run with this process's vLLM switches, or ``None``.

    ``VLLM_USE_DEEP_GEMM=0`` makes ``is_deep_gemm_supported()`` False (vllm/utils/deep_gemm.py,
    0.33.0), so ``DeepGemmFp8BlockScaledMMKernel`` is not selected for the FP8 ``wo_a``; it is the
    only CUDA FP8 block kernel that reshapes ``wo_a`` to ``[G, D, R]`` for the grouped einsum
    (``deepgemm_post_process_fp8_weight_block(is_bmm=True)``). ``deep_gemm_fp8_o_proj`` would then
    hand ``fp8_einsum`` a 2-D weight at the first forward, which neither DeepGEMM nor our kernel
    takes (docs/reference/vllm-0.33.md, "VLLM_USE_DEEP_GEMM").
    """
    import vllm.envs as vllm_envs

    if not vllm_envs.VLLM_USE_DEEP_GEMM:
        return ("VLLM_USE_DEEP_GEMM=0: vLLM then keeps DeepSeek-V4's FP8 wo_a in its checkpoint layout "
                "[G*D, R] (only its DeepGEMM linear kernel reshapes it to [G, D, R]), and the o_proj's "
                "fp8_einsum cannot take a 2-D weight at the first forward; wanted VLLM_USE_DEEP_GEMM "
                "unset or 1 for DeepSeek-V4 (sparkpair's o_proj kernel replaces DeepGEMM's einsum where "
                "the plan says so, not its weight layout)")
    return None


def _make_recipe_fn(original: Callable[..., Any], recipe: Recipe | None) -> Callable[..., Any]:
    tma = recipe_scales_tma_aligned(recipe) if recipe is not None else None

    def compute_fp8_einsum_recipe(block_size: int = 128) -> tuple[tuple[int, int, int], bool]:
        """sparkpair: vLLM's ``compute_fp8_einsum_recipe`` (o_proj.py:19-32), checked first.

        Called in the DeepSeek-V4 attention ``__init__``, so a switch that would break the o_proj
        at its first forward stops the model's construction here instead
        (:class:`SwitchRefused`, from :func:`o_proj_switch_problem`). Returns vLLM's own answer,
        or, when the plan selected a recipe, ``((1,1,block_size), True)`` for the SM100 recipe and
        ``((1,128,128), False)`` for the SM90-shaped one.

        Raises:
            SwitchRefused: a switch makes the o_proj unservable.
        """
        problem = o_proj_switch_problem()
        if problem is not None:
            raise SwitchRefused(f"sparkpair overlay: refusing to build DeepSeek-V4 attention: {problem}")
        if recipe is None:
            upstream: tuple[tuple[int, int, int], bool] = original(block_size)
            return upstream
        r = (1, 1, block_size) if recipe == (1, 1, 128) else recipe
        return r, bool(tma)

    compute_fp8_einsum_recipe.sparkpair = True  # type: ignore[attr-defined]
    compute_fp8_einsum_recipe.original = original  # type: ignore[attr-defined]
    compute_fp8_einsum_recipe.recipe = recipe  # type: ignore[attr-defined]
    return compute_fp8_einsum_recipe


def _import(required: tuple[str, ...], optional: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    mods: dict[str, Any] = {}
    notes: list[str] = []
    for name in required:
        mods[name] = importlib.import_module(name)  # failure propagates: the patch is not applied
    for name in optional:
        try:
            mods[name] = importlib.import_module(name)
        except ModuleNotFoundError:
            notes.append(f"{name} absent")
        except Exception as exc:  # noqa: BLE001 - an optional consumer that fails to import is skipped
            notes.append(f"{name} not patched ({type(exc).__name__}: {exc})")
    return mods, notes


def apply(decision: OProjDecision, capability: Capability | None, kernel: Callable[..., Any] | None,
          patch_recipe: bool) -> list[str]:
    """Rebind ``fp8_einsum`` and wrap ``compute_fp8_einsum_recipe`` in every consumer.

    The recipe wrapper returns the plan's recipe if ``patch_recipe``, else vLLM's own; either
    way it first refuses a switch that would break the o_proj at its first forward
    (:func:`o_proj_switch_problem`), at model construction.

    Idempotent: a module whose global is already ours is left alone. All modules are
    imported before any global is changed, so a failed import patches nothing.

    Args:
        decision: the plan's o_proj decision (backend ``deepgemm`` or ``triton``).
        capability: the device capability the plan was made for.
        kernel: ``sparkpair_overlay.kernels.fp8_einsum.fp8_einsum`` (``None`` for deepgemm).
        patch_recipe: ``compute_fp8_einsum_recipe`` returns ``decision.recipe`` instead of vLLM's.

    Returns:
        Notes (optional modules absent or skipped).

    Raises:
        ImportError (or whatever a required vLLM module raises on import): nothing patched.
    """
    einsum_mods, notes = _import(FP8_EINSUM_CONSUMERS_REQUIRED, FP8_EINSUM_CONSUMERS_OPTIONAL)
    if patch_recipe:
        assert decision.recipe is not None
    recipe_mods, more = _import(RECIPE_CONSUMERS_REQUIRED, RECIPE_CONSUMERS_OPTIONAL)
    notes += more
    dispatchers: dict[int, Fp8EinsumDispatcher] = {}
    for name, mod in einsum_mods.items():
        current = mod.fp8_einsum
        if getattr(current, "sparkpair", False):
            continue
        d = dispatchers.get(id(current))
        if d is None:
            d = dispatchers[id(current)] = Fp8EinsumDispatcher(current, decision, capability, kernel)
        _ORIGINAL_EINSUM[name] = current
        mod.fp8_einsum = d
    fns: dict[int, Callable[..., Any]] = {}
    for name, mod in recipe_mods.items():
        current = mod.compute_fp8_einsum_recipe
        if getattr(current, "sparkpair", False):
            continue
        fn = fns.get(id(current))
        if fn is None:
            fn = fns[id(current)] = _make_recipe_fn(current, decision.recipe if patch_recipe else None)
        _ORIGINAL_RECIPE[name] = current
        mod.compute_fp8_einsum_recipe = fn
    return notes


def restore() -> None:
    """Put every original object back (exactly vLLM's functions again)."""
    import sys

    for name, orig in list(_ORIGINAL_EINSUM.items()):
        if name in sys.modules:
            setattr(sys.modules[name], "fp8_einsum", orig)  # noqa: B010 - ModuleType declares no such attribute
        del _ORIGINAL_EINSUM[name]
    for name, orig in list(_ORIGINAL_RECIPE.items()):
        if name in sys.modules:
            setattr(sys.modules[name], "compute_fp8_einsum_recipe", orig)  # noqa: B010 - as above
        del _ORIGINAL_RECIPE[name]
