"""Block-scaled FP8 ``einsum('bhr,hdr->bhd')`` for DeepSeek-V4's o_proj (``wo_a``), in Triton.

Computes, for every token t, group g and output row d::

    out[t, g, d] = sum_r a[t, g, r] * sa[t, g, r // 128] * w[g, d, r] * sw_(g, d, r // 128)

with fp8 e4m3 products on the tensor cores, accumulated in fp32, written as bf16. Shapes
(docs/reference/vllm-code-paths.md#dsv4-shapes): TP=2: G=4, R=4096, D=1024; TP=1: G=8.

The overlay routes o_proj here on compute capability family 120 only (GB10 is 12.1). The kernels,
one file per path, are :mod:`.fp8_einsum_sm120`; their configs are :mod:`.fp8_einsum_configs`; the
table that picks a config per token count is :mod:`.fp8_einsum_plan` (GB10's default) or the
probe's plan installed by :func:`use_plan`. This module is the host side: operand checks, the
public dispatch and launcher, the torch custom op. What Triton emits for sm_121a depends on its
version: Triton 3.8 (the image's, required by torch 2.14) emits native fp8 ``mma.sync ...
e4m3.e4m3`` for ``tl.dot`` and the block-scaled ``mma.sync ... kind::mxf8f6f4.block_scale ...
ue8m0`` for ``tl.dot_scaled``; Triton 3.6 upcasts both to f16/bf16 (docs/reference/triton-gb10.md).
The AOT gate (:mod:`.aot`) checks the instructions of every sm_121a build.

Calling convention: the same as ``vllm.utils.deep_gemm.fp8_einsum`` as
``vllm/models/deepseek_v4/nvidia/ops/o_proj.py`` calls it::

    fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)

Operands:

* ``a``: e4m3fn ``[T, G, R]``, any strides with unit stride along R (vLLM's activation quant
  gives the group-major strides ``(R, T*R, 1)``).
* ``w``: e4m3fn ``[G, D, R]``, unit stride along R.
* ``out``: bf16 ``[T, G, D]``, unit stride along D; written in place.
* ``recipe``: ``(1, 128, 128)`` (sw per 128x128 weight block) or ``(1, 1, 128)`` (sw per weight
  row and 128-wide K block). ``sa`` is per token and 128-wide K block in both.

Scale encodings (decoded in the kernel, bit-exact):

* fp32: ``sa [T, G, R/128]``; ``sw [G, D/128, R/128]`` (recipe (1,128,128)) or ``[G, D, R/128]``.
* int32 packed UE8M0: ``sa [T, G, R/512]``, ``sw [G, D, R/512]`` (recipe (1,1,128)): four
  exponents per int32, K block k in byte ``k % 4`` (bits ``8*(k%4)`` .. ``8*(k%4)+7``) of word
  ``k // 4``.
* ``torch.float8_e8m0fnu`` (or ``torch.uint8`` holding the same bytes): one exponent byte per
  block, same shapes as fp32. It is viewed as uint8 before the launch, never handed to Triton
  as ``float8_e8m0fnu`` (field bug B02).

An exponent byte ``e`` decodes to ``2**(e - 127)`` exactly: fp32 bits ``e << 23`` for
1 <= e <= 254, the subnormal ``2**-127`` for e = 0, NaN for e = 255 (the ``float8_e8m0fnu``
definition). Any strides are accepted for the scales, including vLLM's MN-major TMA-aligned
layout (token dim contiguous, T padded to a multiple of 4: strides ``(1, K_s*T4, T4)``).

Per-row weight scales that repeat one value on every row of each 128-row block (DeepGEMM's
per-row copies of 128x128 block scales, the layout GB10 serves) are handed to the kernels as
block scales once :func:`block_scales_view` has said so; before that, the tile loop's
``SHARE_CHECK`` configs check once per tile whether its rows hold identical raw per-row scale
entries and then take the one-scale loop. The bits are the same either way.

T (tokens) and the scale strides (which depend on T through the TMA padding T4 = 4*ceil(T/4))
are ``do_not_specialize`` kernel arguments, so one compiled kernel per config serves T = 1 .. 16384
(no recompilation per T; CUDA-graph safe: the launcher does no host sync and allocates nothing,
but for the first call on a per-row weight-scale tensor, outside graph capture: see
:func:`block_scales_view`).
The operand strides stay specialised: they are T-independent, or (``a``'s group stride T*R in the
group-major layout) always a multiple of 16, so their specialisation never changes with T and
keeps the 16-byte vector loads. Total elements per operand must stay below 2**31 (int32 offsets).

Every path adds in a fixed order: bitwise deterministic run to run.

Public API: :func:`fp8_einsum`; torch custom op ``torch.ops.sparkpair.fp8_einsum`` (mutates
``out``; fake implementation registered); :func:`fp8_einsum_with_config`; re-exported from
:mod:`.fp8_einsum_configs`: :data:`FP8_EINSUM_CONFIGS` (every config of every path),
:data:`FP8_EINSUM_MX_CONFIGS` (the block-scaled ones), :data:`FP8_EINSUM_SUM_CONFIGS` (the split
sums, for the AOT build), :func:`select_fp8_einsum_config`, :func:`use_plan`; from
:mod:`.fp8_einsum_plan`: the GB10 plan :data:`FP8_EINSUM_PLAN_UE8M0` / :data:`FP8_EINSUM_PLAN_FP32`.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch

from ._common import SEMAPHORES, KernelConfig, cdiv, make_config, require_triton
from .fp8_einsum_configs import (
    DECODE_TILE_MAX_T,
    FP8_EINSUM_CONFIGS,
    FP8_EINSUM_DECODE_CONFIGS,
    FP8_EINSUM_MX_CONFIGS,
    FP8_EINSUM_PLAN_CANDIDATES,
    FP8_EINSUM_SUM_CONFIGS,
    FP8_EINSUM_TILE_CONFIGS,
    MX_KERNELS,
    SCALE_BLOCK,
    SPLIT_TILE_MAX_T,
    SUM_BLOCK,
    active_plan,
    candidate_range,
    config_by_name,
    kernel_path,
    select_fp8_einsum_config,
    split_sum_config,
    use_plan,
)
from .fp8_einsum_plan import FP8_EINSUM_PLAN, FP8_EINSUM_PLAN_FP32, FP8_EINSUM_PLAN_UE8M0, UNBOUNDED
from .fp8_einsum_sm120 import JITTED, decode, mx_decode, split_sum, tile

__all__ = [
    "DECODE_TILE_MAX_T",
    "FP8_EINSUM_CONFIGS",
    "FP8_EINSUM_DECODE_CONFIGS",
    "FP8_EINSUM_MX_CONFIGS",
    "FP8_EINSUM_PLAN",
    "FP8_EINSUM_PLAN_CANDIDATES",
    "FP8_EINSUM_PLAN_FP32",
    "FP8_EINSUM_PLAN_UE8M0",
    "FP8_EINSUM_SUM_CONFIGS",
    "FP8_EINSUM_TILE_CONFIGS",
    "JITTED",
    "MX_KERNELS",
    "SCALE_BLOCK",
    "SPLIT_TILE_MAX_T",
    "SUM_BLOCK",
    "SUPPORTED_EQUATION",
    "UNBOUNDED",
    "active_plan",
    "block_scales_view",
    "candidate_range",
    "config_by_name",
    "decode_ue8m0",
    "fp8_einsum",
    "fp8_einsum_with_config",
    "jitted_kernel",
    "kernel_path",
    "rows_repeat_in_blocks",
    "select_fp8_einsum_config",
    "split_sum_config",
    "unpack_ue8m0_int32",
    "use_plan",
]

SUPPORTED_EQUATION = "bhr,hdr->bhd"
MX_VECTOR = 32  # K elements per exponent byte of tl.dot_scaled's e8m0 scales (OCP MX spec)

# Scale kinds (constexpr SA_KIND / SW_KIND).
_SCALE_FP32 = 0
_SCALE_PACKED_I32 = 1
_SCALE_U8 = 2


def jitted_kernel(cfg: KernelConfig) -> Any:
    """The jitted entry ``cfg`` launches (its ``kernel`` name; :data:`JITTED`).

    Raises:
        ValueError: no fp8_einsum kernel has that name.
        RuntimeError: Triton is not installed.
    """
    require_triton()
    if cfg.kernel not in JITTED:
        raise ValueError(
            f"fp8_einsum: config {cfg.name} names kernel {cfg.kernel!r}; known: {', '.join(JITTED)}"
        )
    return JITTED[cfg.kernel]


# ----------------------------------------------------------------------------------------------
# Scale handling (host side; also the reference decoders the tests use)
# ----------------------------------------------------------------------------------------------

_E8M0 = getattr(torch, "float8_e8m0fnu", None)


def decode_ue8m0(exp_bytes: torch.Tensor) -> torch.Tensor:
    """Exponent bytes -> fp32 ``2**(e-127)`` exactly (e=0 -> 2**-127, e=255 -> NaN).

    Args:
        exp_bytes: any integer tensor holding 0..255, or a ``float8_e8m0fnu`` tensor.
    Returns:
        fp32 tensor of the same shape.
    """
    if _E8M0 is not None and exp_bytes.dtype == _E8M0:
        exp_bytes = exp_bytes.view(torch.uint8)
    e = exp_bytes.to(torch.int32) & 0xFF
    bits = torch.where(e == 0, torch.full_like(e, 0x00400000), e << 23)
    bits = torch.where(e == 255, torch.full_like(e, 0x7FC00000), bits)
    return bits.view(torch.float32)


def unpack_ue8m0_int32(packed: torch.Tensor, num_blocks: int) -> torch.Tensor:
    """Unpack int32 words of four UE8M0 bytes into ``[..., num_blocks]`` uint8 (byte k at bits 8k)."""
    if packed.dtype != torch.int32:
        raise ValueError(f"unpack_ue8m0_int32: expected int32, got {packed.dtype}")
    shifts = torch.arange(4, device=packed.device, dtype=torch.int32) * 8
    b = (packed.unsqueeze(-1) >> shifts) & 0xFF
    return b.flatten(-2)[..., :num_blocks].to(torch.uint8)


def _scale_kind(s: torch.Tensor, what: str) -> tuple[int, torch.Tensor]:
    if s.dtype == torch.float32:
        return _SCALE_FP32, s
    if s.dtype == torch.int32:
        return _SCALE_PACKED_I32, s
    if _E8M0 is not None and s.dtype == _E8M0:
        return _SCALE_U8, s.view(torch.uint8)  # B02: never hand float8_e8m0fnu to Triton
    if s.dtype == torch.uint8:
        return _SCALE_U8, s
    raise ValueError(
        f"fp8_einsum: {what} dtype {s.dtype} is not a supported scale encoding "
        "(float32, int32 packed UE8M0, float8_e8m0fnu, uint8 exponent bytes)"
    )


def _check_scale_shape(s: torch.Tensor, kind: int, lead: tuple[int, ...], r: int, what: str) -> None:
    kb = r // SCALE_BLOCK
    want_last = cdiv(kb, 4) if kind == _SCALE_PACKED_I32 else kb
    want = (*lead, want_last)
    if tuple(s.shape) != want:
        enc = {0: "float32", 1: "int32 packed UE8M0", 2: "UE8M0 bytes"}[kind]
        raise ValueError(
            f"fp8_einsum: {what} has shape {tuple(s.shape)}; a {enc} scale for these operands must be {want}"
        )


def _prepare(
    equation: str,
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out: torch.Tensor,
    recipe: tuple[int, int, int] | None,
) -> tuple[int, torch.Tensor, int, torch.Tensor, bool]:
    if equation.replace(" ", "") != SUPPORTED_EQUATION:
        raise ValueError(f"fp8_einsum: only equation {SUPPORTED_EQUATION!r} is supported; got {equation!r}")
    if a.dim() != 3 or w.dim() != 3 or out.dim() != 3:
        raise ValueError(
            f"fp8_einsum: a [T,G,R], w [G,D,R], out [T,G,D] must be 3-D; got a {tuple(a.shape)}, "
            f"w {tuple(w.shape)}, out {tuple(out.shape)}"
        )
    t, g, r = a.shape
    gw, d, rw = w.shape
    if gw != g or rw != r or tuple(out.shape) != (t, g, d):
        raise ValueError(
            f"fp8_einsum: shapes disagree: a {tuple(a.shape)} (T,G,R), w {tuple(w.shape)} (G,D,R), "
            f"out {tuple(out.shape)} (want {(t, g, d)})"
        )
    if a.dtype != torch.float8_e4m3fn or w.dtype != torch.float8_e4m3fn:
        raise ValueError(f"fp8_einsum: a and w must be float8_e4m3fn; got {a.dtype} and {w.dtype}")
    if out.dtype != torch.bfloat16:
        raise ValueError(f"fp8_einsum: out must be bfloat16; got {out.dtype}")
    if r % SCALE_BLOCK != 0:
        raise ValueError(f"fp8_einsum: R={r} must be a multiple of {SCALE_BLOCK}")
    if a.stride(2) != 1 or w.stride(2) != 1 or out.stride(2) != 1:
        raise ValueError(
            f"fp8_einsum: a, w and out need unit stride along their last dim; got strides "
            f"{a.stride()}, {w.stride()}, {out.stride()}"
        )
    for name, ten in (("a", a), ("w", w), ("out", out)):
        last = sum((n - 1) * st for n, st in zip(ten.shape, ten.stride(), strict=True)) if ten.numel() else 0
        if last >= 2**31:
            raise ValueError(
                f"fp8_einsum: {name} spans {last + 1} elements; the kernel's int32 offsets need < 2**31"
            )
    if recipe is not None:
        recipe = tuple(int(v) for v in recipe)  # type: ignore[assignment]
        if recipe not in ((1, 128, 128), (1, 1, 128)):
            raise ValueError(
                f"fp8_einsum: recipe {recipe} is not supported; want (1, 128, 128) or (1, 1, 128)"
            )
    sa_kind, sa = _scale_kind(sa, "sa")
    sw_kind, sw = _scale_kind(sw, "sw")
    _check_scale_shape(sa, sa_kind, (t, g), r, "sa")
    # The weight-scale granularity is read from sw's shape, never from the recipe alone: with
    # recipe (1,128,128) on sm_10x/sm_12x, vLLM's DeepGEMM weight post-processing
    # (fp8_utils.py deepgemm_post_process_fp8_weight_block, vllm-code-paths.md) still broadcasts
    # each 128x128 block scale to one packed int32 scale per row, so a (1,128,128) call can
    # carry fp32 activation scales with per-row int32 weight scales. Both describe the same
    # numbers; the kernel reads either. Recipe (1,1,128) asks for per-row weight scales.
    per_row = (recipe is not None and recipe[1] == 1) or (
        sw.dim() == 3 and sw.shape[1] == d and d != cdiv(d, 128)
    )
    _check_scale_shape(sw, sw_kind, (g, d if per_row else cdiv(d, 128)), r, "sw")
    if (sa.is_cuda or sw.is_cuda or out.is_cuda or w.is_cuda) and not (
        a.device == w.device == out.device == sa.device == sw.device
    ):
        raise ValueError(
            f"fp8_einsum: operands on different devices: a {a.device}, sa {sa.device}, w {w.device}, "
            f"sw {sw.device}, out {out.device}"
        )
    return sa_kind, sa, sw_kind, sw, per_row


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _kernels_interpreted() -> bool:
    """True when Triton's interpreter built the kernel (TRITON_INTERPRET=1 at import)."""
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tile._fp8_einsum_tile_kernel, InterpretedFunction)


def fp8_einsum_with_config(
    equation: str,
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    recipe: tuple[int, int, int] | None = None,
    config: KernelConfig | str | None = None,
) -> None:
    """:func:`fp8_einsum` with an explicit config (``None``: the plan's choice). See the module docstring.

    Raises:
        ValueError: as :func:`fp8_einsum`; also an unknown config name, a split-sum
            config, a tile-loop config whose BLOCK_D does not divide 128 with block weight scales,
            or a block-scaled config whose BLOCK_K does not divide R.
    """
    (x, sa), (w, sw) = a, b
    sa_kind, sa, sw_kind, sw, per_row = _prepare(equation, x, sa, w, sw, out, recipe)
    require_triton()
    if not (x.is_cuda or _interpreting()):
        raise ValueError(
            f"fp8_einsum: needs CUDA tensors (got {x.device}); set TRITON_INTERPRET=1 for the CPU"
        )
    t, g, r = x.shape
    d = w.shape[1]
    if t == 0:
        return
    if config is None:
        cfg, sw, per_row = _plan(x, sw, sa_kind, sw_kind, per_row)
    elif isinstance(config, str):
        cfg = config_by_name(config)
    else:
        cfg = config
    meta = cfg.constexprs()
    if cfg.kernel in MX_KERNELS:
        _launch_mx(cfg, meta, x, sa, w, sw, out, sa_kind, sw_kind, per_row)
        return
    if cfg.kernel == split_sum.KERNEL:
        raise ValueError(
            f"fp8_einsum: config {cfg.name} is a split-sum stage; pass the decode config it follows"
        )
    if not per_row and SCALE_BLOCK % meta["BLOCK_D"] != 0:
        raise ValueError(
            f"fp8_einsum: config {cfg.name} has BLOCK_D={meta['BLOCK_D']}; with 128x128 block weight "
            f"scales BLOCK_D must divide {SCALE_BLOCK} (one scale per tile and K block)"
        )
    n_tiles = cdiv(t, meta["BLOCK_T"]) * cdiv(d, meta["BLOCK_D"])
    if cfg.kernel == decode.KERNEL:
        _launch_decode(cfg, meta, n_tiles, x, sa, w, sw, out, sa_kind, sw_kind, per_row)
        return
    split = meta["SPLIT_R"]
    sem = SEMAPHORES.get(x.device, n_tiles * g) if split > 1 else None
    if sem is None:  # no counters (first call inside a graph capture, or too many tiles): no split
        split = 1
        meta["SPLIT_R"] = 1
    ws = torch.empty((split, t, g, d), device=x.device, dtype=torch.float32) if split > 1 else out
    jitted_kernel(cfg)[(n_tiles, g, split)](
        out,
        ws,
        sem if sem is not None else out,
        *_kernel_args(x, sa, w, sw, out),
        SA_KIND=sa_kind,
        SW_KIND=sw_kind,
        SW_PER_ROW=per_row,
        **meta,
        num_warps=cfg.num_warps,
        num_stages=cfg.num_stages,
    )


def _kernel_args(
    x: torch.Tensor, sa: torch.Tensor, w: torch.Tensor, sw: torch.Tensor, out: torch.Tensor
) -> tuple[object, ...]:
    """Every path's operand arguments after their three output pointers (out, the split-K
    workspace, the semaphores): operands, sizes T, D, R, strides, and the output's element count,
    the same for every path."""
    t, g, r = x.shape
    d = w.shape[1]
    return (
        x, sa, w, sw, t, d, r,
        out.stride(0), out.stride(1), x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        sa.stride(0), sa.stride(1), sa.stride(2), sw.stride(0), sw.stride(1), sw.stride(2),
        t * g * d,
    )  # fmt: skip


def rows_repeat_in_blocks(sw: torch.Tensor) -> torch.Tensor | None:
    """Whether per-row weight scales repeat one value on every row of each 128-row block.

    Args:
        sw: per-row weight scales ``[G, D, Ks]`` of any encoding and strides (raw entries are
            compared: packed int32 words, exponent bytes or fp32 values; a NaN never matches).
    Returns:
        A 0-d bool tensor on ``sw``'s device (no host sync), or ``None`` when D is not a multiple
        of 128 (no block view exists).
    """
    g, d, ks = sw.shape
    if d % SCALE_BLOCK != 0:
        return None
    x = sw.view(g, d // SCALE_BLOCK, SCALE_BLOCK, ks)  # splitting one dim: a view for any strides
    return (x == x[:, :, :1, :]).all()


class _RowBlockCheck:
    """One weight-scale tensor's :func:`rows_repeat_in_blocks`, copied to the host without a
    sync: ``storage`` and ``version`` say which values it describes."""

    __slots__ = ("storage", "version", "event", "host", "repeat")

    def __init__(
        self,
        storage: weakref.ref[torch.UntypedStorage],
        version: int,
        event: torch.cuda.Event,
        host: torch.Tensor,
    ) -> None:
        self.storage = storage
        self.version = version
        self.event = event
        self.host = host
        self.repeat: bool | None = None


#: Per weight-scale tensor (keyed by its pointer, shape, strides and dtype): the check above. An
#: entry is valid while the tensor's storage is the one it was made for (a weak reference, so a new
#: tensor at a freed address is checked anew) and its version counter is unchanged (in-place writes
#: through the tensor or its views bump it; writes through ``.data`` do not and are not seen).
_ROW_BLOCK_CHECKS: dict[tuple[object, ...], _RowBlockCheck] = {}


def block_scales_view(sw: torch.Tensor) -> torch.Tensor | None:
    """``sw[:, ::128, :]`` when per-row weight scales ``sw [G, D, Ks]`` are known to repeat
    one value on every row of each 128-row block (DeepGEMM's per-row copies of 128x128 block
    scales, the layout GB10 serves); else ``None``.

    On the CPU (Triton's interpreter) the check runs in the call and answers at once. On a GPU
    the first call for a tensor starts :func:`rows_repeat_in_blocks` on the current stream and
    an asynchronous copy of its answer to pinned host memory, and returns ``None``; a later call
    returns the view once that copy has landed (``torch.cuda.Event.query``). No call syncs the
    host; none starts a check or queries an event while the stream is capturing a CUDA graph
    (an unanswered tensor then keeps ``None``). Reading the scales as block scales gives the same
    bits as reading them per row (each element's scale is the same product ``sa * sw``), so the
    answer changes the speed of a call, never its output.
    """
    if not sw.is_cuda:
        repeat = rows_repeat_in_blocks(sw)
        return sw[:, ::SCALE_BLOCK, :] if repeat is not None and bool(repeat) else None
    key = (sw.data_ptr(), tuple(sw.shape), sw.stride(), sw.dtype, sw.device)
    storage = sw.untyped_storage()
    entry = _ROW_BLOCK_CHECKS.get(key)
    if entry is not None and (entry.storage() is not storage or entry.version != sw._version):
        entry = None
    capturing = torch.cuda.is_current_stream_capturing()
    if entry is None:
        if capturing:
            return None
        repeat = rows_repeat_in_blocks(sw)
        if repeat is None:
            return None
        host = torch.empty((), dtype=torch.bool, pin_memory=True)
        host.copy_(repeat, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(sw.device))  # the stream the check ran on

        def forget(_: weakref.ref[torch.UntypedStorage], key: tuple[object, ...] = key) -> None:
            _ROW_BLOCK_CHECKS.pop(key, None)

        _ROW_BLOCK_CHECKS[key] = _RowBlockCheck(weakref.ref(storage, forget), sw._version, event, host)
        return None
    if entry.repeat is None:
        if capturing or not entry.event.query():
            return None
        entry.repeat = bool(entry.host)
    return sw[:, ::SCALE_BLOCK, :] if entry.repeat else None


def _plan(
    x: torch.Tensor, sw: torch.Tensor, sa_kind: int, sw_kind: int, per_row: bool
) -> tuple[KernelConfig, torch.Tensor, bool]:
    """The public dispatch's choice for operands as :func:`_prepare` returns them: ``(config, sw,
    per_row)``, where per-row weight scales that repeat their 128-row block's value
    (:func:`block_scales_view`) come back as the block view with ``per_row`` False (same bits)."""
    if per_row:
        blocks = block_scales_view(sw)
        if blocks is not None:  # rows repeat 128-row blocks: the block-scale plan, same bits
            sw, per_row = blocks, False
    cfg = select_fp8_einsum_config(x.shape[0], sa_kind == _SCALE_FP32 and sw_kind == _SCALE_FP32)
    return cfg, sw, per_row


def _launch_mx(cfg, meta, x, sa, w, sw, out, sa_kind, sw_kind, per_row) -> None:
    """A block-scaled path (``_fp8_einsum_mx_tile_kernel``, or ``_fp8_einsum_mx_decode_kernel``
    and its split sum).

    Raises:
        ValueError: R is not a multiple of the config's BLOCK_K.
    """
    t, g, r = x.shape
    d = w.shape[1]
    bk = meta["BLOCK_K"]
    if r % bk != 0:
        raise ValueError(f"fp8_einsum: config {cfg.name} has BLOCK_K={bk}; R={r} must be a multiple of it")
    if cfg.kernel == mx_decode.KERNEL:
        meta["SPLIT_R"] = r // bk
        if _kernels_interpreted():  # Triton's interpreter has no griddepcontrol
            meta["USE_PDL"] = False
    split = meta["SPLIT_R"]
    ws, sem = _split_workspace(split, t, g, d, out)
    pdl = {"launch_pdl": True} if meta.get("USE_PDL") else {}
    args = _kernel_args(x, sa, w, sw, out)
    kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
    n_tiles = cdiv(t, meta["BLOCK_T"]) * cdiv(d, meta["BLOCK_D"])
    jitted_kernel(cfg)[(n_tiles, g, split)](
        out, ws, sem, *args, **kinds, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl
    )
    if split > 1:
        scfg = make_config(cfg.name, cfg.kernel, cfg.num_warps, cfg.num_stages, **meta)
        _launch_split_sum(scfg, t, g, d, out, ws, sem, args, kinds, pdl)


def _launch_decode(cfg, meta, n_tiles, x, sa, w, sw, out, sa_kind, sw_kind, per_row) -> None:
    """The decode tile (``_fp8_einsum_decode_kernel``) and its split sum when R is split."""
    t, g, r = x.shape
    d = w.shape[1]
    if _kernels_interpreted():  # Triton's interpreter has no griddepcontrol
        meta["USE_PDL"] = False
        cfg = make_config(cfg.name, cfg.kernel, cfg.num_warps, cfg.num_stages, **meta)
    split = cdiv(r // SCALE_BLOCK, meta["KB_PER"])
    meta["SPLIT_R"] = split
    ws, sem = _split_workspace(split, t, g, d, out)
    pdl = {"launch_pdl": True} if meta["USE_PDL"] else {}
    args = _kernel_args(x, sa, w, sw, out)
    kinds = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row}
    jitted_kernel(cfg)[(n_tiles, g, split)](
        out, ws, sem, *args, **kinds, **meta, num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl
    )
    if split > 1:
        _launch_split_sum(
            cfg if cfg["SPLIT_R"] == split else _with_split(cfg, split),
            t,
            g,
            d,
            out,
            ws,
            sem,
            args,
            kinds,
            pdl,
        )


def _split_workspace(
    split: int, t: int, g: int, d: int, out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel's (workspace, semaphore) pointers: with K in ``split`` > 1 parts, fp32 partials
    ``[split, T, G, D]`` and the same memory as an int32 pointer (the tile loop's tile counters
    are not these: the decode paths never read it; the AOT build declares int32); unsplit, ``out``
    for both."""
    if split == 1:
        return out, out
    ws = torch.empty((split, t, g, d), device=out.device, dtype=torch.float32)
    return ws, ws.view(torch.int32)


def _launch_split_sum(cfg, t, g, d, out, ws, sem, args, kinds, pdl) -> None:
    """The split sum after a decode or block-scaled decode launch that stored ``cfg["SPLIT_R"]`` fp32
    partials."""
    scfg = split_sum_config(cfg)
    jitted_kernel(scfg)[(cdiv(d, SUM_BLOCK), g, t)](
        out,
        ws,
        sem,
        *args,
        **kinds,
        **scfg.constexprs(),
        num_warps=scfg.num_warps,
        num_stages=scfg.num_stages,
        **pdl,
    )


def _with_split(cfg: KernelConfig, split: int) -> KernelConfig:
    meta = cfg.constexprs()
    meta["SPLIT_R"] = split
    return make_config(cfg.name, cfg.kernel, cfg.num_warps, cfg.num_stages, **meta)


@torch.library.custom_op("sparkpair::fp8_einsum", mutates_args=("out",))
def _fp8_einsum_op(
    equation: str,
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out: torch.Tensor,
    recipe: list[int],
) -> None:
    fp8_einsum_with_config(equation, (a, sa), (w, sw), out, tuple(recipe) if recipe else None)  # type: ignore[arg-type]


@_fp8_einsum_op.register_fake
def _fp8_einsum_fake(
    equation: str,
    a: torch.Tensor,
    sa: torch.Tensor,
    w: torch.Tensor,
    sw: torch.Tensor,
    out: torch.Tensor,
    recipe: list[int],
) -> None:
    return None


def fp8_einsum(
    equation: str,
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    recipe: tuple[int, int, int] | None = None,
) -> None:
    """``out[t,g,d] = sum_r a[t,g,r] sa w[g,d,r] sw`` in place, vLLM/DeepGEMM calling convention.

    Args:
        equation: must be ``"bhr,hdr->bhd"``.
        a: ``(a, sa)``: e4m3fn ``[T, G, R]`` and its per-(token, 128-wide K block) scales.
        b: ``(w, sw)``: e4m3fn ``[G, D, R]`` and its block scales (see the module docstring).
        out: bf16 ``[T, G, D]``, written in place.
        recipe: ``(1, 128, 128)`` or ``(1, 1, 128)``; ``None`` infers it from ``sw``'s shape.
    Raises:
        ValueError: another equation, wrong dtypes/shapes/strides, unsupported scale encoding
            or recipe, mixed devices, CPU tensors without ``TRITON_INTERPRET=1``.
        RuntimeError: Triton is not installed.
    Runs through ``torch.ops.sparkpair.fp8_einsum``; no host sync; graph-capturable.
    """
    (x, sa), (w, sw) = a, b
    torch.ops.sparkpair.fp8_einsum(equation, x, sa, w, sw, out, list(recipe) if recipe is not None else [])
