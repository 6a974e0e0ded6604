"""The DeepSeek-V4 serve paths vLLM 0.33 sends through DeepGEMM on family 120, and their candidates.

Facts (file and line in vLLM 0.33.0) are restated in ``docs/reference/deepgemm-sm120.md``. Shapes
are DeepSeek-V4-Flash per rank at ``tp`` (hidden 4096, 256 routed experts, top-6,
moe_intermediate 2048, o_groups 8, o_lora_rank 1024, index heads 64 x 128, hc_mult 4:
``docs/reference/deepgemm-sm120.md`` "Served shapes"); token counts: one decode token, the
profile's decode batch (``--max-num-seqs 6``, ``configs/profiles/deepseek-v4-flash.yaml``), a
speculative verify / DSpark draft step of 6 x (5 + 1) = 36 tokens, and a 2048-token prefill
chunk (the o_proj probe's largest T).

Discovery (``Candidate.discover``) runs anywhere: it asks the installed vLLM which backends it
offers for the path and asks :func:`sparkpair_overlay.deepgemm.locate_deepgemm` which DeepGEMM
vLLM will use and whether it exports the entry point. Running (``Candidate.run``) needs the GPU:
:mod:`sparkpair_overlay.probe.serve_runs`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import lru_cache

from ..deepgemm import DeepGemmLocation, exported_names, locate_deepgemm
from .choice import Candidate, ServePath, Shape, Switch, Trial

#: Decode batch of the DSv4 profile (``--max-num-seqs 6`` in configs/profiles/deepseek-v4-flash.yaml).
DECODE_BATCH = 6
#: Draft tokens per step of the DSpark profile (``speculation.num_speculative_tokens: 5``).
DSPARK_K = 5
#: Tokens of a full verify step and of a DSpark draft step, ``max_num_seqs * (k + 1)``: the
#: profile's largest CUDA-graph capture size (docs/reference/speculation.md).
VERIFY_TOKENS = DECODE_BATCH * (DSPARK_K + 1)
#: Prefill chunk probed (the largest T of the o_proj probe, sparkpair_overlay.probe.kernels).
PREFILL_TOKENS = 2048
#: DeepSeek-V4-Flash sizes (docs/reference/deepgemm-sm120.md "Served shapes").
HIDDEN, EXPERTS, TOPK, MOE_INTER, HEADS_IDX, HEAD_DIM_IDX, HC_MULT = 4096, 256, 6, 2048, 64, 128, 4
O_GROUPS, O_LORA = 8, 1024
#: Experts the MoE probe instantiates (the kernel's tiling does not depend on the expert count;
#: a full 256-expert layer would cost ~1 GiB of probe memory for no extra coverage).
PROBE_EXPERTS = 8

_DG_ON = (("VLLM_USE_DEEP_GEMM", "1"),)
_DG_OFF = (("VLLM_USE_DEEP_GEMM", "0"),)


def _tokens() -> tuple[tuple[str, int], ...]:
    return (
        ("decode", 1), ("decode-batch", DECODE_BATCH), ("verify", VERIFY_TOKENS), ("prefill", PREFILL_TOKENS)
    )


@lru_cache(maxsize=1)
def _located() -> DeepGemmLocation:
    return locate_deepgemm()


def deepgemm_entry(
    symbol: str, locate: Callable[[], DeepGemmLocation] | None = None
) -> Callable[[], str | None]:
    """Discovery of a DeepGEMM candidate: the DeepGEMM vLLM uses is found, imports, is enabled
    (``VLLM_USE_DEEP_GEMM``) and exports ``symbol``; otherwise the sentence why not.
    """

    def discover() -> str | None:
        loc = (locate or _located)()
        if loc.module is None:
            return loc.reason
        if not loc.enabled:
            return f"VLLM_USE_DEEP_GEMM=0: {loc.reason}"
        if not loc.importable:
            return loc.reason
        if symbol not in exported_names(loc):
            return f"{loc.module} {loc.version} ({loc.file}) does not export {symbol}"
        return None

    return discover


def linear_backend_offered(backend: str) -> Callable[[], str | None]:
    """Discovery of a ``--linear-backend`` candidate for FP8 block-scaled linears: vLLM 0.33 maps
    the value to a kernel class that is in its CUDA FP8 block-kernel list
    (``vllm/model_executor/kernels/linear/__init__.py`` ``_LINEAR_BACKEND_KERNEL_MAP``,
    ``_POSSIBLE_FP8_BLOCK_KERNELS``)."""

    def discover() -> str | None:
        try:
            lin = importlib.import_module("vllm.model_executor.kernels.linear")
            from vllm.platforms import PlatformEnum
        except Exception as exc:  # noqa: BLE001 - discovery reports, never raises
            return f"vLLM's linear kernels do not import: {type(exc).__name__}: {exc}"
        offered = getattr(lin, "_LINEAR_BACKEND_KERNEL_MAP", {}).get(backend, set())
        block = getattr(lin, "_POSSIBLE_FP8_BLOCK_KERNELS", {}).get(PlatformEnum.CUDA, [])
        hits = [k.__name__ for k in block if k in offered]
        if not hits:
            return f"--linear-backend {backend} has no FP8 block-scaled kernel for CUDA in this vLLM"
        return None

    return discover


def moe_backend_offered(backend: str) -> Callable[[], str | None]:
    """Discovery of a ``--moe-backend`` candidate for the MXFP4 MoE: vLLM 0.33's
    ``map_mxfp4_backend`` accepts it and its experts classes import
    (``vllm/model_executor/layers/fused_moe/oracle/mxfp4.py``)."""

    def discover() -> str | None:
        try:
            oracle = importlib.import_module("vllm.model_executor.layers.fused_moe.oracle.mxfp4")
            backends = oracle.map_mxfp4_backend(backend)
            for b in backends:
                oracle.backend_to_kernel_cls(b)
        except Exception as exc:  # noqa: BLE001
            return f"--moe-backend {backend} for MXFP4: {type(exc).__name__}: {exc}"
        return None

    return discover


def module_offered(module: str, what: str) -> Callable[[], str | None]:
    """Discovery of a candidate that needs ``module`` importable (``tilelang``)."""

    def discover() -> str | None:
        import importlib.util

        try:
            found = importlib.util.find_spec(module) is not None
        except Exception as exc:  # noqa: BLE001
            return f"{module}: {type(exc).__name__}: {exc}"
        return None if found else f"{what} needs the {module} package, which is not installed"

    return discover


def _lazy_run(name: str) -> Callable[[Shape], Trial]:
    """``serve_runs.<name>`` imported at call time (torch and vLLM only on the device)."""

    def run(shape: Shape) -> Trial:
        from . import serve_runs

        fn: Callable[[Shape], Trial] = getattr(serve_runs, name)
        return fn(shape)

    return run


def serve_paths(tp: int = 2) -> tuple[ServePath, ...]:
    """The registry: every DeepGEMM serve path of DSv4 on family 120, with its candidates.

    Args:
        tp: tensor-parallel size (per-rank sizes divide by it).

    Raises:
        ValueError: ``tp`` does not divide the sharded sizes (8 output groups, 2048 MoE
            intermediate).
    """
    if tp < 1 or O_GROUPS % tp or MOE_INTER % tp:
        raise ValueError(f"tp={tp}; wanted 1, 2, 4 or 8 (divides o_groups 8 and moe_intermediate 2048)")
    toks = _tokens()
    linear_shapes = tuple(
        Shape(f"{layer} {label}", t, (("n", n), ("k", k)))
        for layer, n, k in (("wo_b", HIDDEN, O_GROUPS * O_LORA // tp), ("wq_a", O_LORA, HIDDEN))
        for label, t in toks
    )
    linear = ServePath(
        "linear-fp8-block",
        "FP8 block-scaled linears: W8A8, 128x128 weight blocks, 1x128 activation groups",
        linear_shapes,
        5e-3,
        "pick another --linear-backend that the probe found correct (SPARKPAIR_SERVE_PATHS="
        "linear-fp8-block=<candidate>), or install a GB10-capable DeepGEMM as the top-level deep_gemm "
        "package, which vLLM prefers over its vendored copy",
        (
            Candidate(
                "linear-fp8-block",
                "deep_gemm",
                deepgemm_entry("fp8_gemm_nt"),
                _lazy_run("linear_deep_gemm"),
                Switch(args=("--linear-backend", "deep_gemm"), needs_env=_DG_ON),
                True,
            ),
            Candidate(
                "linear-fp8-block",
                "cutlass",
                linear_backend_offered("cutlass"),
                _lazy_run("linear_cutlass"),
                Switch(args=("--linear-backend", "cutlass")),
            ),
            Candidate(
                "linear-fp8-block",
                "b12x",
                linear_backend_offered("b12x"),
                _lazy_run("linear_b12x"),
                Switch(args=("--linear-backend", "b12x")),
            ),
            Candidate(
                "linear-fp8-block",
                "triton",
                linear_backend_offered("triton"),
                _lazy_run("linear_triton"),
                Switch(args=("--linear-backend", "triton")),
            ),
        ),
    )
    inter = MOE_INTER // tp
    moe_shapes = tuple(
        Shape(f"{gemm} {label}", t, (("n", n), ("k", k), ("experts", PROBE_EXPERTS), ("topk", TOPK)))
        for gemm, n, k in (("w13", 2 * inter, HIDDEN), ("w2", HIDDEN, inter))
        for label, t in toks
    )
    moe = ServePath(
        "moe-mxfp4",
        "MXFP4 routed experts: FP8 activations x MXFP4 weights, grouped contiguous GEMM (DeepGemmFP4Experts)",
        moe_shapes,
        5e-3,
        "set SPARKPAIR_SERVE_PATHS=moe-mxfp4=marlin (or b12x): vLLM's Marlin/b12x MXFP4 MoE, which this "
        "probe does not run on the device; or install a GB10-capable DeepGEMM as the top-level deep_gemm",
        (
            Candidate(
                "moe-mxfp4",
                "deep_gemm",
                deepgemm_entry("m_grouped_fp8_fp4_gemm_nt_contiguous"),
                _lazy_run("moe_deep_gemm"),
                Switch(args=("--moe-backend", "deep_gemm"), needs_env=_DG_ON),
                True,
            ),
            Candidate(
                "moe-mxfp4",
                "b12x",
                moe_backend_offered("b12x"),
                _lazy_run("moe_unprobed"),
                Switch(args=("--moe-backend", "b12x")),
            ),
            Candidate(
                "moe-mxfp4",
                "marlin",
                moe_backend_offered("marlin"),
                _lazy_run("moe_unprobed"),
                Switch(args=("--moe-backend", "marlin")),
            ),
        ),
    )
    mhc_shapes = tuple(
        Shape(
            f"hc_pre {label}",
            t,
            (
                ("k", HC_MULT * HIDDEN),
                ("n", (2 + HC_MULT) * HC_MULT),
                ("hidden", HIDDEN),
                ("hc_mult", HC_MULT),
            ),
        )
        for label, t in toks
    )
    mhc = ServePath(
        "mhc-prenorm",
        "mHC prenorm GEMM: out = x.float() @ fn.T and sqrsum = sum(x.float()^2) (tf32_hc_prenorm_gemm)",
        mhc_shapes,
        2e-3,
        "install a GB10-capable DeepGEMM as the top-level deep_gemm package; or vLLM's TileLang kernel "
        "(SPARKPAIR_SERVE_PATHS=mhc-prenorm=tilelang), whose VLLM_USE_DEEP_GEMM=0 also takes DeepGEMM from "
        "the "
        "FP8 linears and the MoE: it serves DeepSeek-V4 only with --linear-backend triton, cutlass or b12x "
        "(wo_a then stays 2-D, which sparkpair's o_proj kernel reads) and a non-DeepGEMM MoE backend",
        (
            Candidate(
                "mhc-prenorm",
                "deep_gemm",
                deepgemm_entry("tf32_hc_prenorm_gemm"),
                _lazy_run("mhc_deep_gemm"),
                Switch(needs_env=_DG_ON),
                True,
            ),
            Candidate(
                "mhc-prenorm",
                "tilelang",
                module_offered("tilelang", "vLLM's TileLang mHC kernel"),
                _lazy_run("mhc_tilelang"),
                Switch(env=_DG_OFF),
            ),
        ),
    )
    # The indexer's heads are not split by TP (every rank scores all 64). Decode scores against
    # the paged KV cache (fp8_fp4_paged_mqa_logits), prefill against gathered keys (fp8_fp4_mqa_logits).
    idx_shapes = tuple(
        Shape(
            f"logits {label}",
            t,
            (
                ("heads", HEADS_IDX),
                ("d", HEAD_DIM_IDX),
                ("kv", max(t, 4096)),
                ("paged", int(label != "prefill")),
            ),
        )
        for label, t in toks
    )
    indexer = ServePath(
        "indexer-mqa-logits",
        "DSv4 sparse indexer MQA logits, paged decode and prefill forms (vLLM 0.33: no other CUDA kernel)",
        idx_shapes,
        5e-3,
        "none inside vLLM 0.33 (the CUDA indexer requires DeepGEMM; VLLM_USE_DEEP_GEMM=0 does not change "
        "it): install a GB10-capable DeepGEMM as the top-level deep_gemm package",
        (
            Candidate(
                "indexer-mqa-logits",
                "deep_gemm",
                deepgemm_entry("fp8_fp4_mqa_logits"),
                _lazy_run("indexer_deep_gemm"),
                Switch(),
                True,
            ),
        ),
    )
    wo_a = ServePath(
        "wo_a-scale",
        "wo_a weight-scale transform at load: fp32 128x128 block scales -> per-row packed UE8M0 int32 "
        "(transform_sf_into_required_layout)",
        (Shape("wo_a load", 0, (("groups", O_GROUPS // tp), ("mn", O_LORA), ("k", HIDDEN))),),
        0.0,
        "pick another --linear-backend (triton, cutlass, b12x: wo_a then stays in its 2-D checkpoint layout, "
        "which sparkpair's o_proj kernel reads, and this transform never runs), or install a GB10-capable "
        "DeepGEMM as the top-level deep_gemm package",
        (
            Candidate(
                "wo_a-scale",
                "deep_gemm",
                deepgemm_entry("transform_sf_into_required_layout"),
                _lazy_run("wo_a_scale_deep_gemm"),
                Switch(needs_env=_DG_ON),
                True,
            ),
        ),
        needed_with=("linear-fp8-block", "deep_gemm"),
    )
    return (linear, moe, mhc, indexer, wo_a)
