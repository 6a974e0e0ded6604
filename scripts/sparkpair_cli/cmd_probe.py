"""``sparkpair probe``: on-device kernel self-test that writes the kernel plan's probe JSON.

On the real GPU, runs every candidate path of each patched kernel at the served model's shapes
(router: M in {1, 8, 32, 64, 128, 512}, bf16 and fp32 gate weights [256, 4096]; o_proj: T in {1, 32, 2048},
G = 8 / TP groups, D=1024, R=4096, both recipes), compares each against an fp64 reference, times it
as CUDA-graph replay per call, and writes ``sparkpair-probe/1`` JSON (format: docs/kernels.md and
``sparkpair_overlay.plan.ProbeResults``). A path that raises, returns NaN/inf or misses its
tolerance is recorded with ``ok: false`` (and the error), so the plan never picks it.

Exit codes: 0 written; 2 no CUDA device (nothing written).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()

SCHEMA = "sparkpair-probe/1"
ROUTER_MS = (1, 8, 32, 64, 128, 512)
O_PROJ_TS = (1, 32, 2048)
ROUTER_TOL = {"bfloat16": 1e-5, "float32": 2e-6}  # max|err| / max|ref| (issue 3)
O_PROJ_TOL = 1e-2  # relative Frobenius (issue 3)


def _graph_us(fn: Any, calls: int = 20, reps: int = 10) -> float:
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


def _probe_router() -> list[dict[str, Any]]:
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
                    row["us"] = _graph_us(call)
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


def _deepgemm_fp8_einsum() -> Any:
    """vLLM's DeepGEMM ``fp8_einsum`` when importable here, else None."""
    try:
        import deep_gemm  # noqa: F401
        from vllm.utils.deep_gemm import fp8_einsum

        return fp8_einsum
    except Exception:  # noqa: BLE001
        return None


def _probe_o_proj(tp: int) -> list[dict[str, Any]]:
    import torch
    from sparkpair_overlay.kernels import fp8_einsum as fe

    rows: list[dict[str, Any]] = []
    g, d, r = 8 // tp, 1024, 4096
    gen = torch.Generator(device="cuda").manual_seed(1)
    deepgemm = _deepgemm_fp8_einsum()
    for recipe in ((1, 1, 128), (1, 128, 128)):
        for t in O_PROJ_TS:
            a, sa, w, sw, sa_f, sw_f = _fp8_operands(t, g, d, r, recipe, gen)
            ref = _fp8_reference(a, sa_f, w, sw_f)
            for backend, fn in (("triton", fe.fp8_einsum), ("deepgemm", deepgemm)):
                row: dict[str, Any] = {"backend": backend, "recipe": list(recipe), "t": t, "groups": g}
                if fn is None:
                    row.update(ok=False, us=None, error="DeepGEMM is not importable here")
                    rows.append(row)
                    continue
                out = torch.full((t, g, d), float("nan"), dtype=torch.bfloat16, device="cuda")
                try:
                    fn("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
                    torch.cuda.synchronize()
                    err = float((out.double() - ref).norm() / ref.norm())
                    row["rel_fro_err"] = err
                    row["ok"] = bool(torch.isfinite(out).all()) and err <= O_PROJ_TOL
                    row["us"] = _graph_us(
                        lambda fn=fn, a=a, sa=sa, w=w, sw=sw, out=out, recipe=recipe: fn(
                            "bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe
                        )
                    )
                except Exception as exc:  # noqa: BLE001
                    row.update(ok=False, us=None, error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
    return rows


def run_probe(out_path: Path, tp: int = 2) -> dict[str, Any]:
    """Probe the device and write the JSON to ``out_path``; return it.

    Raises:
        RuntimeError: no CUDA device.
    """
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("sparkpair probe needs a CUDA device; torch.cuda.is_available() is False")
    t0 = time.monotonic()
    major, minor = torch.cuda.get_device_capability()
    with console.status("probing router GEMM ..."):
        router = _probe_router()
    with console.status("probing o_proj fp8_einsum ..."):
        o_proj = _probe_o_proj(tp)
    import triton

    data = {
        "schema": SCHEMA,
        "capability": [major, minor],
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "tp_size": tp,
        "seconds": round(time.monotonic() - t0, 1),
        "router": router,
        "o_proj": o_proj,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, out_path)
    return data


def _print(data: dict[str, Any]) -> None:
    table = Table(
        title=f"sparkpair probe: {data['device']} (cap {data['capability'][0]}.{data['capability'][1]})"
    )
    for col in ("kernel", "path", "case", "ok", "µs", "error vs fp64"):
        table.add_column(col)
    for r in data["router"]:
        table.add_row(
            "router",
            r["path"],
            f"{r['weight_dtype']} M={r['m']}",
            "yes" if r["ok"] else "[red]no[/red]",
            f"{r['us']:.2f}" if r.get("us") else "-",
            f"{r.get('max_rel_err', float('nan')):.2e}",
        )
    for r in data["o_proj"]:
        table.add_row(
            "o_proj",
            r["backend"],
            f"recipe {tuple(r['recipe'])} T={r['t']}",
            "yes" if r["ok"] else "[red]no[/red]",
            f"{r['us']:.2f}" if r.get("us") else "-",
            f"{r['rel_fro_err']:.2e}" if "rel_fro_err" in r else r.get("error", "")[:40],
        )
    console.print(table)


probe_app_help = "On-device kernel self-test: correctness vs fp64 and timing; writes the probe plan JSON."
_OutOpt = Annotated[Path, typer.Option("--out", help="probe JSON to write (SPARKPAIR_PROBE_PLAN reads it)")]
_TpOpt = Annotated[
    int, typer.Option("--tp", help="tensor-parallel size of the served profile (o_proj groups)")
]


def probe_cmd(out: _OutOpt = Path("/tmp/sparkpair/probe.json"), tp: _TpOpt = 2) -> None:
    """Probe every candidate kernel path on this GPU and write the probe plan JSON."""
    try:
        data = run_probe(out, tp)
    except RuntimeError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    _print(data)
    console.print(f"wrote {out} in {data['seconds']} s (set SPARKPAIR_PROBE_PLAN={out})")


def register(app: typer.Typer) -> None:
    """Add the ``probe`` command to the sparkpair CLI."""
    app.command("probe", help=probe_app_help)(probe_cmd)
