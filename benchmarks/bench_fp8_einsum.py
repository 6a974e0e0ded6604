"""Benchmark fp8_einsum('bhr,hdr->bhd') (DeepSeek-V4 o_proj wo_a) as GB10 runs it, on a proxy GPU.

The GB10 proxy (defaults): the plan GB10 takes, the capability faked to 12.1, on 48 SMs (GB10's
count) through a CUDA green context, with cold L2 (calls rotate over copies of a, sa, w, sw
that together exceed 2x the L2, so each call reads its weight from memory, as decode does), at
every CUDA-graph capture size of the DeepSeek-V4 profile and T = 128, plus prefill sizes. Run it
twice, once with ``DISABLE_MMA_V3=1`` (Triton then builds ``mma.sync`` as on GB10; on sm_90
Triton 3.6 upcasts fp8 to f16 for it, a lower bound on GB10's compute side) and once without
(wgmma on sm_90): the ``mma_mode`` column says which. The H200 (torch 2.11, Triton 3.6) cannot run
Triton 3.8, so its numbers measure structure (grids, memory traffic, launches), not GB10's
instructions; the block-scaled path is decomposed there (bf16), not timed as GB10 runs it.

Providers, measured in the same run as CUDA-graph replay per call (graph captured on the
green context's stream; see sparkpair_overlay.numerics.graph_time_us):
``gb10`` (the overlay's o_proj route at capability 12.1, then the public dispatch: GB10's plan),
``cublas_fp8`` (the peer: cuBLAS's fp8 GEMM ``torch._scaled_mm`` with per-tensor scales over the
same weight bytes, N = G*D, K = R, bf16 out, in the same SM context), ``bf16_dequant_einsum``
(dequantise to bf16, ``torch.einsum``; warm only, on request), and any config by name
(``--configs``, on the scales as the dispatcher hands them over: per-row scales that repeat their
128-row block's as the block view). Encodings: ``int32-bcast`` (GB10's served layout: packed
UE8M0 per-row scales repeating each 128x128 block's), ``int32`` (rows drawn on their own), ``fp32`` (recipe
(1,128,128), the sm_90 layout). Each row carries the rel. Frobenius error vs fp64 (NaN-poisoned
output first; config rows also check that two calls give the same bits), TFLOP/s, the memory
roofline of the whole GPU (bytes / the copy bandwidth measured at the start) and the weight-read
rate (weight + weight-scale bytes / p50, GB/s), which the summary compares with GB10's 273 GB/s.

Usage: [DISABLE_MMA_V3=1] python benchmarks/bench_fp8_einsum.py [--out benchmarks/results/fp8_einsum.csv]
       [--ts 1,2,...] [--tp 2] [--sms 48] [--recipes int32-bcast,fp32] [--providers gb10,cublas_fp8]
       [--configs a,b] [--cold-max-t 128] [--iso]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from _kbench import GB10_GBPS, GB10_SMS, append_rows, env_fields, measure_hbm_gbps, mma_mode, sm_stream
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro

D, R = 1024, 4096
#: --recipes: "int32-bcast" packed UE8M0 per-row scales holding 128x128 block scales repeated on
#: every row, what DeepGEMM's weight transform stores on sm_10x/sm_12x (GB10's served layout,
#: docs/reference/vllm-code-paths.md#o_proj-scales); "int32" the same layout with every row drawn
#: on its own (recipe (1,1,128)); "fp32" recipe (1,128,128) with fp32 scales (the sm_90 layout).
ENCODINGS = ("int32-bcast", "int32", "fp32")
#: The DeepSeek-V4 profile's CUDA-graph capture sizes (configs/profiles/deepseek-v4-flash.yaml),
#: T = 128, and prefill chunks.
DECODE_TS = (1, 2, 4, 6, 8, 12, 16, 18, 24, 30, 32, 36, 128)
PREFILL_TS = (1024, 2048, 8192)
DEFAULT_TS = DECODE_TS + PREFILL_TS
GB10_CAPABILITY = (12, 1)


def _gb10_route(recipe, a, sa, w, sw, out) -> None:
    """Check that the overlay routes this call to its kernel at capability 12.1 (the route vLLM's
    o_proj call takes through the dispatcher on GB10).

    Raises:
        RuntimeError: the route is not ``triton``.
    """
    from sparkpair_overlay.o_proj_route import einsum_route
    from sparkpair_overlay.plan import build_plan

    plan = build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=GB10_CAPABILITY,
        capability_source="SPARKPAIR_FAKE_CAPABILITY",
    )
    route, why = einsum_route(plan.o_proj, GB10_CAPABILITY, "bhr,hdr->bhd", (a, sa), (w, sw), out, recipe)
    if route != "triton":
        raise RuntimeError(f"the overlay routes this call to {route} at capability 12.1: {why}")


def _dequant_einsum(a, sa_f, w, sw_f, out):
    r = a.shape[-1]
    A = a.to(torch.bfloat16) * sa_f.repeat_interleave(128, -1)[..., :r].to(torch.bfloat16)
    swx = sw_f.repeat_interleave(128, -1)[..., :r]
    if sw_f.shape[1] != w.shape[1]:
        swx = swx.repeat_interleave(128, 1)[:, : w.shape[1]]
    W = w.to(torch.bfloat16) * swx.to(torch.bfloat16)
    out.copy_(torch.einsum("tgr,gdr->tgd", A, W))


def _make_fn(prov, sets, out, recipe, iso=False):
    """``sets``: list of (a, sa, w, sw, sa_f, sw_f, a2d); call i uses set i % len(sets).

    ``iso``: each call is preceded by an elementwise kernel that rewrites its activations in place
    (``a`` for ours, ``a2d`` for the peer), as the activation quant does before o_proj in decode
    (no overlap of one call's weight stream with the call before).
    """
    n = len(sets)
    if prov == "cublas_fp8":
        one = torch.ones((), device="cuda", dtype=torch.float32)

        def fn(i):
            s = sets[i % n]
            w = s[2]
            return torch._scaled_mm(
                s[6], w.view(-1, w.shape[-1]).t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )

    elif prov == "bf16_dequant_einsum":

        def fn(i):
            _dequant_einsum(sets[0][0], sets[0][4], sets[0][2], sets[0][5], out)

    elif prov == "gb10":

        def fn(i):
            a, sa, w, sw = sets[i % n][:4]
            fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe)

    else:  # a config by name, on the scales as the dispatcher hands them to it

        def fn(i):
            a, sa, w, sw = sets[i % n][:4]
            view = fe.block_scales_view(sw) if recipe[1] == 1 else None
            if view is not None:  # per-row scales repeating their block's: the block view
                fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, view), out, (1, 128, 128), prov)
            else:
                fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, prov)

    if not iso:
        return fn

    def fn_iso(i):
        sets[i % n][6 if prov == "cublas_fp8" else 0].view(torch.uint8).bitwise_or_(0)
        if prov != "act_write_only":
            fn(i)

    return fn_iso


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "fp8_einsum.csv"))
    ap.add_argument("--ts", default=",".join(map(str, DEFAULT_TS)))
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--sms", type=int, default=GB10_SMS, help="SMs of the green context (0: every SM)")
    ap.add_argument("--recipes", default="int32-bcast,fp32")
    ap.add_argument("--providers", default="gb10,cublas_fp8")
    ap.add_argument("--configs", default="", help="comma-separated config names, timed explicitly too")
    ap.add_argument("--cold-max-t", type=int, default=128, help="T up to this: cold L2 (8 rotating sets)")
    ap.add_argument("--iso", action="store_true", help="also l2=cold-iso (a write of a first)")
    ap.add_argument("--command", default=" ".join(sys.argv))
    args = ap.parse_args()
    g = 8 // args.tp
    env = env_fields()
    hbm = measure_hbm_gbps()
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    stream = sm_stream(args.sms)
    sms = args.sms or torch.cuda.get_device_properties(0).multi_processor_count
    mode_mma = mma_mode()
    print(
        f"# {env['gpu']} torch {env['torch']} triton {env['triton']}; {sms} SMs"
        f"{' (green context)' if stream is not None else ''}; MMA mode {mode_mma}; copy bandwidth "
        f"{hbm:.0f} GB/s (1 GiB device-to-device copy, read + write, all SMs); L2 {l2_bytes >> 20} MiB",
        flush=True,
    )
    rows = []
    providers = [p for p in args.providers.split(",") if p] + [c for c in args.configs.split(",") if c]
    for enc in args.recipes.split(","):
        if enc not in ENCODINGS:
            ap.error(f"--recipes: unknown encoding {enc!r}; want some of {', '.join(ENCODINGS)}")
        recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
        # Weight copies for cold L2, made once per encoding as the served layouts are (strides
        # included): together over 2x the L2, so each call reads its weight from memory. The
        # activations stay one tensor per T (in decode the quant kernel has just written them).
        first_set = make_fp8_operands(1, g, D, R, recipe, enc, seed=0)
        w_bytes = first_set[2].nbytes + first_set[3].nbytes
        n_sets = max(2, (2 * l2_bytes) // w_bytes + 1)
        weights = [(first_set[2], first_set[3])]
        weights += [make_fp8_operands(1, g, D, R, recipe, enc, seed=1000 * k)[2:4] for k in range(1, n_sets)]
        w, sw, sw_f = first_set[2], first_set[3], first_set[5]
        for t in [int(v) for v in args.ts.split(",")]:
            a, sa, _, _, sa_f, _ = make_fp8_operands(t, g, D, R, recipe, enc, seed=t)
            ref = fp8_einsum_reference(a, sa_f, w, sw_f) if t <= 4096 else None
            a2d = a[:, 0, :].contiguous()  # the peer's activations: [T, K = R] fp8, row-major
            out = torch.empty((t, g, D), dtype=torch.bfloat16, device="cuda")
            _gb10_route(recipe, a, sa, w, sw, out)
            flops = 2 * t * g * D * R
            bytes_moved = a.numel() + w_bytes + out.numel() * 2 + sa.numel() * sa.element_size()
            roof_us = bytes_moved / (hbm * 1e9) * 1e6
            modes = ["cold"] + (["cold-iso"] if args.iso else []) if t <= args.cold_max_t else ["warm"]
            for mode in modes:
                ws = weights if mode.startswith("cold") else weights[:1]
                sets = [(a, sa, wk, swk, sa_f, sw_f, a2d) for wk, swk in ws]
                for prov in providers + (["act_write_only"] if mode == "cold-iso" else []):
                    if prov == "bf16_dequant_einsum" and mode != "warm":
                        continue
                    fn = _make_fn(prov, sets, out, recipe, iso=mode == "cold-iso")
                    try:
                        out.fill_(float("nan"))
                        fn(0)
                        if prov in ("cublas_fp8", "act_write_only"):
                            err = float("nan")
                        else:
                            err = rel_fro(out, ref) if ref is not None else float("nan")
                            first = out.clone()
                            out.fill_(float("nan"))
                            fn(0)
                            if not torch.equal(first, out):
                                raise RuntimeError("nondeterministic: two calls gave different bits")
                        calls = 20 if t <= 512 else 5
                        p20, p50, p80 = graph_time_us(
                            fn, calls=calls, reps=15 if t <= 2048 else 8, warmup=len(sets), stream=stream
                        )
                    except Exception as exc:  # noqa: BLE001
                        print(f"  {enc} T={t} {mode} {prov}: FAILED {type(exc).__name__}: {exc}", flush=True)
                        continue
                    label = prov
                    if prov == "gb10":  # name the config the plan ran
                        label = f"gb10:{fe._plan(a, sw, *_kinds(sa, sw), recipe[1] == 1)[0].name}"
                    wgbps = w_bytes / (p50 * 1e-6) / 1e9
                    rows.append(
                        dict(
                            kernel="fp8_einsum",
                            provider=label,
                            shape=f"T={t},G={g},D={D},R={R},recipe={recipe},scales={enc}",
                            l2=mode,
                            p20_us=p20,
                            p50_us=p50,
                            p80_us=p80,
                            gbps=bytes_moved / (p50 * 1e-6) / 1e9,
                            tflops=flops / (p50 * 1e-6) / 1e12,
                            roofline_us=roof_us,
                            roofline_frac=roof_us / p50,
                            rel_fro_err=err,
                            sms=sms,
                            mma_mode=mode_mma,
                            weight_gbps=wgbps,
                            command=args.command,
                            **env,
                        )
                    )
                    tflops = flops / (p50 * 1e-6) / 1e12
                    print(
                        f"  {enc:11s} T={t:5d} {mode} {label:36s} p50 {p50:8.2f} us  weight {wgbps:7.0f} "
                        f"GB/s ({wgbps / GB10_GBPS:4.1f}x GB10)  {tflops:6.1f} TFLOP/s  err {err:.2e}",
                        flush=True,
                    )
    append_rows(Path(args.out), rows)
    _summary(rows)


def _kinds(sa: torch.Tensor, sw: torch.Tensor) -> tuple[int, int]:
    """The scale kinds fp8_einsum's dispatch sees for these scales (its ``_scale_kind``)."""
    return fe._scale_kind(sa, "sa")[0], fe._scale_kind(sw, "sw")[0]


def _summary(rows: list[dict]) -> None:
    """Per (scales, T, L2): the GB10 plan against cuBLAS in the same SM context, the weight-read
    rate against GB10's 273 GB/s, and the best explicit config."""
    print(f"\n# per (scales, T, L2): gb10 | cublas_fp8 | gb10/cublas | weight GB/s (x {GB10_GBPS:.0f})")

    def order(key: tuple[str, str]) -> tuple[str, int, str]:
        return key[0].split("scales=")[1], int(key[0][2:].split(",")[0]), key[1]

    for shape, mode in sorted({(r["shape"], r["l2"]) for r in rows}, key=order):
        rs = [r for r in rows if r["shape"] == shape and r["l2"] == mode]
        gb = next((r for r in rs if r["provider"].startswith("gb10")), None)
        cb = next((r for r in rs if r["provider"] == "cublas_fp8"), None)
        cfgs = [r for r in rs if r["provider"] in {c.name for c in fe.FP8_EINSUM_CONFIGS}]
        best = min(cfgs, key=lambda r: r["p50_us"]) if cfgs else None
        ratio = f"{gb['p50_us'] / cb['p50_us']:5.2f}" if gb and cb else "    -"
        wg = f"{gb['weight_gbps']:6.0f} ({gb['weight_gbps'] / GB10_GBPS:4.1f}x)" if gb else "-"
        print(
            f"{shape} {mode}: {gb['provider'] if gb else '-'} {gb['p50_us'] if gb else float('nan'):7.2f} | "
            f"{cb['p50_us'] if cb else float('nan'):7.2f} | {ratio} | {wg}"
            + (f" | best config {best['provider']} {best['p50_us']:.2f}" if best else "")
        )


if __name__ == "__main__":
    main()
