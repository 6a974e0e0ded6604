"""Round 5 run 2: the Gluon decode tile (gl_decode.py) against the shipped dispatch and cuBLAS.

For each scale encoding and T: every candidate is checked against fp64 (rel. Frobenius) and for
bitwise repeatability (two calls, NaN-poisoned output first); then timed warm and cold (8
rotating operand sets, 134 MB, so every call reads its weight from HBM) as CUDA-graph replay p50
per call, beside ``auto`` (the public dispatch at this commit) and cuBLAS's fp8 GEMM over the
same bytes. Rows go to the CSV given; a summary table is printed.

usage: [GL_BENCH_ENCODINGS=fp32,int32-bcast,int32] python3 gl_bench.py [--pipe|--pipeN] OUT.csv [Ts]
(--pipe: gl_pipe candidates, run 3; --pipe4 … --pipe6: the candidates and forms of runs 4 … 6)
"""

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[2]))
from _kbench import append_rows, env_fields, measure_hbm_gbps  # noqa: E402
from gl_decode import LAST_BUILD, gl_decode, gl_pipe  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro  # noqa: E402

G, D, R = 4, 1024, 4096
#: (bt, bd, kb_per, warps) candidates per T.
CANDS = {
    1: [(8, 128, 4, 8), (16, 128, 4, 8), (8, 64, 4, 4)],
    4: [(8, 128, 4, 8), (16, 128, 4, 8), (8, 64, 4, 4)],
    16: [(16, 128, 4, 8), (16, 64, 4, 4), (16, 128, 8, 8)],
    32: [(32, 128, 4, 8), (32, 64, 4, 4), (32, 128, 8, 8), (32, 128, 2, 8)],
    36: [(64, 128, 4, 8), (64, 64, 4, 4), (64, 128, 2, 8), (32, 128, 4, 8)],
    64: [(64, 128, 4, 8), (64, 64, 4, 4), (64, 128, 2, 8)],
    128: [(128, 128, 4, 8), (64, 128, 4, 8), (128, 128, 2, 8), (128, 64, 4, 4)],
}

#: gl_pipe candidates per T: (bt, bd, split, stages, warps).
_P16 = [(16, 64, 1, 8, 4), (16, 64, 2, 8, 4), (16, 128, 2, 8, 8), (16, 64, 4, 8, 4)]
_P64 = [(64, 64, 1, 6, 4), (64, 64, 2, 6, 4), (64, 128, 2, 4, 8), (64, 64, 4, 6, 4)]
PIPE_CANDS = {
    1: [(8, 64, 1, 8, 4), (8, 64, 2, 8, 4), (8, 64, 4, 8, 4)],
    4: [(8, 64, 1, 8, 4), (8, 64, 2, 8, 4), (8, 64, 4, 8, 4)],
    16: _P16,
    32: [(32, 64, 1, 8, 4), (32, 64, 2, 8, 4), (32, 128, 2, 6, 8), (32, 64, 4, 8, 4)],
    36: _P64,
    64: _P64,
    128: [(128, 64, 1, 4, 4), (128, 64, 2, 4, 4), (128, 128, 2, 4, 8), (64, 64, 2, 6, 4)],
}
#: Run 4: wider CTAs (8 warps: half the accumulator registers per thread) and two T tiles at
#: T > 32, where run 3's per-row builds were slow.
PIPE4_CANDS = {
    16: [(16, 64, 4, 8, 4), (16, 64, 2, 8, 4)],
    32: [(32, 64, 4, 8, 4), (32, 64, 2, 8, 4)],
    36: [(64, 64, 4, 6, 4), (64, 128, 4, 4, 8), (32, 64, 4, 8, 4), (64, 128, 2, 4, 8)],
    64: [(64, 64, 4, 6, 4), (64, 128, 4, 4, 8), (32, 64, 4, 8, 4)],
    128: [(64, 64, 4, 6, 4), (64, 128, 4, 4, 8), (128, 128, 4, 4, 8), (32, 64, 4, 8, 4)],
}
#: Run 5: one K split (no split sum) with a deep TMA ring (enough bytes in flight per SM for the
#: bandwidth with 64 CTAs), and 8 warps on 64-row tiles (warps [4, 2]).
PIPE5_CANDS = {
    1: [(8, 64, 1, 24, 4), (16, 64, 1, 20, 4)],
    16: [(16, 64, 1, 16, 4), (16, 64, 1, 20, 4), (16, 64, 4, 8, 8)],
    32: [(32, 64, 1, 16, 4), (32, 64, 1, 18, 4), (32, 64, 1, 16, 8), (32, 64, 4, 8, 8)],
    36: [(64, 64, 1, 12, 4), (64, 64, 1, 12, 8), (64, 64, 4, 6, 8)],
    64: [(64, 64, 1, 12, 4), (64, 64, 1, 12, 8), (64, 64, 4, 6, 8)],
    128: [(128, 64, 1, 8, 8), (64, 64, 1, 12, 8), (64, 64, 4, 6, 8)],
}
#: Run 6: every scale of a CTA's K range staged in shared memory before the K loop (glps rows;
#: diag_nosum_glps: the same without the split sum, wrong output, timing only).
PIPE6_CANDS = {
    1: [(8, 64, 1, 24, 4), (8, 64, 4, 8, 4)],
    16: [(16, 64, 1, 18, 4), (16, 64, 4, 8, 4), (16, 64, 2, 12, 4)],
    32: [(32, 64, 1, 16, 4), (32, 64, 4, 8, 4), (32, 64, 2, 12, 4)],
    36: [(64, 64, 1, 12, 8), (64, 64, 4, 6, 4), (64, 64, 2, 8, 4)],
    64: [(64, 64, 1, 12, 8), (64, 64, 4, 6, 4)],
    128: [(64, 64, 1, 12, 8), (64, 64, 4, 6, 4)],
}
SMEM6 = False
PIPE = False
#: --pipe5: per-row encodings also run every candidate with ``late=True`` (glpl rows).
LATE5 = False
#: --pipe4: also time each split candidate without its split-sum launch (wrong output: timing only).
DIAG_NOSUM = False


def main() -> None:
    global PIPE, DIAG_NOSUM, LATE5, SMEM6
    if sys.argv[1] == "--pipe6":
        SMEM6 = True
        PIPE_CANDS.clear()
        PIPE_CANDS.update(PIPE6_CANDS)
        sys.argv[1] = "--pipe"
    if sys.argv[1] == "--pipe5":
        PIPE_CANDS.update(PIPE5_CANDS)
        LATE5 = True
        sys.argv[1] = "--pipe"
    if sys.argv[1] in ("--pipe", "--pipe4"):
        PIPE = True
        if sys.argv[1] == "--pipe4":
            PIPE_CANDS.update(PIPE4_CANDS)
            DIAG_NOSUM = True
        del sys.argv[1]
    out_csv = Path(sys.argv[1])
    ts = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else list(CANDS)
    env = env_fields()
    hbm = measure_hbm_gbps()
    print(f"# {env['gpu']} triton {env['triton']} copy {hbm:.0f} GB/s", flush=True)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows = []
    summary = []
    for enc in os.environ.get("GL_BENCH_ENCODINGS", "fp32,int32-bcast,int32").split(","):
        recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
        for t in ts:
            sets = []
            for k in range(8):
                ops = make_fp8_operands(t, G, D, R, recipe, enc, seed=t + 1000 * k)
                sets.append((*ops, ops[0][:, 0, :].contiguous()))
            a, sa, w, sw, sa_f, sw_f, _ = sets[0]
            ref = fp8_einsum_reference(a, sa_f, w, sw_f)
            out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
            nbytes = a.numel() + w.numel() + out.numel() * 2
            nbytes += sa.numel() * sa.element_size() + sw.numel() * sw.element_size()
            roof = nbytes / (hbm * 1e9) * 1e6
            provs = {
                "auto": lambda s, out=out, recipe=recipe: fe.fp8_einsum(
                    "bhr,hdr->bhd", (s[0], s[1]), (s[2], s[3]), out, recipe=recipe
                )
            }
            provs["cublas_fp8"] = lambda s: torch._scaled_mm(
                s[6], s[2].view(-1, R).t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )
            if PIPE and DIAG_NOSUM:
                for c in PIPE_CANDS[t]:
                    if c[2] > 1:
                        provs["diag_nosum_glp_t{}_d{}_sk{}_st{}_w{}".format(*c)] = (
                            lambda s, c=c, out=out, recipe=recipe: gl_pipe(
                                (s[0], s[1]), (s[2], s[3]), out, recipe, *c, sum_splits=False
                            )
                        )
            if SMEM6:  # run 6: scales staged in shared memory before the K loop
                for c in PIPE_CANDS[t]:
                    name = "glps_t{}_d{}_sk{}_st{}_w{}".format(*c)
                    provs[name] = lambda s, c=c, out=out, recipe=recipe: gl_pipe(
                        (s[0], s[1]), (s[2], s[3]), out, recipe, *c, smem_scales=True
                    )
                    if c[2] > 1:
                        provs["diag_nosum_" + name] = lambda s, c=c, out=out, recipe=recipe: gl_pipe(
                            (s[0], s[1]), (s[2], s[3]), out, recipe, *c, smem_scales=True, sum_splits=False
                        )
            if PIPE and DIAG_NOSUM:  # run 4: one launch, the last CTA of each tile sums
                for c in PIPE_CANDS[t]:
                    if c[2] > 1:
                        provs["glpf_t{}_d{}_sk{}_st{}_w{}".format(*c)] = (
                            lambda s, c=c, out=out, recipe=recipe: gl_pipe(
                                (s[0], s[1]), (s[2], s[3]), out, recipe, *c, fused=True
                            )
                        )
            if PIPE and (DIAG_NOSUM or LATE5) and enc != "fp32":  # runs 4, 5: factor formed at promotion
                for c in PIPE_CANDS[t]:
                    provs["glpl_t{}_d{}_sk{}_st{}_w{}".format(*c)] = lambda s, c=c, out=out, recipe=recipe: (
                        gl_pipe((s[0], s[1]), (s[2], s[3]), out, recipe, *c, late=True)
                    )
            if SMEM6:
                pass
            elif PIPE:
                for c in PIPE_CANDS[t]:
                    provs["glp_t{}_d{}_sk{}_st{}_w{}".format(*c)] = lambda s, c=c, out=out, recipe=recipe: (
                        gl_pipe((s[0], s[1]), (s[2], s[3]), out, recipe, *c)
                    )
            else:
                for c in CANDS[t]:
                    provs["gl_t{}_d{}_k{}_w{}".format(*c)] = lambda s, c=c, out=out, recipe=recipe: gl_decode(
                        (s[0], s[1]), (s[2], s[3]), out, recipe, *c
                    )
            res = {}
            for name, f in provs.items():
                err = float("nan")
                try:
                    if name != "cublas_fp8" and not name.startswith("diag"):
                        out.fill_(float("nan"))
                        f(sets[0])
                        err = rel_fro(out, ref)
                        first = out.clone()
                        out.fill_(float("nan"))
                        f(sets[0])
                        if not torch.equal(first, out):
                            raise RuntimeError("nondeterministic")
                        if err > 1e-2:
                            raise RuntimeError(f"error {err:.2e}")
                    for mode in ("warm", "cold"):
                        ss = sets if mode == "cold" else sets[:1]
                        p20, p50, p80 = graph_time_us(
                            lambda i, ss=ss, f=f: f(ss[i % len(ss)]), calls=20, reps=15, warmup=len(ss)
                        )
                        res[(name, mode)] = p50
                        shape = f"T={t},G={G},D={D},R={R},recipe={recipe},scales={enc}"
                        rows.append(dict(kernel="fp8_einsum", provider=name, shape=shape, l2=mode,
                                         p20_us=p20, p50_us=p50, p80_us=p80, gbps=nbytes / (p50 * 1e-6) / 1e9,
                                         tflops=2 * t * G * D * R / (p50 * 1e-6) / 1e12, roofline_us=roof,
                                         roofline_frac=roof / p50, rel_fro_err=err,
                                         command="gl_bench.py " + " ".join(sys.argv[1:]), **env))  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    print(f"  {enc} T={t} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    continue
                build = LAST_BUILD.pop("gl_pipe", "") if name.startswith(("glp", "diag")) else ""
                warm, cold = res[(name, "warm")], res[(name, "cold")]
                print(
                    f"  {enc:11s} T={t:4d} {name:22s} {build} err {err:.1e} warm {warm:7.2f} "
                    f"cold {cold:7.2f} ({roof / cold:4.0%} roof)",
                    flush=True,
                )
            gls = [k for k in provs if k.startswith("gl") and (k, "cold") in res]  # diag_ rows excluded
            best = min(gls, key=lambda k: res[(k, "cold")]) if gls else None
            summary.append(
                (enc, t, res.get(("auto", "cold")), res.get(("cublas_fp8", "cold")), best)
                + (res.get((best, "cold")), res.get((best, "warm")), res.get(("auto", "warm")))
            )
            del sets
            torch.cuda.empty_cache()
    append_rows(out_csv, rows)
    print("\n| scales | T | auto cold | cuBLAS cold | best gl | gl cold | gl warm | auto warm |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summary:
        print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in s) + " |")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
