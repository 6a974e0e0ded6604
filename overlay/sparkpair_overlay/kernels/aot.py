"""Ahead-of-time compilation of every sparkpair kernel config for a GPU target, without a GPU.

The gate behind ``sparkpair kernels build`` and ``tests/aot``: each config of each kernel is
compiled through the kernel's own ``JITFunction`` (its ``warmup`` path, with a stand-in Triton
driver that reports the requested target), so the argument specialisation, options and cache
key are exactly what the runtime computes for the served model's shapes on that target. The
compiled artifacts land in ``TRITON_CACHE_DIR``; point the runtime's ``TRITON_CACHE_DIR`` at the
same directory (the image ships it) and the first GB10 call loads the cubin instead of compiling.

Targets: ``sm_121a`` (GB10) and ``sm_120a`` (the other family-120 parts, where the overlay routes
to these kernels too), and ``sm_90a`` (H100/H200, the proxy the GPU tests and benchmarks run on).
sm_12x builds are assembled by Triton's ``ptxas-blackwell`` unless ``ptxas`` names another
(:func:`bundled_ptxas`: the gate also assembles sm_121a with CUDA 12.9's, the oldest the image may
use, since two releases allocate registers differently: 12.9 spilled 8 B on a config 13.3 did not).
On sm_12x every build is inspected as GB10 would run it (:func:`mma_problem`): it fits
:data:`GB10_SHARED_MEMORY_BYTES` (101,376 B per block), spills no register, and every MMA on fp8
operands in its PTX is a native fp8 instruction (``mma.sync ... e4m3.e4m3``) or, for the
block-scaled configs, the block-scaled one (``mma.sync ... kind::mxf8f6f4.block_scale ... ue8m0``)
— never an f16/bf16 MMA on upcast operands, which is what Triton 3.6 emits for sm_121
(docs/reference/triton-gb10.md). On sm_90a spills are reported, not gated (Triton decomposes
the block-scaled dot there into bf16: correct, not what GB10 runs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ._common import GB10_SHARED_MEMORY_BYTES, HAS_TRITON, KernelConfig, require_triton

#: Target name -> compute capability as Triton's ``GPUTarget`` wants it. No sm_100a: the overlay
#: routes to these kernels on family 120 only, so a Blackwell datacenter build serves nobody (and
#: Triton 3.8 crashes building the per-K-tile promotion of the block-scaled kernel for it, in
#: its TritonGPUOptimizeAccumulatorInit pass).
AOT_TARGETS: dict[str, int] = {"sm_121a": 121, "sm_120a": 120, "sm_90a": 90}
DEFAULT_ARCHS: tuple[str, ...] = ("sm_121a", "sm_120a", "sm_90a")

#: What the MMAs of a build may be (:attr:`AotVariant.mma`): ``"fp8"`` every MMA in the PTX a native
#: fp8 ``mma.sync`` (e4m3 operands, either plain or block-scaled); ``"mxf8"`` every MMA the
#: block-scaled ``kind::mxf8f6f4.block_scale`` one with ue8m0 scales; ``None``: not inspected (no
#: fp8 operands: the router's bf16/fp32 GEMMs, the split sums).
MMA_KINDS = ("fp8", "mxf8")
_MMA_RE = re.compile(r"^\s*((?:mma|wgmma\.mma_async|tcgen05\.mma)\.[\w.:]+)", re.M)
_SCALED = r"kind::mxf8f6f4\.block_scale\.scale_vec::\w+\."
_NATIVE_FP8_MMA = re.compile(
    rf"^mma\.sync\.aligned\.m16n8k32\.row\.col\.(?:{_SCALED})?f32\.e4m3\.e4m3\.f32(?:\.ue8m0)?$"
)
_BLOCK_SCALED_MMA = re.compile(
    rf"^mma\.sync\.aligned\.m16n8k32\.row\.col\.{_SCALED}f32\.e4m3\.e4m3\.f32\.ue8m0$"
)


def mma_instructions(ptx: str) -> dict[str, int]:
    """Every MMA instruction of a PTX text (``mma``, ``wgmma.mma_async``, ``tcgen05.mma``), by its
    full opcode with modifiers, counted."""
    counts: dict[str, int] = {}
    for op in _MMA_RE.findall(ptx):
        counts[op] = counts.get(op, 0) + 1
    return counts


def mma_problem(mma: dict[str, int], want: str | None) -> str:
    """Why the MMAs ``mma`` (:func:`mma_instructions`) are not what a build of kind ``want``
    (:data:`MMA_KINDS`) must run on sm_12x, or ``""``: an fp8 build needs at least one MMA, and
    each one native fp8 (``want`` "fp8") or block-scaled with ue8m0 scales ("mxf8").

    Raises:
        ValueError: ``want`` is not None or one of :data:`MMA_KINDS`.
    """
    if want is None:
        return ""
    if want not in MMA_KINDS:
        raise ValueError(f"unknown MMA kind {want!r}; known: {', '.join(MMA_KINDS)}")
    if not mma:
        return "no MMA instruction in its PTX (wanted native fp8 mma.sync)"
    pattern = _BLOCK_SCALED_MMA if want == "mxf8" else _NATIVE_FP8_MMA
    bad = {op: n for op, n in mma.items() if not pattern.match(op)}
    if not bad:
        return ""
    what = (
        "the block-scaled mma.sync ... kind::mxf8f6f4.block_scale ... e4m3.e4m3.f32.ue8m0"
        if want == "mxf8"
        else "native fp8 mma.sync ... e4m3.e4m3"
    )
    seen = ", ".join(f"{op} x{n}" for op, n in sorted(bad.items()))
    return f"MMAs on its fp8 operands are {seen}; wanted only {what} (an f16/bf16 MMA means upcast operands)"


def shared_memory_limit(arch: str) -> int | None:
    """Shared memory per block the gate enforces for ``arch`` (bytes), or None for no limit.

    sm_12x (GB10, RTX 50): 101,376 B. Others are checked by Triton's own compile against the
    device at run time; the gate enforces GB10's limit only where it applies.
    """
    return GB10_SHARED_MEMORY_BYTES if AOT_TARGETS[arch] // 10 == 12 else None


@dataclass(frozen=True)
class AotVariant:
    """One thing to compile: a kernel config plus the argument specialisation it is compiled for."""

    kernel: str  # family, e.g. "router_gemm"
    config: KernelConfig
    variant: str  # e.g. "bf16" / "fp32-scales"
    fn: Any  # the JITFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    mma: str | None = None  # what its MMAs must be on sm_12x (MMA_KINDS), None: not inspected


@dataclass
class AotResult:
    """The outcome for one (variant, arch)."""

    kernel: str
    config: str
    variant: str
    arch: str
    ok: bool
    n_regs: int | None = None
    shared: int | None = None
    spills: int | None = None
    limit: int | None = None
    error: str = ""
    ptxas: str = ""  # the ptxas release that assembled it (``ptxas --version``'s), "" when not read
    mma: dict[str, int] = field(default_factory=dict)  # MMA opcode -> count in the PTX
    mma_error: str = ""  # why those MMAs fail the sm_12x check (mma_problem), "" when they pass

    @property
    def fits(self) -> bool:
        """Compiled, and on sm_12x (GB10's family) within its shared memory, without a spill, with
        the MMAs wanted. Elsewhere (sm_90a: the H200 proxy, where Triton decomposes the
        block-scaled dot into bf16) spills are reported, not gated."""
        return (
            self.ok
            and (self.limit is None or (self.shared or 0) <= self.limit)
            and not (self.sm12x and self.spills)
            and not self.mma_error
        )

    @property
    def sm12x(self) -> bool:
        """Whether the build is for compute capability family 120 (sm_120a, sm_121a)."""
        return AOT_TARGETS.get(self.arch, 0) // 10 == 12

    def problem(self) -> str:
        """Human-readable failure (empty when fine)."""
        what = f"{self.kernel}/{self.config} [{self.variant}]"
        if self.ptxas:
            what += f" (ptxas {self.ptxas})"
        if not self.ok:
            return f"{what} does not compile for {self.arch}: {self.error}"
        if self.limit is not None and (self.shared or 0) > self.limit:
            return (
                f"{what} needs {self.shared} B of shared memory on {self.arch}; the limit is {self.limit} B"
            )
        if self.sm12x and self.spills:
            return f"{what} spills {self.spills} B of registers to local memory on {self.arch}; wanted 0"
        if self.mma_error:
            return f"{what} on {self.arch}: {self.mma_error}"
        return ""

    @property
    def status(self) -> str:
        """One word for tables: ok, compile error, too much smem, spills, or mma."""
        if not self.ok:
            return "compile error"
        if self.limit is not None and (self.shared or 0) > self.limit:
            return "too much smem"
        if self.sm12x and self.spills:
            return "spills"
        return "upcast mma" if self.mma_error else "ok"


class _Mock:
    """A tensor stand-in for specialisation: dtype, 16-byte-aligned pointer."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    @staticmethod
    def data_ptr() -> int:
        return 0

    @staticmethod
    def ptr_range() -> int:
        return 0


class _AotDriver:
    """Stand-in Triton driver: no GPU, reports ``target`` and a per-target device key."""

    def __init__(self, target: Any, device_key: str) -> None:
        self._target = target
        self._device = device_key

    def get_current_device(self) -> str:
        return self._device

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self._target

    def is_active(self) -> bool:
        return True


@contextmanager
def _target_driver(arch: str, cache_dir: str | None) -> Iterator[None]:
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    saved_driver = driver._active
    saved_cache = os.environ.get("TRITON_CACHE_DIR")
    driver.set_active(_AotDriver(GPUTarget("cuda", AOT_TARGETS[arch], 32), f"aot-{arch}"))
    if cache_dir is not None:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
    try:
        yield
    finally:
        driver._active = saved_driver
        if cache_dir is not None:
            if saved_cache is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = saved_cache


def _cuobjdump() -> str | None:
    try:
        import triton

        p = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        if os.path.exists(p):
            return p
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def _resource_usage(cubin: bytes) -> tuple[int | None, int | None]:
    """(registers, spill bytes) of the cubin's one kernel, from ``cuobjdump -res-usage``."""
    tool = _cuobjdump()
    if tool is None:
        return None, None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        try:
            txt = subprocess.run(
                [tool, "-res-usage", f.name], capture_output=True, text=True, timeout=60
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None, None
    regs = re.search(r"REG:(\d+)", txt)
    stack = re.search(r"STACK:(\d+)", txt)
    return (int(regs.group(1)) if regs else None, int(stack.group(1)) if stack else None)


#: The ptxas releases Triton 3.8 bundles (``triton/backends/nvidia/bin``): ``ptxas`` (CUDA 12.9, the
#: oldest release that knows sm_121a and the one the image's base carries: the Dockerfile points
#: ``TRITON_PTXAS_BLACKWELL_PATH`` at the base's) and ``ptxas-blackwell`` (CUDA 13.3, Triton's default
#: for sm_100 and up).
BUNDLED_PTXAS = ("ptxas", "ptxas-blackwell")


def bundled_ptxas(name: str) -> str:
    """The path of one of Triton's bundled ptxas binaries (:data:`BUNDLED_PTXAS`).

    Raises:
        ValueError: ``name`` is not one of them, or this Triton does not ship it.
    """
    require_triton()
    import triton

    if name not in BUNDLED_PTXAS:
        raise ValueError(f"unknown bundled ptxas {name!r}; known: {', '.join(BUNDLED_PTXAS)}")
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    if not os.path.exists(path):
        raise ValueError(f"Triton {triton.__version__} ships no {name} at {path}")
    return path


def ptxas_release(path: str) -> str:
    """``12.9`` for a ptxas whose ``--version`` says ``release 12.9``; ``""`` when it cannot be read."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else ""


@contextmanager
def _blackwell_ptxas(path: str | None) -> Iterator[None]:
    """Assemble sm_100+ builds with ``path`` while inside (``TRITON_PTXAS_BLACKWELL_PATH``, which Triton
    reads at each compile); ``None`` changes nothing."""
    key = "TRITON_PTXAS_BLACKWELL_PATH"
    saved = os.environ.get(key)
    if path is not None:
        os.environ[key] = path
    try:
        yield
    finally:
        if path is not None:
            if saved is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = saved


def compile_variant(
    v: AotVariant, arch: str, cache_dir: str | None = None, ptxas: str | None = None
) -> AotResult:
    """Compile one variant for ``arch`` (no GPU needed) and report registers and shared memory.

    ``ptxas``: the ptxas that assembles an sm_12x build (default: Triton's choice, ``ptxas-blackwell``
    or ``TRITON_PTXAS_BLACKWELL_PATH``); the result names the release that did.
    """
    require_triton()
    limit = shared_memory_limit(arch)
    res = AotResult(
        kernel=v.kernel, config=v.config.name, variant=v.variant, arch=arch, ok=False, limit=limit
    )
    if ptxas is not None:
        res.ptxas = ptxas_release(ptxas)
    # Forget kernels compiled earlier in this process for this target, so the compile goes through
    # the file cache in ``cache_dir`` (and writes it) instead of returning the in-memory kernel
    # (whose key does not include the ptxas; the file cache's does).
    v.fn.device_caches.pop(f"aot-{arch}", None)
    try:
        with _target_driver(arch, cache_dir), _blackwell_ptxas(ptxas):
            k = v.fn.warmup(
                *v.args, grid=(1,), **v.kwargs, num_warps=v.config.num_warps, num_stages=v.config.num_stages
            )
            if hasattr(k, "result"):
                k = k.result()
    except Exception as exc:  # noqa: BLE001 - any compiler failure is a gate failure, reported
        res.error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"[
            :500
        ]
        return res
    res.ok = True
    md = k.metadata
    res.shared = int(getattr(md, "shared", 0))
    cubin = k.asm.get("cubin") if hasattr(k, "asm") else None
    if cubin:
        res.n_regs, res.spills = _resource_usage(cubin)
    ptx = k.asm.get("ptx", "") if hasattr(k, "asm") else ""
    res.mma = mma_instructions(ptx)
    if AOT_TARGETS[arch] // 10 == 12:
        res.mma_error = mma_problem(res.mma, v.mma)
    return res


# ----------------------------------------------------------------------------------------------
# What to compile: every config of every kernel, with the served model's argument values
# (DeepSeek-V4-Flash, docs/reference/vllm-code-paths.md#dsv4-shapes) so the shipped cache hits at run time.
# ----------------------------------------------------------------------------------------------


def router_variants() -> list[AotVariant]:
    """Every router_gemm config, for the dtype its weight path takes (K=4096, N=256)."""
    from . import router_gemm as rg
    from . import router_gemm_configs as rgc

    n, k = 256, 4096
    out: list[AotVariant] = []
    for cfg in rg.ROUTER_GEMM_CONFIGS:
        meta = cfg.constexprs()
        launch = {"launch_pdl": True} if meta.get("USE_PDL") else {}
        if cfg.kernel == "_router_rows_kernel":
            w_dtype = torch.float32 if meta.pop("W_DTYPE") == "fp32" else torch.bfloat16
            args = (_Mock(torch.float32), _Mock(torch.bfloat16), _Mock(w_dtype), 7, n, k, k, k, n)
            variant = "fp32-w" if w_dtype == torch.float32 else "bf16-w"
            out.append(
                AotVariant("router_gemm", cfg, variant, rg._router_rows_kernel, args, {**meta, **launch})
            )
            continue
        # every other config is a _router_dot_kernel one
        w_mode = meta["W_MODE"]
        w_dtype = torch.float32 if w_mode == rgc.W_FP32_SPLIT else torch.bfloat16
        variant = ("bf16-w", "fp32-w", "fp32-w-split3")[w_mode]
        # The launcher passes ``out`` (fp32) as the counter pointer when there is no fixup;
        # stride_w3 (3rd-last int) is N*K for the pre-split weight and 0 otherwise.
        w3 = n * k if w_mode == rgc.W_BF16X3 else 0
        meta.pop("REDUCE_BLOCK", 0)  # a launcher setting, not a constexpr
        fixups = (False, True) if rg.uses_tile_counters(cfg) else (False,)
        for fixup in fixups:
            sem = _Mock(torch.int32 if fixup else torch.float32)
            dot_args: tuple[object, ...] = (_Mock(torch.float32), sem, _Mock(torch.float32))
            dot_args += (_Mock(torch.bfloat16),)
            dot_args += (_Mock(w_dtype), 7, n, k, k, k, w3, 7 * n, n, 1.0)
            kw = {**meta, "N16": True, "FIXUP": fixup, **launch}
            v = variant + ("+fixup" if fixup else "")
            out.append(AotVariant("router_gemm", cfg, v, rg._router_dot_kernel, dot_args, kw))
    # The second-launch reduce kernel of every split-K config (rg.reduce_config), each once.
    reduces = {
        (r := rg.reduce_config(c)).name: r
        for c in rg.ROUTER_GEMM_CONFIGS
        if c.kernel == "_router_dot_kernel" and c["SPLIT_K"] > 1
    }
    for name, rcfg in sorted(reduces.items()):
        launch = {"launch_pdl": True} if rcfg["USE_PDL"] else {}
        out.append(
            AotVariant(
                "router_gemm",
                rcfg,
                name,
                rg._router_reduce_kernel,
                (_Mock(torch.float32), _Mock(torch.float32), 7 * n),
                {**rcfg.constexprs(), "N16": True, **launch},
            )
        )
    return out


#: The scale layouts the AOT gate builds every fp8_einsum config for (see fp8_einsum_variants).
FP8_EINSUM_LAYOUTS = ("fp32", "ue8m0-int32", "ue8m0-int32-blocks", "ue8m0-u8")


def fp8_einsum_variants(layouts: Sequence[str] = FP8_EINSUM_LAYOUTS) -> list[AotVariant]:
    """Every fp8_einsum config for each scale layout (TP=2 shapes: G=4, D=1024, R=4096), each
    with the jitted entry of its path (every path takes the same arguments).

    ``fp32``: recipe (1,128,128), sw fp32 [G, D/128, R/128] contiguous (SM90 layout).
    ``ue8m0-int32``: recipe (1,1,128), sa/sw int32 packed, sw MN-major TMA-aligned [G, D, R/512]
    with strides (D*R/512, 1, D) (DeepGEMM's transformed layout,
    docs/reference/vllm-code-paths.md#o_proj-scales).
    ``ue8m0-int32-blocks``: that layout read as block scales, the view ``sw[:, ::128, :]``
    [G, D/128, R/512] with strides (D*R/512, 128, D) that the dispatcher passes once
    ``fp8_einsum.block_scales_view`` has found every row of each 128-row block equal (GB10's
    served scales, whose rows are copies of the checkpoint's 128x128 block scales).
    ``ue8m0-u8``: float8_e8m0fnu scales viewed as uint8, sw [G, D, R/128] contiguous.

    Raises:
        ValueError: a layout not named above.
    """
    from . import fp8_einsum as fe

    d, r = 1024, 4096
    kb = r // 128
    out: list[AotVariant] = []
    for layout in layouts:
        if layout == "fp32":
            s_dtype, sa_kind, sw_kind, per_row = torch.float32, 0, 0, False
            sw_strides = ((d // 128) * kb, kb, 1)
        elif layout == "ue8m0-int32":
            s_dtype, sa_kind, sw_kind, per_row = torch.int32, 1, 1, True
            sw_strides = (d * (kb // 4), 1, d)
        elif layout == "ue8m0-int32-blocks":
            s_dtype, sa_kind, sw_kind, per_row = torch.int32, 1, 1, False
            sw_strides = (d * (kb // 4), 128, d)
        elif layout == "ue8m0-u8":
            s_dtype, sa_kind, sw_kind, per_row = torch.uint8, 2, 2, True
            sw_strides = (d * kb, kb, 1)
        else:
            raise ValueError(f"unknown scale layout {layout!r}")
        for cfg in fe.FP8_EINSUM_CONFIGS + fe.FP8_EINSUM_SUM_CONFIGS:
            split = cfg["SPLIT_R"] > 1
            args = (
                _Mock(torch.bfloat16),
                # workspace and tile counters; without a split the launcher passes ``out`` for both
                _Mock(torch.float32 if split else torch.bfloat16),
                _Mock(torch.int32 if split else torch.bfloat16),
                _Mock(torch.float8_e4m3fn),
                _Mock(s_dtype),
                _Mock(torch.float8_e4m3fn),
                _Mock(s_dtype),
                7,
                d,
                r,
                4 * d,
                d,  # out [T, G, D] contiguous (G=4)
                r,
                7 * r,  # a group-major: strides (R, T*R, 1); T*R is always a multiple of 16
                d * r,
                r,
                7,
                7,
                7,  # sa strides (T-dependent: not specialised)
                *sw_strides,
                7,  # workspace split stride T*G*D (not specialised)
            )
            kwargs = {"SA_KIND": sa_kind, "SW_KIND": sw_kind, "SW_PER_ROW": per_row, **cfg.constexprs()}
            if cfg.constexprs().get("USE_PDL"):  # decode configs and their split sums
                kwargs["launch_pdl"] = True
            mma: str | None = "fp8"
            if cfg.kernel in fe.MX_KERNELS:
                mma = "mxf8"
            elif fe.kernel_path(cfg) == "split-sum":  # the split sum has no MMA
                mma = None
            out.append(AotVariant("fp8_einsum", cfg, layout, fe.jitted_kernel(cfg), args, kwargs, mma))
    return out


def all_variants() -> list[AotVariant]:
    """Every variant of every kernel (what ``sparkpair kernels build`` compiles)."""
    require_triton()
    return router_variants() + fp8_einsum_variants()


def build(
    archs: Sequence[str] = DEFAULT_ARCHS,
    cache_dir: str | None = None,
    variants: Sequence[AotVariant] | None = None,
    progress: Callable[[AotResult], None] | None = None,
    ptxas: str | None = None,
) -> list[AotResult]:
    """Compile ``variants`` (default: all) for each arch; return one result per (variant, arch).

    ``ptxas``: as :func:`compile_variant`'s (sm_12x builds only).

    Raises:
        ValueError: an unknown arch name.
    """
    for a in archs:
        if a not in AOT_TARGETS:
            raise ValueError(f"unknown arch {a!r}; known: {', '.join(AOT_TARGETS)}")
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
    todo = list(variants) if variants is not None else all_variants()
    results: list[AotResult] = []
    for arch in archs:
        for v in todo:
            r = compile_variant(v, arch, cache_dir, ptxas if AOT_TARGETS[arch] // 10 == 12 else None)
            results.append(r)
            if progress is not None:
                progress(r)
    return results


__all__ = [
    "AOT_TARGETS",
    "BUNDLED_PTXAS",
    "DEFAULT_ARCHS",
    "FP8_EINSUM_LAYOUTS",
    "AotResult",
    "AotVariant",
    "HAS_TRITON",
    "all_variants",
    "build",
    "bundled_ptxas",
    "compile_variant",
    "fp8_einsum_variants",
    "ptxas_release",
    "router_variants",
    "shared_memory_limit",
]
