"""On-device probes of the overlay's own patched kernels: the router GEMM and the o_proj ``fp8_einsum``.

Runs every candidate path of each patched kernel at the served model's shapes (router: M in
{1, 8, 32, 36, 64, 128, 512}, bf16 and fp32 gate weights [256, 4096]; o_proj: T in
{1, 32, 36, 2048} or the served profile's token counts, G = 8 / TP groups, D=1024, R=4096), on the
operands the served model hands it,
compares each against an fp64 reference, and times it as CUDA-graph replay per call. For the o_proj
that means: for each ``wo_a`` layout the served switches can make (one per linear backend the probe
may choose, :func:`o_proj_layouts`), every (backend, recipe) the matrix serves on it
(:func:`sparkpair_overlay.serve_matrix.o_proj_candidates_on`), with the operands built by vLLM's own
post-processing and activation quant (:mod:`sparkpair_overlay.probe.operands`), each row recording
the layout it was taken on. A path that raises, returns NaN/inf or misses its tolerance is recorded
with ``ok: false`` (and the error), so the plan never picks it. Rows are the ``router`` and
``o_proj`` lists of the probe JSON (:class:`sparkpair_overlay.probe_results.ProbeResults`).
Needs CUDA (or, for the CPU tiers, Triton's interpreter and an injected timer).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..deepgemm import locate_deepgemm
from ..serve_matrix import ROUTER_LAYOUTS, Switches, linear_outcome, o_proj_candidates_on, with_linear

#: 36 = a DSpark verify / draft step of the default profile (serve_paths.VERIFY_TOKENS), so the
#: router's Triton/cuBLAS crossover and the o_proj paths are measured at that token count too.
ROUTER_MS = (1, 8, 32, 36, 64, 128, 512)
#: Token counts when no profile is given (the DSv4 profile's one decode token, its 32- and 36-token
#: capture sizes, and vLLM 0.33's GB10 prefill chunk); ``sparkpair probe`` reads the profile's.
O_PROJ_TS = (1, 32, 36, 2048)
#: ``(D, R)`` per group of DeepSeek-V4-Flash's o_proj (docs/reference/vllm-code-paths.md#dsv4-shapes).
O_PROJ_DIMS = (1024, 4096)
ROUTER_TOL = {"bfloat16": 1e-5, "float32": 2e-6}  # max|err| / max|ref| (docs/kernels.md "Probe")
O_PROJ_TOL = 1e-2  # relative Frobenius (docs/kernels.md "Probe")


def graph_us(fn: Callable[[], object], calls: int = 20, reps: int = 10) -> float:
    """Median µs per call of ``fn()`` under CUDA-graph replay.

    The timing is :func:`sparkpair_overlay.numerics.graph_time_us`'s (p50).
    """
    from ..numerics import graph_time_us

    return graph_time_us(lambda _i: fn(), calls=calls, reps=reps, warmup=2)[1]


def probe_router() -> list[dict[str, Any]]:
    import torch

    from sparkpair_overlay.kernels import router_gemm as rg

    from ..numerics import max_rel

    rows: list[dict[str, Any]] = []
    n, k = 256, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    for w_dtype, ours_path, theirs_path in (
        (torch.bfloat16, "triton-bf16-lowM", "cublas"),
        (torch.float32, "triton-fp32-accurate", "fp32-linear"),
    ):
        wname = "bfloat16" if w_dtype == torch.bfloat16 else "float32"
        w = (torch.randn(n, k, device="cuda", generator=gen) * k**-0.5).to(w_dtype)
        planes = rg.bf16x3_split(w) if w_dtype == torch.float32 else None
        for m in ROUTER_MS:
            x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
            ref = x.double() @ w.double().t()
            cfg = rg.select_router_config(
                m, w_dtype, k, presplit=planes is not None or w_dtype != torch.float32
            )
            # "ours" is the public dispatcher the overlay calls (it may itself pick cuBLAS for this M)
            for path, ours in ((ours_path, True), (theirs_path, False)):
                row: dict[str, Any] = {
                    "path": path,
                    "weight_dtype": wname,
                    "m": m,
                    "shape": [n, k],
                    "layout": ROUTER_LAYOUTS[wname],
                    "config": (cfg.name if cfg is not None else "cublas") if ours else "torch",
                }

                def call(x: Any = x, w: Any = w, ours: bool = ours, planes: Any = planes) -> Any:
                    if not ours:
                        return rg.router_gemm_with_config(x, w, None)
                    return rg.router_gemm(x, w, planes)  # as the overlay's GateLinear calls it

                try:
                    out = call()
                    err = max_rel(out, ref)
                    finite = bool(torch.isfinite(out).all())
                    row["max_rel_err"] = err
                    row["ok"] = finite and err <= ROUTER_TOL[wname]
                    row["us"] = graph_us(call)
                except Exception as exc:  # noqa: BLE001 - a failing path is a probe result
                    row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
    return rows


def deepgemm_fp8_einsum() -> tuple[Any, str | None]:
    """``(vLLM's DeepGEMM fp8_einsum, None)`` when the DeepGEMM vLLM uses is usable here, else
    ``(None, why)`` (:func:`sparkpair_overlay.deepgemm.locate_deepgemm`: the vendored
    ``vllm.third_party.deep_gemm`` or a top-level ``deep_gemm``, in vLLM's precedence)."""
    loc = locate_deepgemm()
    if not loc.usable:
        return None, f"DeepGEMM not usable: {loc.reason}"
    try:
        from vllm.utils.deep_gemm import fp8_einsum
    except Exception as exc:  # noqa: BLE001 - reported as the row's error
        return None, f"vllm.utils.deep_gemm.fp8_einsum: {type(exc).__name__}: {exc}"
    return fp8_einsum, None


#: The ``--linear-backend`` values whose ``wo_a`` layouts the o_proj is probed on (the serve-path
#: probe's linear candidates, sparkpair_overlay.probe.serve_paths, and vLLM's automatic choice).
LINEAR_CANDIDATES = ("auto", "deep_gemm", "cutlass", "b12x", "triton")


def o_proj_layouts(base: Switches, linear_backends: Sequence[str] = LINEAR_CANDIDATES) -> tuple[str, ...]:
    """The ``wo_a`` layouts the served model can hand the o_proj under ``base``'s environment, one per
    linear backend that leaves a servable ``wo_a`` (in first-seen order). With a top-level ``deep_gemm``
    the 3-D layout is built by that package's transform (through vLLM's post-processing): it is asked
    for as vendored DeepGEMM 2.8.1 would make it, and each row records what it really made."""
    out: list[str] = []
    for lb in linear_backends:
        o = linear_outcome(with_linear(base, lb))
        weight = o.weight
        if weight == "external":
            weight = "w3-ue8m0-row" if base.use_deep_gemm_e8m0 else "w3-fp32-block"
        if weight is not None and o.refusal is None and weight not in out:
            out.append(weight)
    return tuple(out)


def probe_o_proj(
    tp: int,
    layouts: Sequence[str],
    *,
    deepgemm: str = "vendored",
    ts: Sequence[int] = O_PROJ_TS,
    device: str = "cuda",
    timer: Callable[[Callable[[], object]], float] | None = None,
    use_vllm: bool | None = None,
    transform: Callable[..., Any] | None = None,
    dims: tuple[int, int] = O_PROJ_DIMS,
) -> list[dict[str, Any]]:
    """o_proj rows: every (backend, recipe) the matrix serves on each of ``layouts``, at each T.

    Args:
        tp: tensor-parallel size (G = 8 / tp groups).
        layouts: the ``wo_a`` layouts to build (:func:`o_proj_layouts`).
        deepgemm: the DeepGEMM vLLM imports here (the matrix's candidates depend on it).
        ts: token counts. device: where to run.
        timer: µs per call (default CUDA-graph replay, :func:`graph_us`).
        use_vllm, transform: :func:`sparkpair_overlay.probe.operands.post_process_wo_a`'s.
        dims: ``(D, R)`` per group (DeepSeek-V4-Flash: 1024, 4096).

    Returns:
        Dict rows: backend, recipe, t, groups, weight_layout and act_layout (read off the tensors built),
        ok, us, err (relative Frobenius vs fp64), error, source (``vllm`` | ``numerics``).
    """
    import torch

    from sparkpair_overlay.kernels import fp8_einsum as fe

    from ..numerics import rel_fro
    from ..o_proj_route import act_layout_of, deepgemm_rejects, triton_operands, weight_layout
    from . import operands as ops

    timer = timer or graph_us
    rows: list[dict[str, Any]] = []
    g, (d, r) = 8 // tp, dims
    deepgemm_fn, deepgemm_why = deepgemm_fp8_einsum() if any(
        b == "deepgemm" for lay in layouts for b, _ in o_proj_candidates_on(lay, deepgemm)) else (None, None)
    w2d, exps = ops.checkpoint_wo_a(g, d, r, seed=1)
    acts: dict[tuple[tuple[int, int, int], int], tuple[Any, Any, Any, str]] = {}
    for layout in layouts:
        w, sw, source = ops.post_process_wo_a(layout, w2d, exps, g, device=device, use_vllm=use_vllm,
                                              transform=transform)
        built = weight_layout(w, sw, g, d)
        for backend, recipe in o_proj_candidates_on(layout, deepgemm):
            for t in ts:
                key = (recipe, t)
                if key not in acts:
                    a, sa, src_a = ops.activation(recipe, t, g, r, device=device, seed=1 + t,
                                                  use_vllm=use_vllm)
                    acts[key] = (a, sa, ops.reference(a, sa, w2d.to(device), exps, g), src_a)
                a, sa, ref, src_a = acts[key]
                row: dict[str, Any] = {"backend": backend, "recipe": list(recipe), "t": t, "groups": g,
                                       "weight_layout": built or layout, "act_layout": act_layout_of(a, sa),
                                       "source": "vllm" if "vllm" in (source, src_a) else "numerics",
                                       "ok": False, "us": None, "err": None, "error": None}
                # a top-level deep_gemm's transform makes what it makes: the row records it (the
                # construction check serves it only with such rows); vLLM's vendored one must match
                if built != layout and not (deepgemm == "external" and built is not None):
                    row["error"] = f"the post-processing made {built}, not {layout}"
                    rows.append(row)
                    continue
                out = torch.full((t, g, d), float("nan"), dtype=torch.bfloat16, device=device)
                if backend == "triton":
                    a2, b2, krecipe = triton_operands((a, sa), (w, sw), out)
                    call = functools.partial(fe.fp8_einsum, "bhr,hdr->bhd", a2, b2, out, recipe=krecipe)
                else:
                    why = deepgemm_why or (deepgemm_rejects((a, sa), (w, sw), out, recipe)
                                           if deepgemm == "vendored" else None)
                    if why is not None or deepgemm_fn is None:
                        row["error"] = why or "DeepGEMM not usable"
                        rows.append(row)
                        continue
                    call = functools.partial(deepgemm_fn, "bhr,hdr->bhd", (a, sa), (w, sw), out,
                                             recipe=recipe)
                try:
                    call()
                    if out.is_cuda:
                        torch.cuda.synchronize()
                    err = rel_fro(out, ref)  # inf on NaN/inf
                    row["err"] = err
                    row["ok"] = err <= O_PROJ_TOL
                    if not row["ok"]:
                        row["error"] = f"wrong numbers: error {err:.3g} > tolerance {O_PROJ_TOL:g}"
                    row["us"] = float(timer(call))
                except Exception as exc:  # noqa: BLE001 - a failing backend is a probe result
                    row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
    return rows
