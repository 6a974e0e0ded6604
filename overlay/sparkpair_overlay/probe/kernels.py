"""On-device probes of the overlay's own patched kernels: the router GEMM and the o_proj ``fp8_einsum``.

Runs every candidate path of each patched kernel at the served model's shapes (router: M in
{1, 8, 32, 36, 64, 128, 512}, bf16 and fp32 gate weights [256, 4096]; o_proj: T in
{1, 32, 36, 2048}, G = 8 / TP groups, D=1024, R=4096, both recipes), compares each against an
fp64 reference, and times it as CUDA-graph replay per call. A path that raises, returns NaN/inf or misses its
tolerance is recorded with ``ok: false`` (and the error), so the plan never picks it. Rows are
the ``router`` and ``o_proj`` lists of the probe JSON (:class:`sparkpair_overlay.plan.ProbeResults`).
Needs CUDA.
"""

from __future__ import annotations

from typing import Any

from ..deepgemm import locate_deepgemm

#: 36 = a DSpark verify / draft step of the default profile (serve_paths.VERIFY_TOKENS), so the
#: router's Triton/cuBLAS crossover and the o_proj paths are measured at that token count too.
ROUTER_MS = (1, 8, 32, 36, 64, 128, 512)
O_PROJ_TS = (1, 32, 36, 2048)
ROUTER_TOL = {"bfloat16": 1e-5, "float32": 2e-6}  # max|err| / max|ref| (docs/kernels.md "Probe")
O_PROJ_TOL = 1e-2  # relative Frobenius (docs/kernels.md "Probe")


def graph_us(fn: Any, calls: int = 20, reps: int = 10) -> float:
    """Median µs per call of ``fn()`` under CUDA-graph replay (``calls`` calls per graph)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / calls)
    return sorted(times)[len(times) // 2]


def probe_router() -> list[dict[str, Any]]:
    import torch

    from sparkpair_overlay.kernels import router_gemm as rg

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
                    err = float((out.double() - ref).abs().max() / ref.abs().max())
                    finite = bool(torch.isfinite(out).all())
                    row["max_rel_err"] = err
                    row["ok"] = finite and err <= ROUTER_TOL[wname]
                    row["us"] = graph_us(call)
                except Exception as exc:  # noqa: BLE001 - a failing path is a probe result
                    row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
    return rows


def _fp8_operands(t: int, g: int, d: int, r: int, recipe: tuple[int, int, int], gen: Any) -> tuple[Any, ...]:
    """Random e4m3 operands with power-of-two scales in vLLM's layouts, plus decoded fp32 scales."""
    import torch

    from sparkpair_overlay.kernels.fp8_einsum import decode_ue8m0

    kb = r // 128
    a = (torch.randn(g, t, r, device="cuda", generator=gen) * 200).clamp(-448, 448)
    a = a.to(torch.float8_e4m3fn).transpose(0, 1)  # group-major, as fused_inv_rope_fp8_quant
    w = (torch.randn(g, d, r, device="cuda", generator=gen) * 100).clamp(-448, 448).to(torch.float8_e4m3fn)
    per_row = recipe[1] == 1
    ea = torch.randint(119, 123, (t, g, kb), device="cuda", generator=gen, dtype=torch.int32)
    ew = torch.randint(
        115, 119, (g, d if per_row else d // 128, kb), device="cuda", generator=gen, dtype=torch.int32
    )
    sa_f, sw_f = decode_ue8m0(ea), decode_ue8m0(ew)
    t4 = (t + 3) // 4 * 4
    if per_row:  # packed UE8M0, sa MN-major TMA-aligned, sw MN-major

        def pack(e: Any) -> Any:
            e = e.view(*e.shape[:-1], -1, 4).to(torch.int64)
            word = e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)
            return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)

        src_a, ks = pack(ea), kb // 4
        sw = pack(ew).transpose(1, 2).contiguous().transpose(1, 2)
        dtype = torch.int32
    else:
        src_a, ks = sa_f, kb
        sw = sw_f.contiguous()
        dtype = torch.float32
    buf = torch.zeros(g * ks * t4, dtype=dtype, device="cuda")
    sa = buf.as_strided((g, t, ks), (ks * t4, 1, t4)).transpose(0, 1)
    sa.copy_(src_a)
    return a, sa, w, sw, sa_f, sw_f


def _fp8_reference(a: Any, sa_f: Any, w: Any, sw_f: Any) -> Any:
    import torch

    d = w.shape[1]
    A = a.double() * sa_f.double().repeat_interleave(128, -1)
    swx = sw_f.double().repeat_interleave(128, -1)
    if sw_f.shape[1] != d:
        swx = swx.repeat_interleave(128, 1)[:, :d]
    return torch.einsum("tgr,gdr->tgd", A, w.double() * swx)


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

    rows: list[dict[str, Any]] = []
    g, d, r = 8 // tp, 1024, 4096
    gen = torch.Generator(device="cuda").manual_seed(1)
    deepgemm, deepgemm_why = deepgemm_fp8_einsum()
    for recipe in ((1, 1, 128), (1, 128, 128)):
        for t in O_PROJ_TS:
            a, sa, w, sw, sa_f, sw_f = _fp8_operands(t, g, d, r, recipe, gen)
            ref = _fp8_reference(a, sa_f, w, sw_f)
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
                    err = float((out.double() - ref).norm() / ref.norm())
                    row["rel_fro_err"] = err
                    row["ok"] = bool(torch.isfinite(out).all()) and err <= O_PROJ_TOL
                    row["us"] = graph_us(
                        lambda fn=fn, a=a, sa=sa, w=w, sw=sw, out=out, recipe=recipe: fn(
                            "bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe
                        )
                    )
                except Exception as exc:  # noqa: BLE001
                    row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
    return rows
