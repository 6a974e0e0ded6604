"""Issue 17 round 11, run 1: gl_tm.tm_kernel (tokens on wgmma's M side, 16 / 32 / 64 weight rows a
program, the whole K in one program, AHEAD blocks of wgmma in flight) beside the dispatch (`auto`)
and cuBLAS's fp8 GEMM over the same bytes, warm and cold (8 rotating operand sets, 134 MB of
weight), CUDA-graph replay p50. Each candidate's output is checked against fp64 and for the same
bits on two calls before it is timed.

usage: python3 tm_bench.py OUT.csv ENC,ENC T:CAND+CAND,T:CAND,...
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[2]))
sys.path.insert(0, str(Path(__file__).parent))
from _kbench import append_rows, env_fields  # noqa: E402
from gl_tm import launch  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro  # noqa: E402
from tm_cands import CANDS  # noqa: E402

G, D, R = 4, 1024, 4096
EQ = "bhr,hdr->bhd"
BF16 = torch.bfloat16


def one(t: int, enc: str, cands: list[str], env: dict, rows: list) -> None:
    one_ = torch.ones((), device="cuda", dtype=torch.float32)
    recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
    sets = [make_fp8_operands(t, G, D, R, recipe, enc, seed=t + 1000 * k) for k in range(8)]
    a, sa, w, sw, sa_f, sw_f = sets[0]
    ref = fp8_einsum_reference(a, sa_f, w, sw_f)
    out = torch.empty((t, G, D), dtype=BF16, device="cuda")
    shape = f"T={t},G={G},D={D},R={R},recipe={recipe},scales={enc}"
    provs = {"auto": lambda s: fe.fp8_einsum(EQ, (s[0], s[1]), (s[2], s[3]), out, recipe)}
    for name in cands:
        c = CANDS[name]
        if c["kind"] == "tm":
            provs[name] = lambda s, c=c: launch(c, s[0], s[1], s[2], s[3], out, recipe)
        else:
            cfg = fe.make_config(
                name, "_fp8_einsum_gluon_kernel", c["num_warps"], c["STAGES"], BLOCK_T=c["BLOCK_T"],
                BLOCK_D=c["BLOCK_D"], BLOCK_R=128, SPLIT_R=c["SPLIT_R"], STAGES=c["STAGES"], PATH=4,
                USE_PDL=True,
            )  # fmt: skip
            # int32-bcast through the dispatcher's block view, as the public dispatch reads it
            # (runs 2-4 passed the per-row scales, which an explicit config reads row by row)
            view = enc == "int32-bcast" and c.get("VIEW", False)
            provs[name] = lambda s, cfg=cfg, view=view: fe.fp8_einsum_with_config(
                EQ, (s[0], s[1]), (s[2], s[3][:, ::128, :] if view else s[3]), out,
                (1, 128, 128) if view else recipe, cfg,
            )  # fmt: skip
    a2s = [s[0][:, 0, :].contiguous() for s in sets]
    w2s = [s[2].view(-1, R).t() for s in sets]
    provs["cublas_fp8"] = lambda s, i=[0]: None  # timed below on its own operands
    for name, f in provs.items():
        res, err = {}, float("nan")
        try:
            if name != "cublas_fp8":
                out.fill_(float("nan"))
                f(sets[0])
                torch.cuda.synchronize()
                err = rel_fro(out, ref)
                first = out.clone()
                out.fill_(float("nan"))
                f(sets[0])
                if not torch.equal(first, out):
                    raise RuntimeError("nondeterministic: two calls gave different bits")
                if not err <= 1e-2:
                    raise RuntimeError(f"wrong: relative Frobenius error {err:.3g}")
            for mode in ("warm", "cold"):
                n = 8 if mode == "cold" else 1
                if name == "cublas_fp8":
                    fn = lambda i, n=n: torch._scaled_mm(a2s[i % n], w2s[i % n], one_, one_, out_dtype=BF16)  # noqa: E731
                else:
                    fn = lambda i, n=n, f=f: f(sets[i % n])  # noqa: E731
                p20, p50, p80 = graph_time_us(fn, calls=20, reps=15, warmup=n)
                res[mode] = p50
                rows.append(dict(kernel="fp8_einsum", provider=name, shape=shape, l2=mode, p20_us=p20,
                                 p50_us=p50, p80_us=p80, rel_fro_err=err,
                                 command="tm_bench.py " + " ".join(sys.argv[2:]), **env))  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            print(
                f"  T={t:4d} {enc:11s} {name:24s} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True
            )
            continue
        print(
            f"  T={t:4d} {enc:11s} {name:24s} err {err:.1e} warm {res['warm']:7.2f} cold {res['cold']:7.2f}",
            flush=True,
        )


def main() -> None:
    out_csv, encs = Path(sys.argv[1]), sys.argv[2].split(",")
    env = env_fields()
    rows: list = []
    for spec in sys.argv[3].split(","):
        t, cands = spec.split(":")
        for enc in encs:
            one(int(t), enc, cands.split("+") if cands else [], env, rows)
        torch.cuda.empty_cache()
    append_rows(out_csv, rows)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
