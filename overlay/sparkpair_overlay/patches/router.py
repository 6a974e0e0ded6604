"""Router patch: an out-of-tree ``GateLinear`` subclass, registered the way vLLM keys it.

How vLLM picks the class (vllm/model_executor/custom_op.py, 0.32.0 and 0.33.0):
``PluggableLayer.__new__`` looks up ``cls.__name__`` in ``op_registry_oot`` (:46-65) and
allocates the registered class instead; ``register_oot`` stores under ``name or
cls.__name__`` of the class it is called on and asserts on duplicates (:82-99). So
``GateLinear.register_oot(SparkpairGateLinear)`` stores under ``"GateLinear"``; the
subclass must subclass ``GateLinear`` or Python would skip ``__init__``. Models construct
``GateLinear(...)`` (DeepSeek-V4: models/deepseek_v4/nvidia/model.py) after plugins load,
so registering in :func:`apply` is early enough (docs/reference/vllm-code-paths.md#plugin-load-order).

``GateLinear`` is a ``PluggableLayer``, not a ``CustomOp``: vLLM's
``compilation_config.custom_ops`` switches do not apply to it. Under torch.compile our
forward calls the opaque custom op ``torch.ops.sparkpair_overlay.router_gemm_dispatch``
(fake impl registered), so the token-count branch is taken at run time, never frozen at
trace time (the same reason vLLM wraps ``fp32_router_gemm_dispatch``, gate_linear.py:389-435).
"""

import torch

from .._log import get_logger
from ..plan import KernelPlan, RouterDecision

logger = get_logger("router")

_LIB = None  # the torch.library.Library that owns our dispatch op (kept alive here)
_SUBCLASS: type | None = None
_PLAN: KernelPlan | None = None
_KERNEL = None  # sparkpair_overlay.kernels.router_gemm.router_gemm, bound in apply()


def _router_gemm_dispatch(
    x: torch.Tensor, weight: torch.Tensor, max_m: int, planes: torch.Tensor | None = None
) -> torch.Tensor:
    """``x [M, K] bf16`` @ ``weight [N, K] bf16|fp32`` -> ``[M, N] fp32``.

    ``max_m < 0``: every M goes to our kernel (fp32-accurate tier; ``planes`` = the layer's
    ``bf16x3_split`` of its fp32 weight, or None). Otherwise M <= max_m goes to our kernel and
    larger M to cuBLAS ``torch.mm(x, weight.T, out_dtype=fp32)``, exactly vLLM's tier
    (gate_linear.py:283-285 in 0.32.0).
    """
    if max_m < 0 or x.shape[0] <= max_m:
        assert _KERNEL is not None, "sparkpair router kernel not bound (apply() not run)"
        return _KERNEL(x, weight, planes)
    return torch.mm(x, weight.T, out_dtype=torch.float32)


def _router_gemm_dispatch_fake(
    x: torch.Tensor, weight: torch.Tensor, max_m: int, planes: torch.Tensor | None = None
) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)


def _register_dispatch_op() -> None:
    global _LIB
    if _LIB is not None:
        return
    from torch.library import Library
    from vllm.utils.torch_utils import direct_register_custom_op

    lib = Library("sparkpair_overlay", "FRAGMENT")
    direct_register_custom_op(
        "router_gemm_dispatch",
        _router_gemm_dispatch,
        fake_impl=_router_gemm_dispatch_fake,
        target_lib=lib,
        dispatch_key="CUDA",
    )
    _LIB = lib


def _weight_dtype_name(layer: torch.nn.Module) -> str:
    w = getattr(layer, "weight", None)
    return "none" if w is None else str(w.dtype).removeprefix("torch.")


def _make_subclass(gate_linear: type) -> type:
    class SparkpairGateLinear(gate_linear):  # type: ignore[misc]  # base class known only at run time
        """vLLM ``GateLinear`` with sparkpair's family-120 tiers in front of vLLM's.

        ``forward(x)``: ``x [M, hidden]``; returns router logits ``[M, n_experts]`` in
        ``out_dtype`` (and ``None`` bias when ``return_bias``). When this layer's decision
        (``self.sparkpair_router``, from the process plan for its weight dtype and shape)
        is a Triton tier and the call is ``bf16`` on CUDA with ``out_dtype == fp32``, it runs
        ``torch.ops.sparkpair_overlay.router_gemm_dispatch``; otherwise ``super().forward``
        runs vLLM's tiers unchanged.
        """

        _sparkpair = True

        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            super().__init__(*args, **kwargs)
            plan = _PLAN
            if plan is None:
                decision = RouterDecision("upstream", None, "no sparkpair plan in this process")
            elif not self.is_unquantized or getattr(self, "bias", None) is not None:
                decision = RouterDecision("upstream", None, "quantized or biased gate")
            else:
                decision = plan.router_decision(
                    _weight_dtype_name(self), (int(self.output_size), int(self.input_size))
                )
            self.sparkpair_router = decision
            self._sparkpair_max_m = -1 if decision.max_m is None else int(decision.max_m)
            if plan is not None:  # every rank must serve with one plan (raises PairMismatch otherwise)
                from .. import pair

                pair.check_once(plan, plan.switches)
            # fp32 weight: BF16x3 planes made after every weight load (vLLM's loader calls
            # quant_method.process_weights_after_loading(layer) once the weights are in, also on
            # reload), refreshed in place so captured CUDA graphs keep reading the live buffer.
            self.sparkpair_planes: torch.Tensor | None = None
            qm = getattr(self, "quant_method", None)
            if decision.path == "triton-fp32-accurate" and qm is not None:
                after_loading = qm.process_weights_after_loading

                def process_weights_after_loading(layer: torch.nn.Module) -> None:
                    after_loading(layer)
                    if layer is self:
                        self.sparkpair_refresh_planes()

                qm.process_weights_after_loading = process_weights_after_loading

        def sparkpair_refresh_planes(self) -> None:
            """(Re)compute ``sparkpair_planes`` from the fp32 weight; on a weight BF16x3 cannot
            carry (NaN, inf, huge or all-tiny values) this layer goes back to vLLM's tiers."""
            from ..kernels.router_gemm import bf16x3_split

            w = getattr(self, "weight", None)
            if w is None or w.dtype != torch.float32 or not w.is_cuda:
                return
            try:
                planes = bf16x3_split(w.detach())
            except ValueError as exc:
                self.sparkpair_router = RouterDecision("upstream", None, f"fp32 weight: {exc}")
                self.sparkpair_planes = None
                logger.warning("sparkpair router: %s; this gate runs vLLM's fp32 tier", exc)
                return
            if self.sparkpair_planes is not None and self.sparkpair_planes.shape == planes.shape:
                self.sparkpair_planes.copy_(planes)
                torch.cuda.current_stream(planes.device).synchronize()
            else:
                self.sparkpair_planes = planes

        def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, None]:
            if (
                self.sparkpair_router.path != "upstream"
                and x.is_cuda
                and x.dtype == torch.bfloat16
                and self.out_dtype == torch.float32
            ):
                out = torch.ops.sparkpair_overlay.router_gemm_dispatch(
                    x, self.weight, self._sparkpair_max_m, self.sparkpair_planes
                )
                return out if not self.return_bias else (out, None)
            upstream: torch.Tensor | tuple[torch.Tensor, None] = super().forward(x)
            return upstream

    return SparkpairGateLinear


def registered_class() -> type | None:
    """The class vLLM will instantiate for ``GateLinear`` (``None`` = vLLM's own)."""
    from vllm.model_executor.custom_op import op_registry_oot

    cls: type | None = op_registry_oot.get("GateLinear")
    return cls


def apply(plan: KernelPlan, kernel: object) -> type:
    """Register :class:`SparkpairGateLinear` for ``"GateLinear"`` (idempotent).

    Args:
        plan: the process plan (the subclass asks it for each layer's decision).
        kernel: ``sparkpair_overlay.kernels.router_gemm.router_gemm``.

    Returns:
        The registered subclass.

    Raises:
        RuntimeError: another out-of-tree class is already registered for ``"GateLinear"``
            (registering ours would trip vLLM's duplicate assert; custom_op.py:86).
    """
    global _SUBCLASS, _PLAN, _KERNEL
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

    _PLAN, _KERNEL = plan, kernel
    existing = op_registry_oot.get("GateLinear")
    if existing is not None:
        if getattr(existing, "_sparkpair", False):
            _SUBCLASS = existing
            return _SUBCLASS
        raise RuntimeError(
            f"op_registry_oot['GateLinear'] is already {existing.__module__}.{existing.__qualname__}; "
            "wanted it free for sparkpair's GateLinear subclass (another plugin patches the router?)"
        )
    _register_dispatch_op()
    if _SUBCLASS is None:
        _SUBCLASS = _make_subclass(GateLinear)
    GateLinear.register_oot(_SUBCLASS)
    if op_registry_oot.get("GateLinear") is not _SUBCLASS:
        raise RuntimeError("GateLinear.register_oot did not key the subclass by 'GateLinear'")
    return _SUBCLASS


def use_plan(plan: KernelPlan) -> None:
    """Hand ``plan`` to the registered subclass: ``GateLinear`` layers built from now on ask it.

    :func:`apply` takes the plan it registers with; the plugin calls this afterwards with the
    final plan (the patches' own failures folded into it).
    """
    global _PLAN
    _PLAN = plan


def restore() -> None:
    """Unregister our subclass so ``GateLinear(...)`` builds vLLM's class again."""
    from vllm.model_executor.custom_op import op_registry_oot

    cls = op_registry_oot.get("GateLinear")
    if cls is not None and getattr(cls, "_sparkpair", False):
        del op_registry_oot["GateLinear"]
