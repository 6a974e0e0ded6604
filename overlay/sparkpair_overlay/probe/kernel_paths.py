"""The o_proj kernel's paths, each rated at every served token count on the served operands.

:func:`probe_kernel_paths` runs every config the kernel plan may take
(``sparkpair_overlay.kernels.fp8_einsum.FP8_EINSUM_PLAN_CANDIDATES``: the promoting decode tiles, the
K-split and unsplit tile loops, the block-scaled decode tile and tile loops, promoted per K tile and
MMA-accumulated) at each token count T in its candidate range
(``sparkpair_overlay.kernels.fp8_einsum.candidate_range``), on the ``wo_a`` layout and recipe the o_proj
decision serves, with the operands built as the probe's o_proj rows build them (vLLM's own weight
post-processing and activation quant where vLLM is installed, :mod:`sparkpair_overlay.probe.operands`)
and handed to the kernel as the overlay's dispatcher hands them (a 2-D ``wo_a`` viewed ``[G, D, R]``,
per-row scales that repeat their 128-row block read as block scales). Each run is checked against
fp64 over the whole K (R = 4096: so the rows of the MMA-accumulated block-scaled configs answer whether
GB10's MMA keeps fp32 over 4096 products, beside the promoted ones), timed as CUDA-graph replay, and
recorded with the Triton version and the MMA instructions of the kernels it launched (read from their
PTX, :func:`sparkpair_overlay.kernels.aot.mma_instructions`). The rows are the probe JSON's
``kernel_paths`` (:class:`sparkpair_overlay.kernel_path_row.KernelPathRow`); the choice among them is
:mod:`sparkpair_overlay.o_proj_configs`'s.

The token counts come from the served profile (:func:`served_tokens`): every CUDA-graph capture size
(decode, verify and draft steps) and the prefill chunk.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..serve_args import serve_arg
from ..serve_matrix import Recipe

__all__ = [
    "DEFAULT_PREFILL_CHUNK",
    "ServedTokens",
    "accumulation_summary",
    "probe_kernel_paths",
    "served_tokens",
]

#: ``--max-num-batched-tokens`` vLLM 0.33's OpenAI server takes on GB10 when the profile sets none:
#: ``EngineArgs.get_batch_defaults`` keeps GB10 on its small tier (2048) although it has the memory
#: of an H100 (docs/reference/vllm-code-paths.md#prefill-chunk).
DEFAULT_PREFILL_CHUNK = 2048


@dataclass(frozen=True)
class ServedTokens:
    """The token counts the served profile hands the o_proj.

    Attributes:
        decode: the CUDA-graph capture sizes (decode, verify and draft steps run at these, padded up).
        prefill_chunk: the largest prefill chunk (``--max-num-batched-tokens``).
        source: where they were read (the profile's name and the flags).
    """

    decode: tuple[int, ...]
    prefill_chunk: int
    source: str

    def o_proj_ts(self) -> tuple[int, ...]:
        """The token counts of the probe's o_proj rows: every capture size and the prefill chunk."""
        return tuple(sorted({*self.decode, self.prefill_chunk}))

    def kernel_path_ts(self) -> tuple[int, ...]:
        """The token counts the kernel paths are rated at: every capture size, the powers of two between
        the largest capture size and the prefill chunk (uncaptured mixed and prefill batches: the plan's
        ranges there are set by these points), and the chunk."""
        top = max(self.decode)
        mid = [1 << k for k in range(1, 31) if top < 1 << k < self.prefill_chunk]
        return tuple(sorted({*self.decode, *mid, self.prefill_chunk}))

    def to_json(self) -> dict[str, Any]:
        return {"decode": list(self.decode), "prefill_chunk": self.prefill_chunk, "source": self.source,
                "o_proj": list(self.o_proj_ts()), "kernel_paths": list(self.kernel_path_ts())}


def served_tokens(args: Sequence[str], source: str) -> ServedTokens:
    """The token counts a profile's ``vllm serve`` arguments make (pure).

    Decode: the ``cudagraph_capture_sizes`` listed in ``--compilation-config``; without a list, the sizes
    vLLM 0.33 builds from ``--max-cudagraph-capture-size`` (1, 2, 4, then multiples of 8 up to it:
    docs/reference/speculation.md, "vLLM"). Prefill: ``--max-num-batched-tokens``, else vLLM 0.33's GB10
    default :data:`DEFAULT_PREFILL_CHUNK`.

    Raises:
        ValueError: ``--compilation-config`` is not a JSON object, a size is not a positive integer, or the
            arguments give neither a size list nor a maximum; the message names ``source``, the flag,
            the value seen and the value wanted.
    """
    sizes: list[int] | None = None
    raw = serve_arg(args, "--compilation-config")
    if raw is not None:
        try:
            cc = json.loads(raw)
        except ValueError:
            cc = None
        if not isinstance(cc, dict):
            raise ValueError(f"{source}: --compilation-config {raw[:80]!r}; wanted a JSON object")
        listed = cc.get("cudagraph_capture_sizes")
        if listed is not None:
            if not isinstance(listed, list) or not listed or not all(
                    isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in listed):
                raise ValueError(f"{source}: --compilation-config cudagraph_capture_sizes={listed!r}; "
                                 "wanted a non-empty list of positive integers")
            sizes = sorted(set(listed))
    top_raw = serve_arg(args, "--max-cudagraph-capture-size")
    if sizes is None:
        if top_raw is None:
            raise ValueError(f"{source}: neither cudagraph_capture_sizes in --compilation-config nor "
                             "--max-cudagraph-capture-size; wanted one of them (the probe rates the o_proj "
                             "at every CUDA-graph capture size)")
        top = _positive(top_raw, "--max-cudagraph-capture-size", source)
        sizes = [s for s in [1, 2, 4, *range(8, top + 1, 8)] if s <= top]
    chunk_raw = serve_arg(args, "--max-num-batched-tokens")
    chunk = DEFAULT_PREFILL_CHUNK if chunk_raw is None else _positive(chunk_raw, "--max-num-batched-tokens",
                                                                        source)
    how = "listed" if raw is not None and "cudagraph_capture_sizes" in str(raw) else "from the maximum"
    where = "--max-num-batched-tokens" if chunk_raw is not None else "vLLM 0.33's GB10 default"
    return ServedTokens(tuple(sizes), chunk,
                        f"{source}: capture sizes {how}, prefill chunk {chunk} ({where})")


def _positive(raw: str, flag: str, source: str) -> int:
    try:
        v = int(raw)
    except ValueError:
        v = 0
    if v < 1:
        raise ValueError(f"{source}: {flag} {raw!r}; wanted a positive integer")
    return v


@contextmanager
def _launched_kernels(fns: Sequence[Any]) -> Iterator[list[Any]]:
    """Collect what each ``fn[grid](...)`` launch returns (Triton's compiled kernel) while inside."""
    seen: list[Any] = []
    patched = []
    for fn in fns:
        orig = fn.run

        def run(*args: Any, _orig: Any = orig, **kwargs: Any) -> Any:
            kernel = _orig(*args, **kwargs)
            seen.append(kernel)
            return kernel

        fn.run = run  # an instance attribute: JITFunction.__getitem__ calls self.run
        patched.append(fn)
    try:
        yield seen
    finally:
        for fn in patched:
            del fn.run


def _instructions(kernels: Sequence[Any]) -> tuple[str, ...]:
    """The MMA instruction forms in the PTX of ``kernels`` (none under Triton's interpreter)."""
    from ..kernels.aot import mma_instructions

    forms: set[str] = set()
    for k in kernels:
        asm = getattr(k, "asm", None)
        ptx = asm.get("ptx", "") if asm is not None else ""
        forms |= set(mma_instructions(ptx if isinstance(ptx, str) else ptx.decode()))
    return tuple(sorted(forms))


def probe_kernel_paths(
    tp: int,
    weight: str,
    recipe: Recipe,
    ts: Sequence[int],
    *,
    configs: Sequence[str] | None = None,
    device: str = "cuda",
    timer: Callable[[Callable[[], object]], float] | None = None,
    use_vllm: bool | None = None,
    transform: Callable[..., Any] | None = None,
    dims: tuple[int, int] | None = None,
    on_config: Callable[[str, int], None] | None = None,
) -> list[dict[str, Any]]:
    """``kernel_paths`` rows: each plan candidate of ``fp8_einsum`` at each T of ``ts`` in its range.

    Args:
        tp: tensor-parallel size (G = 8 / tp groups).
        weight: the served ``wo_a`` layout (:data:`sparkpair_overlay.serve_matrix.WEIGHT_LAYOUTS`);
            recipe: the recipe the activation is quantised with.
        ts: token counts (:meth:`ServedTokens.kernel_path_ts`).
        configs: config names to rate (default every plan candidate).
        device: where to run (``cpu`` under ``TRITON_INTERPRET=1``: the CPU tiers).
        timer: µs per call (default CUDA-graph replay, :func:`sparkpair_overlay.probe.kernels.graph_us`).
        use_vllm, transform: :func:`sparkpair_overlay.probe.operands.post_process_wo_a`'s.
        dims: ``(D, R)`` per group (default :data:`sparkpair_overlay.probe.kernels.O_PROJ_DIMS`).
        on_config: progress callback ``(config, T)``.

    Returns:
        Dict rows as :class:`sparkpair_overlay.kernel_path_row.KernelPathRow` writes them, plus ``source``
        (``vllm`` | ``numerics``) and ``error`` (why not ok). A config that raises, leaves NaN/inf or misses
        the o_proj tolerance is ``ok: false`` and untimed.

    Raises:
        ValueError: the post-processing made another layout than ``weight``, or a config name is unknown.
    """
    import functools

    import torch
    import triton

    from sparkpair_overlay.kernels import fp8_einsum as fe

    from ..numerics import rel_fro
    from ..o_proj_configs import KERNEL, layout_key
    from ..o_proj_route import act_layout_of, triton_operands, weight_layout
    from . import operands as ops
    from .kernels import O_PROJ_DIMS, O_PROJ_TOL, graph_us

    timer = timer or graph_us
    by_name = {c.name: c for c in fe.FP8_EINSUM_PLAN_CANDIDATES}
    unknown = [n for n in (configs or ()) if n not in by_name]
    if unknown:
        raise ValueError(f"probe_kernel_paths: configs {unknown} are not plan candidates; known: "
                         f"{', '.join(by_name)}")
    todo = [by_name[n] for n in configs] if configs else list(fe.FP8_EINSUM_PLAN_CANDIDATES)
    g, (d, r) = 8 // tp, dims or O_PROJ_DIMS
    w2d, exps = ops.checkpoint_wo_a(g, d, r, seed=1)
    w, sw, src_w = ops.post_process_wo_a(weight, w2d, exps, g, device=device, use_vllm=use_vllm,
                                         transform=transform)
    built = weight_layout(w, sw, g, d)
    if built != weight:
        raise ValueError(f"probe_kernel_paths: the post-processing made {built}, not {weight}")
    version = str(triton.__version__)
    jitted = list(fe.JITTED.values())
    rows: list[dict[str, Any]] = []
    for t in ts:
        a, sa, src_a = ops.activation(recipe, t, g, r, device=device, seed=1 + t, use_vllm=use_vllm)
        layout = layout_key(weight, recipe)
        if act_layout_of(a, sa) != layout.split("/")[1]:
            raise ValueError(f"probe_kernel_paths: the activation quant made {act_layout_of(a, sa)} for "
                             f"recipe {recipe}, not {layout.split('/')[1]}")
        ref = ops.reference(a, sa, w2d.to(device), exps, g)
        out = torch.full((t, g, d), float("nan"), dtype=torch.bfloat16, device=device)
        (a2, sa2), (w2, sw2), krecipe = triton_operands((a, sa), (w, sw), out)
        if krecipe[1] == 1:  # per-row weight scales: the dispatcher's block view once its check answers
            view = fe.block_scales_view(sw2)
            if view is None and sw2.is_cuda:
                torch.cuda.synchronize()
                view = fe.block_scales_view(sw2)
            if view is not None:
                sw2, krecipe = view, (1, 128, 128)
        source = "vllm" if "vllm" in (src_w, src_a) else "numerics"
        for cfg in todo:
            span = fe.candidate_range(cfg)
            if span is None or not span[0] <= t <= span[1]:
                continue
            if on_config is not None:
                on_config(cfg.name, t)
            row: dict[str, Any] = {"kernel": KERNEL, "path": fe.kernel_path(cfg), "config": cfg.name,
                                   "tokens": t, "t_range": list(span), "layout": layout, "ok": False,
                                   "us": None, "err": None, "triton": version, "instructions": [],
                                   "source": source, "error": None}
            call = functools.partial(fe.fp8_einsum_with_config, "bhr,hdr->bhd", (a2, sa2), (w2, sw2), out,
                                     krecipe, cfg.name)
            try:
                out.fill_(float("nan"))
                with _launched_kernels(jitted) as launched:
                    call()
                if out.is_cuda:
                    torch.cuda.synchronize()
                row["instructions"] = list(_instructions(launched))
                err = rel_fro(out, ref)  # inf on NaN/inf
                row["err"] = err
                row["ok"] = err <= O_PROJ_TOL
                if not row["ok"]:
                    row["error"] = f"wrong numbers: error {err:.3g} > tolerance {O_PROJ_TOL:g}"
                else:
                    row["us"] = float(timer(call))
            except Exception as exc:  # noqa: BLE001 - a failing config is a probe result
                row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
            rows.append(row)
    return rows


def accumulation_summary(rows: Sequence[dict[str, Any]], k: int) -> dict[str, Any]:
    """The K-accumulation question in numbers: the largest relative Frobenius error against fp64 of the
    block-scaled tile loop promoted per K tile (``mx-tile``) and accumulated in the MMA over the whole K
    (``mx-tile-acc``), over the rows that ran (``None`` where none did), with ``k`` (R, the products
    each output sums)."""
    out: dict[str, Any] = {"k": k}
    for path in ("mx-tile", "mx-tile-acc"):
        errs = [float(r["err"]) for r in rows if r["path"] == path and r.get("err") is not None]
        out[path] = max(errs) if errs else None
    return out
