"""GB10's built-in o_proj kernel plan: which ``fp8_einsum`` config serves each token count.

Pure (no torch, no Triton), so the kernel plan (:mod:`sparkpair_overlay.plan`) reads the defaults
on any machine: they break the probe's near-ties (:mod:`sparkpair_overlay.o_proj_configs`) and are
what the kernel runs where no probe rows on the served layout exist. The kernel module
(:mod:`sparkpair_overlay.kernels.fp8_einsum`) owns the configs these names refer to and the table
in force in its process (:func:`sparkpair_overlay.kernels.fp8_einsum.use_plan`).

A plan table is ``((max_T, config name), ...)`` in increasing ``max_T``: token count ``T`` takes the
first entry with ``T <= max_T``; beyond the last entry, the last config (its ``max_T`` is
:data:`UNBOUNDED`). One table per scale encoding: :data:`FP8_EINSUM_PLAN_FP32` when both scales are
fp32, :data:`FP8_EINSUM_PLAN_UE8M0` for every other served encoding (packed UE8M0 ``int32``, exponent
bytes).

Where the defaults come from -- no GB10 has run them; they are argued from the evidence we have, and
the on-device probe replaces them per token-count range (docs/kernels.md "Kernel paths"):

* Decode (T <= 256), from the GB10-shaped proxy (benchmarks/results/gb10-proxy/, runs 1-4: H100, 48 SMs
  in a green context, cold L2, CUDA-graph replay p50; Triton 3.6 there, so these measure structure, not
  GB10's instructions), default MMA mode, served layout (int32 per-row scales read as block scales),
  against cuBLAS's fp8 GEMM in the same context: T <= 16 dec_t16_d128_k4_w8 12.1-13.5 us (0.87-1.08x
  cuBLAS; dec_t16_d64_k4_w4 14.3-15.6, dec_t16_d128_k2_w8 13.0-13.6); on fp32 scales T <= 8
  dec_t16_d128_k2_w8 11.7-12.4 (0.98-1.04x; dec_t16_d128_k4_w8 12.0-12.8 there); T = 17..64
  t64_d64_r2_s3 14.6-15.3 (0.96-1.23x; 1-3 % faster than t64_d64_r2_s4, dec_t32_d64_k4_w4 14.7-16.1,
  dec_t32_d128_k2_w8 15.5-17.1); T = 65..256 the unsplit t64_d64_s4, T = 128 21.4 (1.07x; t64_d64_r2_s4
  28.3). With DISABLE_MMA_V3=1 (mma.sync on f16-upcast operands) the
  same plan is 1.2-2.5x cuBLAS: there the 4-warp split tiles t16_d64_r4_s4 / t32_d64_r4_s4 were fastest
  (14.4-15.3 / 21.4-21.9 us) but lost 1-6 us in the default mode.
* T = 257..1023: the promoting tile loop (not measured on the proxy in this form: 8 warps since Triton
  3.8's sm_121a build of the 4-warp tile spilled).
* T >= 1024: the block-scaled tile loop, promoted per K tile -- argued, not measured: the block-scaled
  MMA's published rate on an SM120 part is about twice plain fp8 ``mma.sync``'s (its promotion, one fp32
  add per element and 128-wide K tile, costs what the promoting path's one FMA does; the ``_acc`` form
  has none, but whether the MMA accumulates 4096 products in full fp32 is the probe's question), and
  sm_90 decomposes ``dot_scaled``, so no GPU here times it (docs/reference/triton-gb10.md).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

__all__ = [
    "FP8_EINSUM_PLAN",
    "FP8_EINSUM_PLAN_FP32",
    "FP8_EINSUM_PLAN_UE8M0",
    "UNBOUNDED",
    "PlanTable",
    "default_plan",
    "plan_config_name",
    "plan_problem",
]

PlanTable = tuple[tuple[int, str], ...]

#: ``max_T`` of a table's last entry: every larger token count takes it.
UNBOUNDED = 1 << 62

FP8_EINSUM_PLAN_UE8M0: PlanTable = (
    (16, "dec_t16_d128_k4_w8"),
    (64, "t64_d64_r2_s3"),
    (256, "t64_d64_s4"),
    (1023, "t64_d128_s4_w8_bc"),
    (UNBOUNDED, "mx_t128_d64_k128_w8_s4"),
)
FP8_EINSUM_PLAN_FP32: PlanTable = (
    (8, "dec_t16_d128_k2_w8"),
    (16, "dec_t16_d128_k4_w8"),
    (64, "t64_d64_r2_s3"),
    (256, "t64_d64_s4"),
    (1023, "t128_d64_s3_w8"),
    (UNBOUNDED, "mx_t128_d64_k128_w8_s4"),
)
FP8_EINSUM_PLAN = FP8_EINSUM_PLAN_UE8M0  # the served recipe on GB10


def default_plan(fp32_scales: bool) -> PlanTable:
    """The built-in table for an encoding: :data:`FP8_EINSUM_PLAN_FP32` when both scales are fp32,
    else :data:`FP8_EINSUM_PLAN_UE8M0`."""
    return FP8_EINSUM_PLAN_FP32 if fp32_scales else FP8_EINSUM_PLAN_UE8M0


def plan_config_name(plan: PlanTable, t: int) -> str:
    """The config name ``plan`` gives ``t`` tokens (the last entry's beyond its end)."""
    for max_t, name in plan:
        if t <= max_t:
            return name
    return plan[-1][1]


def plan_problem(plan: Sequence[tuple[int, str]], known: Collection[str]) -> str | None:
    """Why ``plan`` is not a usable table, or ``None``: it must be non-empty, strictly increasing in
    ``max_T`` (>= 1), end at :data:`UNBOUNDED`, and name only configs in ``known``."""
    if not plan:
        return "the table is empty"
    bounds = [m for m, _ in plan]
    if bounds[0] < 1 or any(b <= a for a, b in zip(bounds, bounds[1:], strict=False)):
        return f"max_T values {bounds} are not strictly increasing from >= 1"
    if bounds[-1] != UNBOUNDED:
        return f"the last max_T is {bounds[-1]}, not {UNBOUNDED} (every larger token count needs a config)"
    unknown = sorted({n for _, n in plan if n not in known})
    if unknown:
        return f"unknown config name(s) {', '.join(unknown)}"
    return None
