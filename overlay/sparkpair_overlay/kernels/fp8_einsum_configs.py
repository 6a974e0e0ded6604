"""The ``fp8_einsum`` configs of every path and the plan tables in force in this process.

A config (:class:`sparkpair_overlay.kernels._common.KernelConfig`) names the jitted entry it
launches (``kernel``, one per path: :mod:`sparkpair_overlay.kernels.fp8_einsum_sm120`) and that
entry's ``tl.constexpr`` tile parameters. Which config serves ``T`` tokens is a table lookup:
:func:`select_fp8_einsum_config` reads the table in force (:func:`active_plan`), GB10's built-in
default (:mod:`sparkpair_overlay.kernels.fp8_einsum_plan`) until the kernel plan installs the
probe's per-range choice (:func:`use_plan`). Pure Python (no torch, no Triton at import).
"""

from __future__ import annotations

from ._common import KernelConfig, cdiv, make_config
from .fp8_einsum_plan import (
    FP8_EINSUM_PLAN_FP32,
    FP8_EINSUM_PLAN_UE8M0,
    UNBOUNDED,
    PlanTable,
    default_plan,
    plan_config_name,
    plan_problem,
)
from .fp8_einsum_sm120 import decode, mx_decode, mx_tile, split_sum, tile

__all__ = [
    "DECODE_TILE_MAX_T",
    "FP8_EINSUM_CONFIGS",
    "FP8_EINSUM_DECODE_CONFIGS",
    "FP8_EINSUM_MX_CONFIGS",
    "FP8_EINSUM_PLAN_CANDIDATES",
    "FP8_EINSUM_SUM_CONFIGS",
    "FP8_EINSUM_TILE_CONFIGS",
    "MX_KERNELS",
    "SCALE_BLOCK",
    "SPLIT_TILE_MAX_T",
    "SUM_BLOCK",
    "active_plan",
    "candidate_range",
    "config_by_name",
    "kernel_path",
    "select_fp8_einsum_config",
    "split_sum_config",
    "use_plan",
]

SCALE_BLOCK = 128  # K elements per scale, both recipes (docs/reference/vllm-code-paths.md#o_proj-scales)
#: ``KernelConfig.kernel`` of the block-scaled configs (``tl.dot_scaled``).
MX_KERNELS = (mx_tile.KERNEL, mx_decode.KERNEL)


def _cfg(
    name: str,
    bt: int,
    bd: int,
    warps: int,
    stages: int,
    group_t: int = 8,
    split_r: int = 1,
    row_stages: int = 2,
    share_check: bool = False,
) -> KernelConfig:
    if SCALE_BLOCK % bd != 0:
        # The kernel reads one weight scale per tile and K block for 128x128 block scales.
        raise ValueError(f"fp8_einsum config {name}: BLOCK_D={bd} must divide {SCALE_BLOCK}")
    return make_config(
        name,
        tile.KERNEL,
        warps,
        stages,
        BLOCK_T=bt,
        BLOCK_D=bd,
        BLOCK_R=SCALE_BLOCK,
        GROUP_T=group_t,
        SPLIT_R=split_r,
        ROW_STAGES=row_stages,
        SHARE_CHECK=share_check,
    )


#: Every tile-loop config (``_fp8_einsum_tile_kernel``; tile sizes in elements; BLOCK_R is the
#: 128-wide scale block). Shared memory per config is ``(BLOCK_T + BLOCK_D) * 128 B * num_stages`` plus
#: Triton's scratch; each fits GB10's 101,376 B and spills nothing on sm_121a with Triton 3.8
#: (checked by ``sparkpair kernels build`` and tests/aot: the 4-warp 128x64 and 64x128-with-share-
#: check tiles of 4 stages spilled 8-16 B there on per-row scales, so they have 8 warps).
FP8_EINSUM_TILE_CONFIGS: tuple[KernelConfig, ...] = (
    # decode, T <= 128: K split in SPLIT_R parts (one launch; the last CTA of a tile sums the fp32
    # partials in split order) so 256-1024 CTAs each stream 1/SPLIT_R of the weight rows.
    _cfg("t16_d32_r4_s4", 16, 32, 4, 4, split_r=4),
    _cfg("t16_d64_r4_s4", 16, 64, 4, 4, split_r=4),
    _cfg("t16_d64_r8_s3", 16, 64, 4, 3, split_r=8),
    _cfg("t16_d128_r4_s4", 16, 128, 4, 4, split_r=4),
    _cfg("t32_d32_r4_s4", 32, 32, 4, 4, split_r=4),
    _cfg("t32_d64_r2_s4", 32, 64, 4, 4, split_r=2),
    _cfg("t32_d64_r4_s4", 32, 64, 4, 4, split_r=4),
    _cfg("t64_d64_r2_s4", 64, 64, 4, 4, split_r=2),
    # 3 stages (32,768 B, 142-176 registers on sm_121a): the plan at T = 17..64; 1-2 % faster than
    # 4 stages on the 48-SM proxy (gb10-proxy run 4).
    _cfg("t64_d64_r2_s3", 64, 64, 4, 3, split_r=2),
    # no split: mid T and prefill.
    _cfg("t16_d32_s6", 16, 32, 4, 6),
    _cfg("t64_d64_s4", 64, 64, 4, 4),
    _cfg("t64_d128_s4", 64, 128, 4, 4),
    _cfg("t128_d64_s4_w8", 128, 64, 8, 4),
    _cfg("t128_d128_s3_w8", 128, 128, 8, 3),
    # prefill, 8 warps: with one scale per tile and K block (block weight scales) the promotion is
    # one FMA per element.
    _cfg("t128_d64_s3_w8", 128, 64, 8, 3),
    # prefill, per-row weight scales: each tile checks once whether its rows share their scales
    # (DeepGEMM's layout on sm_10x/sm_12x) and then takes the one-scale loop; else the per-row
    # loop, pipelined 2 deep.
    _cfg("t64_d128_s4_w8_bc", 64, 128, 8, 4, share_check=True),
)


def _dcfg(name: str, bt: int, bd: int, kb_per: int, warps: int, pdl: bool = True) -> KernelConfig:
    """A decode config (``_fp8_einsum_decode_kernel``): a BLOCK_D x BLOCK_T tile over ``kb_per`` K
    blocks per CTA.

    SPLIT_R is the K splits at the served R = 4096 (32 K blocks); the launcher recomputes it
    from R, so the AOT build (served shapes) and the runtime use the same constexprs.
    """
    if SCALE_BLOCK % bd != 0:
        raise ValueError(f"fp8_einsum config {name}: BLOCK_D={bd} must divide {SCALE_BLOCK}")
    return make_config(
        name,
        decode.KERNEL,
        warps,
        1,
        BLOCK_T=bt,
        BLOCK_D=bd,
        BLOCK_R=SCALE_BLOCK,
        SPLIT_R=cdiv(_SERVED_KB, kb_per),
        KB_PER=kb_per,
        USE_PDL=pdl,
    )


# K blocks of the served o_proj (R = 4096, docs/reference/vllm-code-paths.md#dsv4-shapes)
_SERVED_R = 4096
_SERVED_KB = _SERVED_R // SCALE_BLOCK

#: Decode configs (``_fp8_einsum_decode_kernel``). Names:
#: dec_t<BLOCK_T>_d<BLOCK_D>_k<KB_PER>_w<warps>[_nopdl]. Grid on the served TP=2 shape (G=4,
#: D=1024, R=4096, one T tile): (1024/BLOCK_D, 4, 32/KB_PER) CTAs
#: (TP=1, G=8: twice as many), each holding BLOCK_D * KB_PER * 128 weight bytes in flight; then
#: (D/256, 4, T) CTAs of the split sum. sm_121a builds with Triton 3.8 (the AOT gate; registers
#: over the scale layouts / shared bytes, no spill): dec_t16_d128_k4_w8 (GB10's plan, T <= 16) 256
#: CTAs of 64 KB, 100-122 x 256 threads / 67,584 B, one per GB10 SM by shared memory, 5.3 waves on
#: 48 SMs; dec_t16_d64_k4_w4 512 CTAs of 32 KB, 102-108 x 128 / 34,816 B; dec_t32_d64_k4_w4 239-255
#: x 128 / 34,816 B; dec_t32_d128_k4_w8 189-192 x 256 / 69,632 B; dec_t16_d64_k2_w4 (16 K splits)
#: 56-62 x 128 / 18,432 B; dec_t16_d128_k2_w8 (16 K splits, the fp32 plan at T <= 8) 57-63 x 256 /
#: 34,816 B. (The sweep of gb10-proxy run 4 also timed dec_t16_d64_k4_w8, dec_t32_d128_k2_w8 and
#: dec_t32_d64_k4_w8, and the tile loops t64_d64_r4_s4, t64_d32_r2_s4 and t64_d32_r4_s4; none beat
#: the plan anywhere: dropped.) (dec_t32_d64_k2_w4, 104-106 registers with Triton's bundled CUDA 13.3
#: ptxas, spilled 8 B with the CUDA 12.9 ptxas the docker stand-in assembles with: dropped.) The
#: plan's choice among them: FP8_EINSUM_PLAN_UE8M0.
FP8_EINSUM_DECODE_CONFIGS: tuple[KernelConfig, ...] = (
    _dcfg("dec_t16_d64_k4_w4", 16, 64, 4, 4),
    _dcfg("dec_t16_d128_k4_w8", 16, 128, 4, 8),
    _dcfg("dec_t32_d128_k4_w8", 32, 128, 4, 8),
    _dcfg("dec_t32_d64_k4_w4", 32, 64, 4, 4),
    _dcfg("dec_t16_d64_k2_w4", 16, 64, 2, 4),
    _dcfg("dec_t16_d128_k2_w8", 16, 128, 2, 8),
    # Reference (no plan uses it): the same tile launched without PDL, split sum included.
    _dcfg("dec_t16_d64_k4_w4_nopdl", 16, 64, 4, 4, pdl=False),
)


def _mxcfg(
    name: str,
    bt: int,
    bd: int,
    bk: int,
    warps: int,
    stages: int,
    *,
    promote: bool = True,
    decode: bool = False,
    group_t: int = 8,
) -> KernelConfig:
    """A block-scaled config: BLOCK_T x BLOCK_D tiles over ``bk``-wide K tiles. ``decode``: the
    decode tile (``_fp8_einsum_mx_decode_kernel``: tokens on the MMA's N side, one K tile per CTA,
    launched with PDL; SPLIT_R is the K splits at the served R = 4096, recomputed by the launcher
    from R); else the tile loop (``_fp8_einsum_mx_tile_kernel``), ``promote`` choosing per-K-tile
    promotion or MMA accumulation."""
    if 512 % bk != 0 or bk % SCALE_BLOCK != 0:
        raise ValueError(f"fp8_einsum config {name}: BLOCK_K={bk} must be 128, 256 or 512")
    if decode:
        return make_config(
            name, mx_decode.KERNEL, warps, stages,
            BLOCK_T=bt, BLOCK_D=bd, BLOCK_K=bk, SPLIT_R=_SERVED_R // bk, USE_PDL=True,
        )  # fmt: skip
    return make_config(
        name, mx_tile.KERNEL, warps, stages,
        BLOCK_T=bt, BLOCK_D=bd, BLOCK_K=bk, GROUP_T=group_t, SPLIT_R=1, PROMOTE=promote,
    )  # fmt: skip


#: Block-scaled configs (``_fp8_einsum_mx_tile_kernel``, ``_fp8_einsum_mx_decode_kernel``). Names:
#: mx_t<BLOCK_T>_d<BLOCK_D>_k<BLOCK_K>_w<warps>_s<stages>[_acc: MMA-accumulated over the whole K]
#: (the tile loop), mxd_... (the decode
#: tile). sm_121a builds with Triton 3.8 (the AOT gate; packed-int32 per-row scales), registers /
#: shared bytes, every one ``mma.sync ... kind::mxf8f6f4.block_scale ... ue8m0`` with no spill:
#: mx_t128_d64_k128_w8_s4 190 / 83,200 (one 128x64 tile of 256 threads; the promoted 128x128 and
#: 4-warp tiles hit 255 registers and spilled); mx_t128_d128_k128_w8_s3_acc 175 / 73,728 (a
#: promoted 128x128 tile keeps the MMA's result beside the accumulator: 255 registers, spilled);
#: mx_t64_d64_k128_w4_s4 187 / 55,296 and its _acc 145; mxd_t16_d64_k512_w4 157 / 36,864;
#: mxd_t16_d128_k512_w8 158 / 69,632. On sm_90 (the H200 proxy) Triton decomposes dot_scaled
#: (upcast to bf16, scaled, bf16 wgmma): correct, not a speed proxy.
FP8_EINSUM_MX_CONFIGS: tuple[KernelConfig, ...] = (
    _mxcfg("mx_t128_d64_k128_w8_s4", 128, 64, 128, 8, 4),
    _mxcfg("mx_t128_d128_k128_w8_s3_acc", 128, 128, 128, 8, 3, promote=False),
    _mxcfg("mx_t64_d64_k128_w4_s4", 64, 64, 128, 4, 4),
    _mxcfg("mx_t64_d64_k128_w4_s4_acc", 64, 64, 128, 4, 4, promote=False),
    _mxcfg("mxd_t16_d64_k512_w4", 16, 64, 512, 4, 1, decode=True),
    _mxcfg("mxd_t16_d128_k512_w8", 16, 128, 512, 8, 1, decode=True),
    _mxcfg("mxd_t32_d128_k512_w8", 32, 128, 512, 8, 1, decode=True),
)
#: Every config of every path but the split sums, in definition order.
FP8_EINSUM_CONFIGS: tuple[KernelConfig, ...] = (
    FP8_EINSUM_TILE_CONFIGS + FP8_EINSUM_DECODE_CONFIGS + FP8_EINSUM_MX_CONFIGS
)

#: Elements of D per program of the split sum: 4 warps, 2 outputs per thread; grid
#: (D / SUM_BLOCK, G, T) = 16 x T programs on the served TP=2 shape. The sum is latency-bound (a
#: few KB per program, read once from L2), so more, smaller programs finish it sooner: the
#: ``sum<SUM_BLOCK>`` rows of benchmarks/results/fp8_einsum.csv (H200, cold p50 us through the public
#: dispatch, the same bits at every value): 256 against the previous 1024 at T = 16 / 32 / 36, fp32
#: 6.38-6.60 / 8.55-8.68 / 8.84-8.98 against 7.73-7.87 / 9.67-9.76 / 11.19-11.23, int32-bcast
#: 7.17-7.33 / 8.25-8.44 / 8.58-9.09 against 7.57-7.67 / 9.27-9.34 / 10.50-10.80; 128 and 64 no
#: better overall (64 slower from T = 16, 128 slower at T = 128).
SUM_BLOCK = 256


def split_sum_config(cfg: KernelConfig) -> KernelConfig:
    """The split-sum config (``_fp8_einsum_split_sum_kernel``) that adds ``cfg``'s SPLIT_R partials
    (launched with PDL iff ``cfg`` is)."""
    split, pdl = cfg["SPLIT_R"], cfg["USE_PDL"]
    return make_config(
        f"reduce_fp8_s{split}{'_pdl' if pdl else ''}",
        split_sum.KERNEL,
        4,
        1,
        BLOCK_D=SUM_BLOCK,
        SPLIT_R=split,
        USE_PDL=pdl,
    )


#: The split-sum configs of every decode config that splits K (compiled by the AOT gate).
FP8_EINSUM_SUM_CONFIGS: tuple[KernelConfig, ...] = tuple(
    {
        (sc := split_sum_config(c)).name: sc
        for c in FP8_EINSUM_CONFIGS
        if c.kernel in (decode.KERNEL, mx_decode.KERNEL) and c["SPLIT_R"] > 1
    }.values()
)


_CONFIGS_BY_NAME: dict[str, KernelConfig] = {c.name: c for c in FP8_EINSUM_CONFIGS}

#: The plan tables in force in this process, by ``fp32_scales`` (both scales fp32): GB10's built-in
#: defaults (:mod:`.fp8_einsum_plan`, with the evidence they rest on) until :func:`use_plan` installs
#: the probe's per-range choice for the served layout.
_ACTIVE_PLANS: dict[bool, PlanTable] = {False: FP8_EINSUM_PLAN_UE8M0, True: FP8_EINSUM_PLAN_FP32}


def use_plan(plan: PlanTable | None, fp32_scales: bool) -> PlanTable:
    """Make ``plan`` the table :func:`select_fp8_einsum_config` reads for one scale encoding (``None``:
    the built-in default again); returns the table it replaced.

    The overlay calls it once per process, before the model is built, with the kernel plan's per-range
    choice (:class:`sparkpair_overlay.o_proj_configs.ConfigPlan`). Later calls are plain Python dict reads
    at launch time (a CUDA graph replays the configs it captured).

    Raises:
        ValueError: the table is not usable (:func:`.fp8_einsum_plan.plan_problem`: empty, not
            increasing, not ending at UNBOUNDED, or naming a config this module does not have).
    """
    table = default_plan(fp32_scales) if plan is None else tuple((int(m), str(n)) for m, n in plan)
    problem = plan_problem(table, _CONFIGS_BY_NAME)
    if problem is not None:
        raise ValueError(f"fp8_einsum.use_plan: {problem}; wanted ((max_T, config name), ...)")
    old = _ACTIVE_PLANS[fp32_scales]
    _ACTIVE_PLANS[fp32_scales] = table
    return old


def active_plan(fp32_scales: bool) -> PlanTable:
    """The table in force for one scale encoding (see :func:`use_plan`)."""
    return _ACTIVE_PLANS[fp32_scales]


def select_fp8_einsum_config(t: int, fp32_scales: bool = False) -> KernelConfig:
    """The config :func:`fp8_einsum` uses for ``t`` tokens: the table in force (:func:`active_plan`)
    for fp32 scales (``fp32_scales``: both scales fp32) or the other encodings."""
    return _CONFIGS_BY_NAME[plan_config_name(_ACTIVE_PLANS[fp32_scales], t)]


def config_by_name(name: str) -> KernelConfig:
    """The config called ``name`` (any path but the split sums).

    Raises:
        ValueError: no config has that name.
    """
    if name not in _CONFIGS_BY_NAME:
        raise ValueError(
            f"fp8_einsum: no config named {name!r}; known: {', '.join(sorted(_CONFIGS_BY_NAME))}"
        )
    return _CONFIGS_BY_NAME[name]


def kernel_path(cfg: KernelConfig) -> str:
    """The kernel path a config runs, as the probe's ``kernel_paths`` rows name it: ``decode``,
    ``tile-split`` / ``tile`` (the tile loop with / without a K split), ``split-sum``, ``mx-decode``
    (the block-scaled decode tile), ``mx-tile`` (block-scaled tile loop, promoted per K tile) or
    ``mx-tile-acc`` (accumulated in the MMA over the whole K)."""
    if cfg.kernel == mx_decode.KERNEL:
        return "mx-decode"
    if cfg.kernel == mx_tile.KERNEL:
        return "mx-tile" if cfg["PROMOTE"] else "mx-tile-acc"
    if cfg.kernel == decode.KERNEL:
        return "decode"
    if cfg.kernel == split_sum.KERNEL:
        return "split-sum"
    return "tile-split" if cfg.constexprs().get("SPLIT_R", 1) > 1 else "tile"


#: Token counts up to which a decode tile (tokens on the MMA's N side, every CTA streaming its weight
#: slice once per T tile) is worth timing: past 64 each extra T tile reads the weight again.
DECODE_TILE_MAX_T = 64
#: Token counts up to which a K-split tile loop is worth timing (the split trades partial-sum traffic
#: for CTAs; from a few hundred tokens the unsplit grid fills the GPU).
SPLIT_TILE_MAX_T = 256


def candidate_range(cfg: KernelConfig) -> tuple[int, int] | None:
    """The token counts ``[lo, hi]`` at which the probe times ``cfg`` as a candidate of the plan
    (``hi`` :data:`.fp8_einsum_plan.UNBOUNDED` for no end), or ``None`` for a config no plan takes (the
    no-PDL reference tile, the split sums). Decode tiles: 1..:data:`DECODE_TILE_MAX_T`; K-split tile
    loops and the 16-token unsplit tile: 1..:data:`SPLIT_TILE_MAX_T`; tile loops of 64 tokens from 17,
    of 128 tokens from 65 (fewer tokens leave most of the tile empty), to no end."""
    path = kernel_path(cfg)
    if path == "split-sum" or (path == "decode" and not cfg["USE_PDL"]):
        return None
    if path in ("decode", "mx-decode"):
        return 1, DECODE_TILE_MAX_T
    if path == "tile-split" or cfg["BLOCK_T"] <= 32:
        return 1, SPLIT_TILE_MAX_T
    return (17 if cfg["BLOCK_T"] <= 64 else 65), UNBOUNDED


#: Every config the plan may take (:func:`candidate_range` is not ``None``), in definition order.
FP8_EINSUM_PLAN_CANDIDATES: tuple[KernelConfig, ...] = tuple(
    c for c in FP8_EINSUM_CONFIGS if candidate_range(c) is not None
)
