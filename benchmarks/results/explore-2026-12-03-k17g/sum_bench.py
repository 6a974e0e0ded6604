"""Round 7, run 4: PATH 2 (the split sum) with other SUM_BLOCK values (outputs per program along
D; 4 warps), through the public dispatch, against cuBLAS's fp8 GEMM, cold (8 rotating operand
sets, 134 MB) and warm, CUDA-graph replay p50 per call. Each SUM_BLOCK's output is checked for the
same bits as SUM_BLOCK = 1024's (the shipped value) and against fp64 first. Rows go to the CSV.

usage: python3 sum_bench.py OUT.csv [T,T,...] [SUM_BLOCK,...] [encodings]
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[2]))
from _kbench import append_rows, env_fields, measure_hbm_gbps  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro  # noqa: E402

G, D, R = 4, 1024, 4096


def main() -> None:
    out_csv = Path(sys.argv[1])
    ts = [int(v) for v in (sys.argv[2] if len(sys.argv) > 2 else "1,4,16,32,36,64").split(",")]
    blocks = [int(v) for v in (sys.argv[3] if len(sys.argv) > 3 else "1024,256,512,2048").split(",")]
    encs = (sys.argv[4] if len(sys.argv) > 4 else "fp32,int32-bcast").split(",")
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

            def auto(s, out=out, recipe=recipe):
                fe.fp8_einsum("bhr,hdr->bhd", (s[0], s[1]), (s[2], s[3]), out, recipe=recipe)

            def cublas(s):
                torch._scaled_mm(
                    s[6], s[2].view(-1, R).t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16
                )

            first = None
            cfg = fe.select_fp8_einsum_config(t, enc == "fp32", True, enc != "fp32", True)
            line = [f"  {enc:11s} T={t:3d} cfg {cfg.name}"]
            for prov in ["cublas_fp8"] + [f"sum{b}" for b in blocks]:
                f = cublas if prov == "cublas_fp8" else auto
                if prov != "cublas_fp8":
                    fe.SUM_BLOCK = int(prov[3:])
                    out.fill_(float("nan"))
                    auto(sets[0])
                    err = rel_fro(out, ref)
                    if first is None:
                        first = out.clone()
                    if not torch.equal(first.view(torch.int16), out.view(torch.int16)) or err > 1e-2:
                        print(f"  {enc} T={t} {prov}: FAILED bits differ from sum{blocks[0]} / err {err:.1e}")
                        continue
                res = {}
                for mode in ("cold", "warm"):
                    ss = sets if mode == "cold" else sets[:1]
                    p20, p50, p80 = graph_time_us(
                        lambda i, ss=ss, f=f: f(ss[i % len(ss)]), calls=20, reps=15, warmup=len(ss)
                    )
                    res[mode] = p50
                    rows.append(dict(kernel="fp8_einsum", provider=prov, l2=mode, p20_us=p20, p50_us=p50,
                                     p80_us=p80, roofline_us=roof, roofline_frac=roof / p50,
                                     shape=f"T={t},G={G},D={D},R={R},recipe={recipe},scales={enc}",
                                     command="sum_bench.py " + " ".join(sys.argv[1:]), **env))  # fmt: skip
                line.append(f"{prov} {res['cold']:.2f}/{res['warm']:.2f}")
            fe.SUM_BLOCK = 1024
            print(" | ".join(line), flush=True)
            del sets
            torch.cuda.empty_cache()
    append_rows(out_csv, rows)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
