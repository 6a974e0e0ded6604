"""The vLLM switches that decide what DeepSeek-V4's ``wo_a`` becomes on capability family 120.

:class:`Switches` gathers ``--linear-backend``, ``VLLM_USE_DEEP_GEMM``, ``VLLM_USE_DEEP_GEMM_E8M0``, the
DeepGEMM source and the checkpoint's scale dtype; :func:`linear_outcome` says which FP8 block kernel
vLLM 0.33 picks for ``wo_a`` under them and which weight layout its post-processing leaves (facts:
docs/reference/vllm-code-paths.md#linear-backends). The served-combination matrix
(:mod:`sparkpair_overlay.serve_matrix`, which re-exports every public name here) pairs that layout
with the o_proj backend and recipe.

Pure: no torch, no vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "DEEPGEMM_SOURCES", "FP8_BLOCK_KERNEL", "LINEAR_BACKENDS", "LinearOutcome", "Switches", "linear_outcome",
    "switches_from_env",
]

#: ``--linear-backend`` values vLLM 0.33.0 accepts (``vllm/config/kernel.py`` ``LinearBackend``).
LINEAR_BACKENDS: tuple[str, ...] = (
    "auto",
    "cutlass",
    "flashinfer_cutlass",
    "flashinfer_cutedsl",
    "flashinfer_trtllm",
    "flashinfer_cudnn",
    "flashinfer_b12x",
    "b12x",
    "marlin",
    "humming",
    "triton",
    "deep_gemm",
    "torch",
    "aiter",
    "machete",
    "fbgemm",
    "conch",
    "exllama",
    "emulation",
    "xpu",
    "xpu_woq",
)
#: The CUDA FP8 block-scaled kernel each value narrows vLLM 0.33's list to (the intersection of
#: ``_LINEAR_BACKEND_KERNEL_MAP[value]`` and ``_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]``); a value that is
#: not here has none, and vLLM falls back to its automatic choice for FP8 block layers.
FP8_BLOCK_KERNEL: Mapping[str, str] = {
    "flashinfer_cutlass": "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
    "deep_gemm": "DeepGemmFp8BlockScaledMMKernel",
    "cutlass": "CutlassFp8BlockScaledMMKernel",
    "b12x": "B12xFp8BlockScaledMMKernel",
    "marlin": "MarlinFP8ScaledMMLinearKernel",
    "humming": "HummingFP8ScaledMMLinearKernel",
    "triton": "TritonFp8BlockScaledMMKernel",
    "torch": "BlockWiseTorchFP8ScaledMMLinearKernel",
}
#: What each kernel's ``process_weights_after_loading`` leaves of ``wo_a`` (2-D kernels: by the
#: checkpoint's scale dtype, ``e8m0`` for DeepSeek-V4-Flash).
_TWO_D = {
    "CutlassFp8BlockScaledMMKernel": "ckpt",
    "TritonFp8BlockScaledMMKernel": "ckpt",
    "B12xFp8BlockScaledMMKernel": "fp32",
}
_REPACKS = ("MarlinFP8ScaledMMLinearKernel", "HummingFP8ScaledMMLinearKernel")
#: Kernels that do not run on family 120 (vLLM 0.33: FlashInfer's block-scale FP8 GEMM and the
#: block path of ``torch._scaled_mm`` are SM90-only), so vLLM cannot build the layer with them.
_NOT_ON_FAMILY_120 = {
    "FlashInferFp8DeepGEMMDynamicBlockScaledKernel": "FlashInfer's block-scale FP8 GEMM is SM90-only",
    "BlockWiseTorchFP8ScaledMMLinearKernel": "torch._scaled_mm's 1x128/128x128 block path is SM90-only",
}
#: DeepGEMM sources :func:`sparkpair_overlay.deepgemm.locate_deepgemm` reports.
DEEPGEMM_SOURCES = ("vendored", "external", "none", "broken")


@dataclass(frozen=True)
class Switches:
    """The vLLM switches that change DeepSeek-V4's o_proj operands on family 120.

    Attributes:
        linear_backend: the FP8 block layers' ``--linear-backend`` (one of :data:`LINEAR_BACKENDS`).
        use_deep_gemm: ``VLLM_USE_DEEP_GEMM`` (vLLM reads ``bool(int(v))``, default 1).
        use_deep_gemm_e8m0: ``VLLM_USE_DEEP_GEMM_E8M0`` (default 1).
        deepgemm: which DeepGEMM vLLM imports (:data:`DEEPGEMM_SOURCES`): ``vendored``
            (``vllm.third_party.deep_gemm``), ``external`` (a top-level ``deep_gemm`` shadows it),
            ``none``, ``broken`` (a top-level one whose import raises).
        ckpt_scale: the checkpoint's FP8 linear scale dtype, ``e8m0`` (DeepSeek-V4-Flash) or
            ``fp32`` (DeepSeek-V4-Flash-Base); only 2-D layouts depend on it.
        deepgemm_unsupported: why the running vLLM release reports DeepGEMM unsupported although
            ``VLLM_USE_DEEP_GEMM`` is on and a DeepGEMM is found, or ``None`` (vLLM 0.34: no ``nvcc``
            >= 12.9 for its JIT; :func:`sparkpair_overlay.deepgemm.deepgemm_unsupported`). vLLM then
            leaves DeepGEMM exactly as with ``VLLM_USE_DEEP_GEMM=0``.
    """

    linear_backend: str = "auto"
    use_deep_gemm: bool = True
    use_deep_gemm_e8m0: bool = True
    deepgemm: str = "vendored"
    ckpt_scale: str = "e8m0"
    deepgemm_unsupported: str | None = None

    @property
    def deepgemm_on(self) -> bool:
        """vLLM's ``is_deep_gemm_supported()`` on family 120: ``VLLM_USE_DEEP_GEMM``, a DeepGEMM found,
        and no release condition against it (:attr:`deepgemm_unsupported`)."""
        found = self.deepgemm in ("vendored", "external")
        return self.use_deep_gemm and found and self.deepgemm_unsupported is None

    def deepgemm_off_reason(self) -> str:
        """Why :attr:`deepgemm_on` is False (the switch or fact that turns DeepGEMM off), and the way back."""
        if not self.use_deep_gemm:
            return "VLLM_USE_DEEP_GEMM=0"
        if self.deepgemm not in ("vendored", "external"):
            return "no DeepGEMM is installed"
        return f"DeepGEMM unavailable ({self.deepgemm_unsupported})"

    def describe(self) -> str:
        """``--linear-backend auto, VLLM_USE_DEEP_GEMM=1, VLLM_USE_DEEP_GEMM_E8M0=1, DeepGEMM vendored``
        (and why vLLM reports DeepGEMM unsupported, when it does)."""
        off = f" (unsupported: {self.deepgemm_unsupported})" if self.deepgemm_unsupported else ""
        return (
            f"--linear-backend {self.linear_backend}, VLLM_USE_DEEP_GEMM={int(self.use_deep_gemm)}, "
            f"VLLM_USE_DEEP_GEMM_E8M0={int(self.use_deep_gemm_e8m0)}, DeepGEMM {self.deepgemm}{off}"
        )

    def to_json(self) -> dict[str, object]:
        """The switches as the probe file records them."""
        return {
            "linear_backend": self.linear_backend,
            "VLLM_USE_DEEP_GEMM": self.use_deep_gemm,
            "VLLM_USE_DEEP_GEMM_E8M0": self.use_deep_gemm_e8m0,
            "deepgemm": self.deepgemm,
            "ckpt_scale": self.ckpt_scale,
            "deepgemm_unsupported": self.deepgemm_unsupported,
        }


def switches_from_env(
    environ: Mapping[str, str],
    *,
    linear_backend: str = "auto",
    deepgemm: str = "vendored",
    ckpt_scale: str = "e8m0",
    deepgemm_unsupported: str | None = None,
) -> Switches:
    """:class:`Switches` from an environment as vLLM reads it (``bool(int(os.getenv(name, "1")))``);
    ``deepgemm_unsupported`` from :func:`sparkpair_overlay.deepgemm.deepgemm_unsupported`.

    Raises:
        ValueError: a ``VLLM_USE_DEEP_GEMM*`` value is not an integer, naming it (vLLM itself would
            raise at its first read).
    """

    def flag(name: str) -> bool:
        raw = environ.get(name, "1")
        try:
            return bool(int(raw))
        except ValueError:
            raise ValueError(
                f"{name}={raw!r} is not an integer; wanted 0 or 1 (vLLM parses it with int())"
            ) from None

    return Switches(
        linear_backend,
        flag("VLLM_USE_DEEP_GEMM"),
        flag("VLLM_USE_DEEP_GEMM_E8M0"),
        deepgemm,
        ckpt_scale,
        deepgemm_unsupported,
    )


@dataclass(frozen=True)
class LinearOutcome:
    """What vLLM 0.33 does with DeepSeek-V4's FP8 ``wo_a`` under some :class:`Switches` on family 120.

    Attributes:
        kernel: the FP8 block kernel class vLLM selects (name), or ``None`` when it is not fixed by
            the switches or vLLM cannot build the layer.
        weight: the :data:`~sparkpair_overlay.serve_matrix.WEIGHT_LAYOUTS` name the post-processing
            leaves, or ``None`` when refused.
        refusal: why no o_proj can be served with these switches (switch, value, what breaks, the way
            out), or ``None``.
    """

    kernel: str | None
    weight: str | None
    refusal: str | None = None


def linear_outcome(s: Switches) -> LinearOutcome:
    """The FP8 block kernel vLLM 0.33 picks for ``wo_a`` on family 120 and the layout it leaves.

    vLLM tries ``_POSSIBLE_FP8_BLOCK_KERNELS[CUDA]`` in order (narrowed by ``--linear-backend`` when
    the value maps to one of them): FlashInfer+DeepGEMM (SM90-only), DeepGEMM (needs
    ``is_deep_gemm_supported()``: family 120, ``VLLM_USE_DEEP_GEMM`` and an importable DeepGEMM),
    CUTLASS, b12x (needs the b12x package), Marlin, Humming, Triton, torch (SM90-only). Only
    DeepGEMM's kernel reshapes the ``is_bmm`` layer to ``[G, D, R]``
    (docs/reference/vllm-code-paths.md#linear-backends).
    """
    dg_on = s.deepgemm_on
    # the way back to DeepGEMM's kernel, by what turned it off
    back = (
        "a CUDA toolkit whose nvcc vLLM finds for DeepGEMM (CUDA_HOME)"
        if s.use_deep_gemm and s.deepgemm_unsupported is not None
        else "VLLM_USE_DEEP_GEMM=1"
    )
    if s.deepgemm == "broken":
        return LinearOutcome(
            None,
            None,
            (
                "a top-level deep_gemm package is installed but its import raises: vLLM's has_deep_gemm() "
                "skips it, yet its first DeepGEMM call re-raises the error; wanted it repaired or "
                "uninstalled "
                "(pip uninstall deep_gemm), so vLLM uses its vendored copy"
            ),
        )
    kernel = FP8_BLOCK_KERNEL.get(s.linear_backend)
    if kernel is None:  # auto, or a value with no FP8 block kernel: vLLM's automatic choice
        if dg_on:
            kernel = "DeepGemmFp8BlockScaledMMKernel"
        else:
            none = s.deepgemm == "none" and s.use_deep_gemm
            why = "no DeepGEMM installed" if none else s.deepgemm_off_reason()
            return LinearOutcome(
                None,
                None,
                (
                    f"{why} with --linear-backend {s.linear_backend}: vLLM then picks CUTLASS, b12x, Marlin "
                    "or "
                    "Triton for DeepSeek-V4's wo_a by what this device and install support, and Marlin "
                    "repacks "
                    "wo_a so that the o_proj einsum cannot read it; wanted --linear-backend triton, cutlass "
                    "or "
                    "b12x named explicitly (wo_a then stays in its 2-D checkpoint layout, which sparkpair's "
                    f"o_proj kernel serves), or {back}"
                ),
            )
    if kernel in _NOT_ON_FAMILY_120:
        return LinearOutcome(
            kernel,
            None,
            (
                f"--linear-backend {s.linear_backend} narrows vLLM's FP8 block kernels to {kernel}, and "
                f"{_NOT_ON_FAMILY_120[kernel]}, so vLLM cannot build DeepSeek-V4's FP8 linears on family "
                "120; "
                "wanted --linear-backend auto, deep_gemm, triton, cutlass or b12x"
            ),
        )
    if kernel == "DeepGemmFp8BlockScaledMMKernel":
        if not dg_on:
            why = s.deepgemm_off_reason()
            way = "VLLM_USE_DEEP_GEMM=1 (unset)" if back == "VLLM_USE_DEEP_GEMM=1" else back
            return LinearOutcome(
                kernel,
                None,
                (
                    f"--linear-backend deep_gemm with {why}: vLLM has no kernel left for the FP8 block "
                    f"linears and stops building the model; wanted {way}, or another "
                    "--linear-backend (triton, cutlass, b12x)"
                ),
            )
        if s.deepgemm == "external":
            return LinearOutcome(kernel, "external")
        return LinearOutcome(kernel, "w3-ue8m0-row" if s.use_deep_gemm_e8m0 else "w3-fp32-block")
    if kernel in _REPACKS:
        return LinearOutcome(
            kernel,
            "repacked",
            (
                f"--linear-backend {s.linear_backend} selects {kernel}, which repacks DeepSeek-V4's wo_a "
                "into "
                "its weight-only layout; the o_proj's grouped einsum (DeepGEMM's or sparkpair's) cannot read "
                "that layout and the model would fail at its first forward; wanted --linear-backend auto, "
                "deep_gemm, triton, cutlass or b12x"
            ),
        )
    form = _TWO_D[kernel]
    scale = s.ckpt_scale if form == "ckpt" else "fp32"
    return LinearOutcome(kernel, "w2-e8m0-block" if scale == "e8m0" else "w2-fp32-block")
