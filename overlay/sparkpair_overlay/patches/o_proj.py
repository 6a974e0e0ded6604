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
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._log import get_logger
from ..o_proj_route import deepgemm_rejects, einsum_route, triton_operands
from ..plan import Capability, OProjDecision, Recipe, construction_problem, recipe_scales_tma_aligned
from ..serve_matrix import RECIPE_SM90, RECIPE_SM100, Switches, Verdict
from ..targets import (
    FP8_EINSUM_CONSUMERS_OPTIONAL,
    FP8_EINSUM_CONSUMERS_REQUIRED,
    RECIPE_CONSUMERS_OPTIONAL,
    RECIPE_CONSUMERS_REQUIRED,
)

if TYPE_CHECKING:
    from ..plan import KernelPlan

logger = get_logger("o_proj")

# module name -> the object its global held before we patched it
_ORIGINAL_EINSUM: dict[str, Any] = {}
_ORIGINAL_RECIPE: dict[str, Any] = {}


class OperandsRefused(RuntimeError):
    """An ``fp8_einsum`` call would reach DeepGEMM with operands its host checks reject.

    The construction check (:func:`construction_check`) refuses every switch that leads there, so
    this names a gap in the matrix instead of letting DeepGEMM's assertion end the forward.
    """


class Fp8EinsumDispatcher:
    """Drop-in for ``vllm.utils.deep_gemm.fp8_einsum(equation, a, b, out, recipe=...)``.

    Each call is routed by :func:`sparkpair_overlay.o_proj_route.einsum_route` (capability, equation,
    recipe, operand layouts, and the plan): to our Triton kernel
    (``sparkpair_overlay.kernels.fp8_einsum.fp8_einsum``, same calling convention; a 2-D ``wo_a`` is
    handed over as the same bytes viewed ``[G, D, R]``,
    :func:`~sparkpair_overlay.o_proj_route.triton_operands`)
    or to the original function (vLLM's DeepGEMM wrapper). Writes ``out`` in place and returns what
    the chosen function returns. A call the plan wanted on Triton but the predicate refused is
    logged once per reason (warning), never silently. A call on CUDA tensors bound for the DeepGEMM
    vLLM vendors whose operands its host checks reject raises :class:`OperandsRefused` instead
    (:func:`~sparkpair_overlay.o_proj_route.deepgemm_rejects`).

    Attributes:
        original: the function this dispatcher replaced.
        decision: the plan's o_proj decision.
        capability: the device capability the plan was made for.
        deepgemm: which DeepGEMM vLLM imports (``vendored`` | ``external`` | ...); only the vendored
            one's checks are known.
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
        deepgemm: str = "vendored",
    ) -> None:
        self.original = original
        self.decision = decision
        self.capability = capability
        self.kernel = kernel
        self.deepgemm = deepgemm
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
            a, b, recipe = triton_operands(args[1], args[2], args[3])
            return self.kernel(args[0], a, b, args[3], recipe=recipe)
        if self.decision.backend == "triton" and reason not in self._warned:
            self._warned.add(reason)
            logger.warning("sparkpair o_proj: plan says triton but this fp8_einsum call goes to "
                           "DeepGEMM: %s", reason)
        on_gpu = len(args) == 4 and getattr(args[1][0], "is_cuda", False)
        o_proj_recipe = tuple(kwargs.get("recipe") or ()) in (RECIPE_SM100, RECIPE_SM90)  # not MXFP8's
        if self.deepgemm == "vendored" and on_gpu and o_proj_recipe and args[0] == "bhr,hdr->bhd":
            why = deepgemm_rejects(args[1], args[2], args[3], kwargs.get("recipe"))
            if why is not None:
                raise OperandsRefused(
                    f"sparkpair overlay: this o_proj fp8_einsum call would reach DeepGEMM, which rejects it: "
                    f"{why}; the construction check should have refused the switches that lead here "
                    f"(plan o_proj={self.decision.label} on {self.decision.weight_layout}); wanted "
                    "SPARKPAIR_O_PROJ=triton, and please report the switches")
        return self.original(*args, **kwargs)


class SwitchRefused(RuntimeError):
    """A vLLM switch makes DeepSeek-V4's o_proj unservable; raised at model construction.

    The message names the switch, the value seen, what it breaks and the way out.
    """


_CHECK_LOCK = threading.Lock()
_CHECK: dict[tuple[int, ...], tuple[Verdict, str | None, Switches]] = {}


def _vllm_linear_backend() -> str:
    """The FP8 block layers' ``--linear-backend`` as vLLM reads it in this process (``auto`` when no
    vLLM config is set: vLLM's own default then): ``linear_backend_per_quant["fp8_block_w8a8"]``, else
    ``linear_backend`` (``vllm/model_executor/kernels/linear/__init__.py`` ``_get_linear_backend``)."""
    try:
        from vllm.config import vllm as vllm_config_module

        cfg = getattr(vllm_config_module, "get_current_vllm_config_or_none", lambda: None)()
    except Exception:  # noqa: BLE001 - a vLLM without the config module: its default
        return "auto"
    kc = getattr(cfg, "kernel_config", None) if cfg is not None else None
    if kc is None:
        return "auto"
    per = getattr(kc, "linear_backend_per_quant", None) or {}
    return str(per.get("fp8_block_w8a8") or getattr(kc, "linear_backend", "auto") or "auto")


def served_switches(linear_backend: str | None = None) -> tuple[Switches, str | None]:
    """This process's :class:`~sparkpair_overlay.serve_matrix.Switches` and the DeepGEMM identity.

    ``VLLM_USE_DEEP_GEMM*`` through ``vllm.envs`` (vLLM's own parse), the linear backend from the
    current vLLM config, the DeepGEMM from :func:`sparkpair_overlay.deepgemm.deepgemm_found`, and the
    running release's own conditions on DeepGEMM (vLLM 0.34: an ``nvcc`` >= 12.9,
    :func:`sparkpair_overlay.deepgemm.deepgemm_unsupported`).
    """
    import vllm
    import vllm.envs as vllm_envs

    from ..deepgemm import deepgemm_found, deepgemm_unsupported

    source, ident = deepgemm_found()
    s = Switches(
        linear_backend if linear_backend is not None else _vllm_linear_backend(),
        bool(vllm_envs.VLLM_USE_DEEP_GEMM),
        bool(getattr(vllm_envs, "VLLM_USE_DEEP_GEMM_E8M0", True)),
        source,
        deepgemm_unsupported=deepgemm_unsupported(str(vllm.__version__)),
    )
    return s, ident


def construction_check(plan: KernelPlan, recipe: Recipe) -> Verdict:
    """Check, once per process, that this process's switches serve DeepSeek-V4's o_proj; called when
    the first DeepSeek-V4 attention layer is built (before any weight is read).

    Also the pair check (:func:`sparkpair_overlay.pair.check_once`): every rank must serve with the
    same plan and switches.

    Raises:
        SwitchRefused: the combination is refused (the message names the switch, the value, what it
            breaks and the way out).
        sparkpair_overlay.pair.PairMismatch: the ranks differ.
    """
    from .. import pair

    with _CHECK_LOCK:
        cached = _CHECK.get(tuple(recipe))
        if cached is None:
            switches, ident = served_switches()
            verdict, problem = construction_problem(plan, recipe, switches, ident)
            cached = _CHECK[tuple(recipe)] = (verdict, problem, switches)
    verdict, problem, switches = cached
    pair.check_once(plan, switches)
    if problem is not None:
        raise SwitchRefused(f"sparkpair overlay: refusing to build DeepSeek-V4 attention: {problem}")
    return verdict


def _make_recipe_fn(
    original: Callable[..., Any], recipe: Recipe | None, plan: KernelPlan | None
) -> Callable[..., Any]:
    tma = recipe_scales_tma_aligned(recipe) if recipe is not None else None

    def compute_fp8_einsum_recipe(block_size: int = 128) -> tuple[tuple[int, int, int], bool]:
        """sparkpair: vLLM's ``compute_fp8_einsum_recipe`` (o_proj.py), checked first.

        Called in the DeepSeek-V4 attention ``__init__``, after ``wo_a`` is built and before any
        weight is loaded, so a combination the matrix refuses stops the model's construction here
        instead of failing at the first forward (:func:`construction_check`). Returns vLLM's own
        answer, or, when the plan selected a recipe, ``((1,1,block_size), True)`` for the SM100 recipe
        and ``((1,128,128), False)`` for the SM90-shaped one.

        Raises:
            SwitchRefused: the combination is refused.
            sparkpair_overlay.pair.PairMismatch: the ranks would serve differently.
        """
        if recipe is None:
            r_up, tma_up = original(block_size)
            r3 = (int(r_up[0]), int(r_up[1]), int(r_up[2]))
            answer: tuple[tuple[int, int, int], bool] = (r3, bool(tma_up))
        else:
            r = (1, 1, block_size) if recipe == RECIPE_SM100 else recipe
            answer = (r, bool(tma))
        if plan is not None:
            construction_check(plan, answer[0])
        return answer

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
          patch_recipe: bool, *, plan: KernelPlan | None = None, rebind_einsum: bool = True) -> list[str]:
    """Rebind ``fp8_einsum`` and wrap ``compute_fp8_einsum_recipe`` in every consumer.

    The recipe wrapper returns the plan's recipe if ``patch_recipe``, else vLLM's own; with ``plan``
    it first runs the construction check (:func:`construction_check`) when the attention layer asks.

    Idempotent: a module whose global is already ours is left alone. All modules are
    imported before any global is changed, so a failed import patches nothing.

    Args:
        decision: the plan's o_proj decision.
        capability: the device capability the plan was made for.
        kernel: ``sparkpair_overlay.kernels.fp8_einsum.fp8_einsum`` (``None`` for deepgemm).
        patch_recipe: ``compute_fp8_einsum_recipe`` returns ``decision.recipe`` instead of vLLM's.
        plan: the process plan (the construction check reads its decision, probe and switches).
        rebind_einsum: False for ``SPARKPAIR_O_PROJ=upstream``: only the construction check is
            installed (vLLM's ``fp8_einsum`` and recipe stay).

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
    deepgemm = plan.switches.deepgemm if plan is not None and plan.switches is not None else "vendored"
    dispatchers: dict[int, Fp8EinsumDispatcher] = {}
    for name, mod in einsum_mods.items() if rebind_einsum else ():
        current = mod.fp8_einsum
        if getattr(current, "sparkpair", False):
            continue
        d = dispatchers.get(id(current))
        if d is None:
            d = Fp8EinsumDispatcher(current, decision, capability, kernel, deepgemm)
            dispatchers[id(current)] = d
        _ORIGINAL_EINSUM[name] = current
        mod.fp8_einsum = d
    fns: dict[int, Callable[..., Any]] = {}
    for name, mod in recipe_mods.items():
        current = mod.compute_fp8_einsum_recipe
        if getattr(current, "sparkpair", False):
            continue
        fn = fns.get(id(current))
        if fn is None:
            fn = fns[id(current)] = _make_recipe_fn(current, decision.recipe if patch_recipe else None, plan)
        _ORIGINAL_RECIPE[name] = current
        mod.compute_fp8_einsum_recipe = fn
    return notes


def restore() -> None:
    """Put every original object back (exactly vLLM's functions again), the kernel's built-in config
    tables too, and forget the check."""
    import sys

    with _CHECK_LOCK:
        _CHECK.clear()
    kernel = sys.modules.get("sparkpair_overlay.kernels.fp8_einsum")
    if kernel is not None:  # the plan may have installed its per-range configs: the built-in tables again
        for fp32_scales in (False, True):
            kernel.use_plan(None, fp32_scales)
    for name, orig in list(_ORIGINAL_EINSUM.items()):
        if name in sys.modules:
            setattr(sys.modules[name], "fp8_einsum", orig)  # noqa: B010 - ModuleType declares no such attribute
        del _ORIGINAL_EINSUM[name]
    for name, orig in list(_ORIGINAL_RECIPE.items()):
        if name in sys.modules:
            setattr(sys.modules[name], "compute_fp8_einsum_recipe", orig)  # noqa: B010 - as above
        del _ORIGINAL_RECIPE[name]
