"""The router GEMM's configs and dispatch tables, apart from its kernels and launchers.

Every compiled variant (:data:`ROUTER_GEMM_CONFIGS`, what the AOT gate compiles), the name of
each built from its parameters (:func:`config_name`), their validation, the split-K reduce
configs, and the tables that pick a config by weight dtype and token count M
(:func:`select_router_config`). Imports torch (for dtypes) but not Triton: the launchers live in
:mod:`sparkpair_overlay.kernels.router_gemm`.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Mapping

import torch

from ._common import KernelConfig, make_config

__all__ = [
    "CONFIGS_BY_NAME",
    "ROUTER_BF16_DISPATCH",
    "ROUTER_FP32_DISPATCH",
    "ROUTER_FP32_NO_PLANES_DISPATCH",
    "ROUTER_GEMM_CONFIGS",
    "ROUTER_REDUCE_CONFIG",
    "ROWS_MAX_K",
    "W_BF16",
    "W_BF16X3",
    "W_FP32_SPLIT",
    "config_name",
    "config_weight",
    "configs_for",
    "dot_config",
    "reduce_config",
    "rows_config",
    "select_router_config",
    "takes_k",
    "uses_tile_counters",
    "validate_config",
]

#: ``W_MODE`` of the dot kernel: the weight operand's form.
W_BF16, W_FP32_SPLIT, W_BF16X3 = 0, 1, 2


#: Largest K the rows kernel takes (its whole K is one tile); larger K uses a dot config.
ROWS_MAX_K = 4096

#: Name tag of each ``W_MODE``: the weight the config takes and how it is used.
_W_TAG: Mapping[object, str] = {W_BF16: "bf16", W_FP32_SPLIT: "fp32x3", W_BF16X3: "fp32w3"}


def dot_config(
    bm: int,
    bn: int,
    bk: int,
    split: int,
    warps: int,
    stages: int,
    w_mode: int,
    pdl: bool = False,
    one_tile: bool = False,
    hi_chunk: int = 1,
    reduce_block: int = 0,
) -> KernelConfig:
    """A ``_router_dot_kernel`` config named from its parameters (:func:`config_name`)."""
    meta: dict[str, int | bool] = dict(
        BLOCK_M=bm,
        BLOCK_N=bn,
        BLOCK_K=bk,
        SPLIT_K=split,
        W_MODE=w_mode,
        USE_PDL=pdl,
        ONE_TILE=one_tile,
        HI_CHUNK=hi_chunk,
        REDUCE_BLOCK=reduce_block,
    )
    return make_config(
        config_name("_router_dot_kernel", warps, stages, meta), "_router_dot_kernel", warps, stages, **meta
    )


def rows_config(bm: int, bn: int, warps: int, w_dtype: str, pdl: bool = True) -> KernelConfig:
    """A ``_router_rows_kernel`` config (whole K in one tile) named from its parameters.

    ``W_DTYPE`` is not a constexpr (the pointer type carries it); it picks the AOT signature.
    """
    meta: dict[str, int | bool | str] = dict(
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=ROWS_MAX_K, USE_PDL=pdl, W_DTYPE=w_dtype
    )
    return make_config(
        config_name("_router_rows_kernel", warps, 1, meta), "_router_rows_kernel", warps, 1, **meta
    )


def config_name(kernel: str, warps: int, stages: int, meta: Mapping[str, object]) -> str:
    """The name of a router config, made from every parameter that defines it.

    ``<weight>_<dot|rows>_m<BLOCK_M>_n<BLOCK_N>_k<BLOCK_K>[_s<SPLIT_K>]_w<num_warps>_st<num_stages>``
    then ``_h<HI_CHUNK>`` (when > 1), ``_1t`` (ONE_TILE), ``_pdl`` (USE_PDL), ``_r<REDUCE_BLOCK>``
    (when > 0). ``<weight>``: ``bf16``; ``fp32`` (rows kernel, fp32 weight); ``fp32w3`` (BF16x3 from
    the pre-split planes); ``fp32x3`` (BF16x3 split in registers). Example:
    ``bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32``.
    """
    dot = kernel == "_router_dot_kernel"
    tag = _W_TAG.get(meta["W_MODE"], "?") if dot else str(meta["W_DTYPE"])
    parts = [tag, "dot" if dot else "rows"]
    parts += [f"m{meta['BLOCK_M']}", f"n{meta['BLOCK_N']}", f"k{meta['BLOCK_K']}"]
    if dot:
        parts.append(f"s{meta['SPLIT_K']}")
    parts += [f"w{warps}", f"st{stages}"]
    if meta.get("HI_CHUNK", 1) != 1:
        parts.append(f"h{meta['HI_CHUNK']}")
    if meta.get("ONE_TILE"):
        parts.append("1t")
    if meta.get("USE_PDL"):
        parts.append("pdl")
    if meta.get("REDUCE_BLOCK"):
        parts.append(f"r{meta['REDUCE_BLOCK']}")
    return "_".join(parts)


#: Every router variant. Keys of ``meta``: BLOCK_M/N/K tile sizes (elements), SPLIT_K (K partitions,
#: >1 adds a fixed-order reduction), W_MODE (dot kernel: 0 bf16 weight, 1 fp32 weight split into
#: BF16x3 in registers, 2 fp32 weight pre-split once into a [3, N, K] bf16 tensor, see
#: :func:`bf16x3_split`), USE_PDL (programmatic dependent launch), ONE_TILE (one BLOCK_K step per
#: CTA: the weight tile is loaded before the PDL wait), W_DTYPE (rows kernel: weight dtype),
#: REDUCE_BLOCK (split-K reduction: 0 = in the same launch, the last CTA of each tile sums; > 0 =
#: a second, PDL-launched ``_router_reduce_kernel`` launch, 1 warp per REDUCE_BLOCK outputs; see
#: :func:`reduce_config`). W_DTYPE and REDUCE_BLOCK are launcher settings, not constexprs.
#: Each fits GB10's 101,376 B of shared memory and spills nothing on sm_121a with Triton 3.8
#: (checked by ``sparkpair kernels build``, tests/aot). The fp32-weight tiles of 32x64 and more
#: spilled 32-136 B there with 4 warps (255 registers; Triton 3.6's sm_121a builds, which upcast,
#: did not): they run 8 warps (172-240 registers, no spill), the no-planes 64x64 tile BLOCK_K 32
#: (174-178; 8 warps still spilled 16-40 B).
# bf16 weight, M <= 4: whole-K GEMV rows on the CUDA cores (no split, no reduction), PDL.
BF16_ROWS = rows_config(1, 2, 8, "bf16")
# bf16 weight, M <= 128: one-tile split-K on the tensor cores (16 K splits of 256, or 8 of 512),
# PDL with the weight tile loaded before the wait; the partials are summed in split order by a
# second, PDL-launched kernel (1 warp per 32 outputs): no fence, counter or dependent reads in the
# GEMM's tail.
BF16_DOT_M16_N64 = dot_config(16, 64, 256, 16, 4, 1, W_BF16, True, True, reduce_block=32)
BF16_DOT_M16_N128 = dot_config(16, 128, 256, 16, 4, 1, W_BF16, True, True, reduce_block=32)
BF16_DOT_M32_N64 = dot_config(32, 64, 512, 8, 4, 1, W_BF16, True, True, reduce_block=32)
# fp32 weight, M = 1: whole-K fp32 GEMV rows (exact fp32 products), PDL.
FP32_ROWS = rows_config(1, 2, 8, "fp32")
# fp32 weight: BF16x3 from the pre-split [3, N, K] bf16 weight (bf16x3_split); M <= 256 one tile
# per CTA, partials summed by the second, PDL-launched kernel; larger M multi-tile.
FP32W3_M16_N32 = dot_config(16, 32, 256, 16, 4, 1, W_BF16X3, True, True, reduce_block=32)
FP32W3_M32_N16 = dot_config(32, 16, 128, 32, 2, 1, W_BF16X3, True, True, reduce_block=32)
FP32W3_M32_N64 = dot_config(32, 64, 256, 16, 8, 1, W_BF16X3, True, True, reduce_block=32)
FP32W3_M64_N64 = dot_config(64, 64, 64, 4, 8, 2, W_BF16X3)
FP32W3_M128_N64 = dot_config(128, 64, 32, 2, 8, 3, W_BF16X3, hi_chunk=16)
# fp32 weight without planes: BF16x3 split in registers (tile-counter fixup).
FP32X3_M16_N16 = dot_config(16, 16, 128, 16, 4, 2, W_FP32_SPLIT)
FP32X3_M64_N64 = dot_config(64, 64, 32, 2, 4, 3, W_FP32_SPLIT)

ROUTER_GEMM_CONFIGS: tuple[KernelConfig, ...] = (
    BF16_ROWS,
    BF16_DOT_M16_N64,
    BF16_DOT_M16_N128,
    BF16_DOT_M32_N64,
    # References the benchmark times against the dispatch (no table uses them): one tile with both
    # reductions (the last CTA of each tile with tile counters, and the second launch), and a
    # tile without PDL.
    dot_config(16, 32, 512, 8, 4, 1, W_BF16, True, True),
    dot_config(16, 32, 512, 8, 4, 1, W_BF16, True, True, reduce_block=32),
    dot_config(16, 16, 512, 8, 4, 1, W_BF16),
    FP32_ROWS,
    FP32W3_M16_N32,
    FP32W3_M32_N16,
    FP32W3_M32_N64,
    FP32W3_M64_N64,
    FP32W3_M128_N64,
    # Reference pair (no table uses it): one tile, tile-counter fixup vs the second launch.
    dot_config(32, 16, 256, 16, 4, 1, W_BF16X3, True, True),
    dot_config(32, 16, 256, 16, 4, 1, W_BF16X3, True, True, reduce_block=32),
    FP32X3_M16_N16,
    FP32X3_M64_N64,
)


def _is_int(v: object) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


#: Keys a config's ``meta`` must / may hold, per kernel (see ROUTER_GEMM_CONFIGS' comment).
_META_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "_router_dot_kernel": (
        frozenset({"BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "W_MODE"}),
        frozenset({"USE_PDL", "ONE_TILE", "HI_CHUNK", "REDUCE_BLOCK"}),
    ),
    "_router_rows_kernel": (frozenset({"BLOCK_M", "BLOCK_N", "BLOCK_K", "W_DTYPE"}), frozenset({"USE_PDL"})),
}


def validate_config(cfg: KernelConfig) -> None:
    """Check a router config before it reaches Triton (hand-built configs in benchmarks, tests).

    Raises:
        ValueError: naming the config, the key, the value seen and the values wanted: a kernel
            other than the dot / rows kernels, a missing or unknown meta key, a tile size that is
            not a power of two (>= 16 on the dot kernel's tensor-core tiles), SPLIT_K < 1, W_MODE
            not 0/1/2, REDUCE_BLOCK not 0 or a power of two >= 32, W_DTYPE not bf16/fp32, a
            non-bool flag, num_warps not a power of two in 1..32, num_stages < 1.
    """
    if not isinstance(cfg, KernelConfig) or cfg.kernel not in _META_KEYS:
        raise ValueError(f"router_gemm: config must be a router KernelConfig or its name; got {cfg!r}")
    meta = cfg.constexprs()
    required, optional = _META_KEYS[cfg.kernel]
    missing, unknown = sorted(required - meta.keys()), sorted(meta.keys() - required - optional)
    if missing or unknown:
        raise ValueError(
            f"router_gemm: config {cfg.name}: missing keys {missing}, unknown keys {unknown}; a "
            f"{cfg.kernel} config takes {sorted(required)} and optionally {sorted(optional)}"
        )

    def bad(key: str, want: str) -> ValueError:
        return ValueError(f"router_gemm: config {cfg.name}: {key} = {meta[key]!r}; want {want}")

    def pow2(v: object, lo: int) -> bool:
        return _is_int(v) and v >= lo and v & (v - 1) == 0  # type: ignore[operator]

    dot = cfg.kernel == "_router_dot_kernel"
    for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
        lo = 16 if dot else 1
        if not pow2(meta[key], lo):
            raise bad(key, f"a power of two >= {lo}")
    for key in ("USE_PDL", "ONE_TILE"):
        if key in meta and not isinstance(meta[key], bool):
            raise bad(key, "True or False")
    if dot:
        if not _is_int(meta["SPLIT_K"]) or meta["SPLIT_K"] < 1:
            raise bad("SPLIT_K", "an int >= 1")
        if meta["W_MODE"] not in (W_BF16, W_FP32_SPLIT, W_BF16X3) or isinstance(meta["W_MODE"], bool):
            raise bad("W_MODE", "0 (bf16), 1 (fp32 split in registers) or 2 (BF16x3 planes)")
        if "REDUCE_BLOCK" in meta and not (meta["REDUCE_BLOCK"] == 0 or pow2(meta["REDUCE_BLOCK"], 32)):
            raise bad("REDUCE_BLOCK", "0 or a power of two >= 32")
        if "HI_CHUNK" in meta and not (_is_int(meta["HI_CHUNK"]) and meta["HI_CHUNK"] >= 1):
            raise bad("HI_CHUNK", "an int >= 1")
    elif meta["W_DTYPE"] not in ("bf16", "fp32"):
        raise bad("W_DTYPE", "'bf16' or 'fp32'")
    if not pow2(cfg.num_warps, 1) or cfg.num_warps > 32:
        raise ValueError(
            f"router_gemm: config {cfg.name}: num_warps = {cfg.num_warps!r}; want 1, 2, 4, 8, 16 or 32"
        )
    if not _is_int(cfg.num_stages) or cfg.num_stages < 1:
        raise ValueError(f"router_gemm: config {cfg.name}: num_stages = {cfg.num_stages!r}; want an int >= 1")


#: The second-stage reduce kernel's config for dot configs with REDUCE_BLOCK 0 (used when no tile
#: counters are available, or with ``fixup=False``); elementwise, no shared memory.
ROUTER_REDUCE_CONFIG: KernelConfig = make_config("reduce", "_router_reduce_kernel", 4, 1, BLOCK=1024)


def uses_tile_counters(cfg: KernelConfig) -> bool:
    """Whether split-K dot config ``cfg`` sums its partials in its own launch (the last CTA of each
    tile, tile counters; REDUCE_BLOCK 0) when counters are available, rather than always in the
    second ``_router_reduce_kernel`` launch. The launcher and the AOT gate both follow this."""
    meta = cfg.constexprs()
    return cfg.kernel == "_router_dot_kernel" and meta["SPLIT_K"] > 1 and not meta.get("REDUCE_BLOCK", 0)


def reduce_config(cfg: KernelConfig, pdl: bool | None = None) -> KernelConfig:
    """The ``_router_reduce_kernel`` launch that sums split-K dot config ``cfg``'s partials.

    BLOCK = ``cfg``'s REDUCE_BLOCK with 1 warp, or :data:`ROUTER_REDUCE_CONFIG`'s when that is 0;
    SPLIT_K = ``cfg``'s; USE_PDL = ``pdl`` if given, else ``cfg``'s USE_PDL (the reduce kernel
    then waits in ``gdc_wait`` for the partials). Raises ValueError for a config without split-K.
    """
    if not isinstance(cfg, KernelConfig):
        raise ValueError(f"reduce_config: cfg must be a router KernelConfig; got {cfg!r}")
    if pdl is not None and not isinstance(pdl, bool):
        raise ValueError(f"reduce_config: pdl must be None, True or False; got {pdl!r}")
    meta = cfg.constexprs()
    if cfg.kernel != "_router_dot_kernel" or meta.get("SPLIT_K", 1) == 1:
        raise ValueError(f"reduce_config: {cfg.name} has no split-K partials to reduce")
    use_pdl = bool(meta.get("USE_PDL", False) if pdl is None else pdl)
    block = meta.get("REDUCE_BLOCK", 0)
    warps = 1 if block else ROUTER_REDUCE_CONFIG.num_warps
    block = block or ROUTER_REDUCE_CONFIG["BLOCK"]
    name = f"reduce_s{meta['SPLIT_K']}_b{block}_w{warps}" + ("_pdl" if use_pdl else "")
    return make_config(
        name, "_router_reduce_kernel", warps, 1, BLOCK=block, SPLIT_K=meta["SPLIT_K"], USE_PDL=use_pdl
    )


@functools.lru_cache(maxsize=256)
def _reduce_config_for(cfg: KernelConfig, pdl: bool) -> KernelConfig:
    """:func:`reduce_config`, built once per (config, PDL) instead of on every launch."""
    return reduce_config(cfg, pdl=pdl)


CONFIGS_BY_NAME: Mapping[str, KernelConfig] = {c.name: c for c in ROUTER_GEMM_CONFIGS}
if len(CONFIGS_BY_NAME) != len(ROUTER_GEMM_CONFIGS):  # names come from parameters: equal names = twins
    raise RuntimeError("router_gemm: two configs in ROUTER_GEMM_CONFIGS have the same parameters")
for _c in ROUTER_GEMM_CONFIGS:  # the registry passes its own check (launches skip it for these)
    validate_config(_c)

#: Dispatch for a bf16 weight: ``(max_M, config)`` in increasing max_M; beyond the last entry,
#: cuBLAS ``torch.mm(x, W.T, out_dtype=fp32)``. Source: H200 sweep, 2026-11-30, the rows of
#: benchmarks/results/router_gemm.csv whose git_sha is ``wip-r32a`` (bench_router_gemm.py --cold,
#: CUDA-graph replay p50, warm L2; they name the configs by their earlier names, mapped in
#: docs/kernels.md "Config names"): M=1/2/4 BF16_ROWS 1.50/1.82/2.42 us; M=8/16 BF16_DOT_M16_N64
#: 2.10/2.28; M=32/64
#: BF16_DOT_M16_N128 2.50/3.18; M=128 BF16_DOT_M32_N64 4.06; cuBLAS 5.4-6.4 us up to M=128 and
#: faster from M=256 (6.57 us; the H200 rows at M = 512 / 8192 of router_gemm.csv: 7.30, 27.8).
ROUTER_BF16_DISPATCH: tuple[tuple[int, KernelConfig], ...] = (
    (4, BF16_ROWS),
    (16, BF16_DOT_M16_N64),
    (64, BF16_DOT_M16_N128),
    (128, BF16_DOT_M32_N64),
)

#: Dispatch for an fp32 weight: ``(max_M, config)``; beyond the last entry, the last config.
#: Source: the same sweep: M=1 FP32_ROWS 2.05 us; M=2/4/8/16 FP32W3_M16_N32 2.56/2.72/2.73/2.82;
#: M=32 FP32W3_M32_N16 3.64; M=64/128/256 FP32W3_M32_N64 4.37/7.86/14.33 (true-fp32 F.linear: 5.86,
#: 12.2, 12.4, 17.6, 17.7, 14.1, 14.8, 19.7, 27.4). Larger M, the H200 sweep of M = 512 .. 8192 in
#: router_gemm.csv: M=512..1024
#: FP32W3_M64_N64 up to 25.7 us; M=2048..8192 FP32W3_M128_N64 34.4/53.7/106 us (F.linear 68.9,
#: 128, 233, 448 us). Max rel. error vs fp64 <= 6.4e-7. (cuBLAS on the same three planes is faster
#: at M=2048 and 8192, not at 4096, but from M=1024 its 4096-long MMA chains give 4.8-6.3e-6,
#: above the 2e-6 bar.)
ROUTER_FP32_DISPATCH: tuple[tuple[int, KernelConfig], ...] = (
    (1, FP32_ROWS),
    (16, FP32W3_M16_N32),
    (32, FP32W3_M32_N16),
    (256, FP32W3_M32_N64),
    (1024, FP32W3_M64_N64),
    (1 << 62, FP32W3_M128_N64),
)

#: fp32 weight without its pre-split planes (the caller passed none): the same dispatch with
#: configs that split each weight tile in registers. Source: router_gemm.csv, H200: FP32X3_M16_N16
#: M=16/128 7.3/32.8 us; FP32X3_M64_N64 M=128/256/4096 48.2/48.3/115 us.
ROUTER_FP32_NO_PLANES_DISPATCH: tuple[tuple[int, KernelConfig], ...] = (
    (128, FP32X3_M16_N16),
    (1 << 62, FP32X3_M64_N64),
)


def _check_k(who: str, k: object) -> None:
    if k is not None and (not _is_int(k) or k < 1):  # type: ignore[operator]
        raise ValueError(f"{who}: k must be None or an int >= 1; got {k!r}")


def takes_k(cfg: KernelConfig, k: int | None) -> bool:
    """Whether ``cfg`` serves this K (the rows kernel holds all of K in one tile)."""
    return k is None or cfg.kernel != "_router_rows_kernel" or k <= cfg["BLOCK_K"]


def select_router_config(
    m: int, weight_dtype: torch.dtype, k: int | None = None, presplit: bool = True
) -> KernelConfig | None:
    """The config :func:`router_gemm` uses for ``m`` rows (``None``: cuBLAS).

    Args:
        m: tokens (rows of x).
        weight_dtype: ``torch.bfloat16`` or ``torch.float32``.
        k: hidden size; a dispatch entry whose kernel cannot take this K yields to the next entry.
        presplit: fp32 only: whether the caller has the weight's BF16x3 planes
            (:func:`bf16x3_split`); without them the fp32 configs split each tile in registers.
    Raises:
        ValueError: ``m`` not an int >= 0, ``k`` not None or an int >= 1, or a weight dtype other
            than bf16 / fp32.
    """
    if weight_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(
            f"select_router_config: weight dtype must be bfloat16 or float32; got {weight_dtype}"
        )
    if not _is_int(m) or m < 0:
        raise ValueError(f"select_router_config: m must be an int >= 0; got {m!r}")
    _check_k("select_router_config", k)
    if weight_dtype == torch.float32:
        table = ROUTER_FP32_DISPATCH if presplit else ROUTER_FP32_NO_PLANES_DISPATCH
    else:
        table = ROUTER_BF16_DISPATCH
    for i, (max_m, _cfg) in enumerate(table):
        if m <= max_m:
            for _m, cfg in table[i:]:
                if takes_k(cfg, k):
                    return cfg
            return None
    if weight_dtype == torch.float32:
        return table[-1][1]
    return None


def config_weight(cfg: KernelConfig) -> str:
    """What weight a config takes: ``"bf16"`` or ``"fp32"``."""
    meta = cfg.constexprs()
    if cfg.kernel == "_router_dot_kernel":
        return ("bf16", "fp32", "fp32")[int(meta["W_MODE"])]
    return str(meta["W_DTYPE"])


def configs_for(weight_dtype: torch.dtype, k: int | None = None) -> list[KernelConfig]:
    """Every :data:`ROUTER_GEMM_CONFIGS` entry that takes a weight of this dtype (and this K);
    tests and benchmarks sweep these."""
    if weight_dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"configs_for: weight dtype must be bfloat16 or float32; got {weight_dtype!r}")
    _check_k("configs_for", k)
    want = "fp32" if weight_dtype == torch.float32 else "bf16"
    return [c for c in ROUTER_GEMM_CONFIGS if config_weight(c) == want and takes_k(c, k)]
