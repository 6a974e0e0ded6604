"""Round 6: PATH 4 with its K splits summed in a thread-block cluster (CLUSTER_SUM) against the
shipped dispatch, the shipped PATH 4 config (PATH 2 split sum) and cuBLAS's fp8 GEMM.

For each scale encoding and T: every candidate is checked against fp64 (rel. Frobenius <= 1e-2),
for bitwise repeatability (two calls, NaN-poisoned output first) and, for cluster forms, for the
same bits as the same tile with PATH 2's split sum; then timed warm and cold (8 rotating operand
sets, 134 MB) as CUDA-graph replay p50 per call. Rows go to the CSV given.

usage: [CL_BENCH_ENCODINGS=fp32,int32-bcast,int32] python3 cl_bench.py OUT.csv [T,T,...]
"""

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[2]))
from _kbench import append_rows, env_fields, measure_hbm_gbps  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.kernels._common import make_config  # noqa: E402
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro  # noqa: E402

G, D, R = 4, 1024, 4096
#: (bt, bd, split, stages, warps) per T; each runs with the cluster sum (cl_) and, where marked
#: by the first entry only, also with PATH 2's split sum (gl_) for the bitwise comparison.
CANDS = {
    1: [(8, 64, 4, 8, 4), (8, 64, 8, 4, 4)],
    4: [(8, 64, 4, 8, 4), (8, 64, 8, 4, 4)],
    16: [(16, 64, 4, 8, 4), (16, 64, 8, 4, 4)],
    32: [(32, 64, 4, 8, 4), (32, 64, 8, 4, 4)],
    36: [(64, 64, 4, 6, 4), (64, 64, 8, 4, 4)],
    64: [(64, 64, 4, 6, 4), (64, 64, 8, 4, 4)],
    128: [(128, 64, 4, 4, 8), (64, 64, 4, 6, 4)],
}


def cfg(bt, bd, split, stages, warps, cluster):
    name = f"{'cl' if cluster else 'gl'}_t{bt}_d{bd}_sk{split}_s{stages}_w{warps}"
    return make_config(
        name, "_fp8_einsum_gluon_kernel", warps, stages, BLOCK_T=bt, BLOCK_D=bd, BLOCK_R=128,
        SPLIT_R=split, STAGES=stages, PATH=4, USE_PDL=True, CLUSTER_SUM=cluster,
    )  # fmt: skip


def main() -> None:
    out_csv = Path(sys.argv[1])
    ts = [int(v) for v in sys.argv[2].split(",")] if len(sys.argv) > 2 else list(CANDS)
    env = env_fields()
    hbm = measure_hbm_gbps()
    print(f"# {env['gpu']} triton {env['triton']} copy {hbm:.0f} GB/s", flush=True)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows, summary = [], []
    for enc in os.environ.get("CL_BENCH_ENCODINGS", "fp32,int32-bcast,int32").split(","):
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

            def run(s, c=None, out=out, recipe=recipe):
                fe.fp8_einsum_with_config("bhr,hdr->bhd", (s[0], s[1]), (s[2], s[3]), out, recipe, c)

            provs = {"auto": lambda s: run(s)}
            provs["cublas_fp8"] = lambda s: torch._scaled_mm(
                s[6], s[2].view(-1, R).t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
            )
            twins = {}
            for i, c in enumerate(CANDS[t]):
                cc = cfg(*c, True)
                provs[cc.name] = lambda s, cc=cc: run(s, cc)
                if i == 0:
                    gc = cfg(*c, False)
                    provs[gc.name] = lambda s, gc=gc: run(s, gc)
                    twins[cc.name] = gc.name
            res, bits = {}, {}
            for name, f in provs.items():
                err = float("nan")
                try:
                    if name != "cublas_fp8":
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
                        bits[name] = first
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
                                         command="cl_bench.py " + " ".join(sys.argv[1:]), **env))  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    print(f"  {enc} T={t} {name}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
                    continue
                warm, cold = res[(name, "warm")], res[(name, "cold")]
                print(
                    f"  {enc:11s} T={t:4d} {name:26s} err {err:.1e} warm {warm:7.2f} "
                    f"cold {cold:7.2f} ({roof / cold:4.0%} roof)",
                    flush=True,
                )
            for cl, gl_ in twins.items():
                if cl in bits and gl_ in bits:
                    same = torch.equal(bits[cl].view(torch.int16), bits[gl_].view(torch.int16))
                    print(f"  {enc} T={t} {cl} bits == {gl_}: {same}", flush=True)
            cls = [k for k in provs if k.startswith("cl_") and (k, "cold") in res]
            best = min(cls, key=lambda k: res[(k, "cold")]) if cls else None
            summary.append(
                (enc, t, res.get(("auto", "cold")), res.get(("cublas_fp8", "cold")), best)
                + (res.get((best, "cold")), res.get((best, "warm")), res.get(("auto", "warm")))
            )
            del sets
            torch.cuda.empty_cache()
    append_rows(out_csv, rows)
    print("\n| scales | T | auto cold | cuBLAS cold | best cluster | its cold | its warm | auto warm |")
    print("|---|---|---|---|---|---|---|---|")
    for s in summary:
        print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in s) + " |")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
