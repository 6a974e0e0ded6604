"""Round 7, run 3: shipped configs at token counts their plan does not give them, against the
public dispatch and cuBLAS's fp8 GEMM, cold (8 rotating operand sets, 134 MB) and warm, CUDA-graph
replay p50 per call. Each candidate is checked against fp64 (rel. Frobenius <= 1e-2) and for
bitwise repeatability first. Rows go to the CSV given.

usage: python3 mid_bench.py OUT.csv T,T,... config[,config...] [encodings]

A config is a shipped config's name, a PATH 4 tile ``gl:BTxBDxSPLITSxSTAGESxWARPS`` (run 6) or a
PATH 3 config without the share check ``tma:BTxBDxSTAGESxSPLITS[xPDL]`` (4 warps; run 7).
"""

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


def config(spec: str):
    if spec.startswith("tma:"):
        bt, bd, stages, split, *pdl = (int(v) for v in spec[4:].split("x"))
        name = f"tma_t{bt}_d{bd}_s{stages}_sk{split}{'_pdl' if pdl and pdl[0] else ''}_nosc"
        return fe._tcfg(name, bt, bd, 4, stages, split_r=split, share_check=False, pdl=bool(pdl and pdl[0]))
    if not spec.startswith("gl:"):
        return spec
    bt, bd, split, stages, warps = (int(v) for v in spec[3:].split("x"))
    return make_config(
        f"gl_t{bt}_d{bd}_sk{split}_s{stages}_w{warps}", "_fp8_einsum_gluon_kernel", warps, stages, BLOCK_T=bt,
        BLOCK_D=bd, BLOCK_R=128, SPLIT_R=split, STAGES=stages, PATH=4, USE_PDL=True,
    )  # fmt: skip


def main() -> None:
    out_csv, ts, names = Path(sys.argv[1]), [int(v) for v in sys.argv[2].split(",")], sys.argv[3].split(",")
    encs = sys.argv[4].split(",") if len(sys.argv) > 4 else ["fp32", "int32-bcast"]
    env = env_fields()
    hbm = measure_hbm_gbps()
    print(f"# {env['gpu']} triton {env['triton']} copy {hbm:.0f} GB/s", flush=True)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    rows = []
    for enc in encs:
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
            for n in names:
                c = config(n)
                provs[n if isinstance(c, str) else c.name] = lambda s, c=c: run(s, c)
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
                    res = {}
                    for mode in ("warm", "cold"):
                        ss = sets if mode == "cold" else sets[:1]
                        p20, p50, p80 = graph_time_us(
                            lambda i, ss=ss, f=f: f(ss[i % len(ss)]), calls=20, reps=15, warmup=len(ss)
                        )
                        res[mode] = p50
                        shape = f"T={t},G={G},D={D},R={R},recipe={recipe},scales={enc}"
                        rows.append(dict(kernel="fp8_einsum", provider=name, shape=shape, l2=mode,
                                         p20_us=p20, p50_us=p50, p80_us=p80, roofline_us=roof,
                                         roofline_frac=roof / p50, rel_fro_err=err,
                                         command="mid_bench.py " + " ".join(sys.argv[1:]),
                                         **env))  # fmt: skip
                except Exception as exc:  # noqa: BLE001
                    print(f"  {enc} T={t} {name}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
                    continue
                print(
                    f"  {enc:11s} T={t:4d} {name:26s} err {err:.1e} warm {res['warm']:7.2f} "
                    f"cold {res['cold']:7.2f} ({roof / res['cold']:4.0%} roof)",
                    flush=True,
                )
            del sets
            torch.cuda.empty_cache()
    append_rows(out_csv, rows)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
