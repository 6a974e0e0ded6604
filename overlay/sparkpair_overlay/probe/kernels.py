"""On-device probes of the overlay's own patched kernels: the router GEMM and the o_proj ``fp8_einsum``.

Runs every candidate path of each patched kernel at the served model's shapes (router: M in
{1, 8, 32, 36, 64, 128, 512}, bf16 and fp32 gate weights [256, 4096]; o_proj: T in
{1, 32, 36, 2048}, G = 8 / TP groups, D=1024, R=4096, both recipes), compares each against an
fp64 reference, and times it as CUDA-graph replay per call. A path that raises, returns NaN/inf or misses its
tolerance is recorded with ``ok: false`` (and the error), so the plan never picks it. Rows are
the ``router`` and ``o_proj`` lists of the probe JSON (:class:`sparkpair_overlay.probe_results.ProbeResults`).
Needs CUDA.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..deepgemm import locate_deepgemm

#: 36 = a DSpark verify / draft step of the default profile (serve_paths.VERIFY_TOKENS), so the
#: router's Triton/cuBLAS crossover and the o_proj paths are measured at that token count too.
ROUTER_MS = (1, 8, 32, 36, 64, 128, 512)
O_PROJ_TS = (1, 32, 36, 2048)
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


def probe_o_proj(tp: int) -> list[dict[str, Any]]:
    import torch

    from sparkpair_overlay.kernels import fp8_einsum as fe

    from ..numerics import Encoding, fp8_einsum_reference, make_fp8_operands, rel_fro

    rows: list[dict[str, Any]] = []
    g, d, r = 8 // tp, 1024, 4096
    deepgemm, deepgemm_why = deepgemm_fp8_einsum()
    for recipe in ((1, 1, 128), (1, 128, 128)):
        for t in O_PROJ_TS:
            enc: Encoding = "int32" if recipe[1] == 1 else "fp32"  # as vLLM hands each recipe's scales
            a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, g, d, r, recipe, enc, seed=1 + t)
            ref = fp8_einsum_reference(a, sa_f, w, sw_f)
            for backend, fn in (("triton", fe.fp8_einsum), ("deepgemm", deepgemm)):
                row: dict[str, Any] = {"backend": backend, "recipe": list(recipe), "t": t, "groups": g}
                if fn is None:
                    row.update(ok=False, us=None, error=deepgemm_why)
                    rows.append(row)
                    continue
                out = torch.full((t, g, d), float("nan"), dtype=torch.bfloat16, device="cuda")
                try:
                    fn("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
                    torch.cuda.synchronize()
                    err = rel_fro(out, ref)  # inf on NaN/inf
                    row["rel_fro_err"] = err
                    row["ok"] = err <= O_PROJ_TOL
                    call = functools.partial(fn, "bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
                    row["us"] = graph_us(call)
                except Exception as exc:  # noqa: BLE001
                    row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
    return rows
