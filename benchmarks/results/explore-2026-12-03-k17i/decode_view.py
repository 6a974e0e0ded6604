"""Issue 17 round 9, run 3: does the block view of int32-bcast scales (sw[:, ::128, :], recipe
(1,128,128)) help at decode and mid T? For each T, the config the plan picks for per-row scales,
called on the per-row scales and on the view, cold (8 rotating operand sets) and warm, CUDA-graph
replay p50, beside cuBLAS's fp8 GEMM. Outputs checked against fp64 and bit for bit between the two.

usage: python3 decode_view.py OUT.csv T,T,...
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[2]))
from _kbench import append_rows, env_fields  # noqa: E402
from sparkpair_overlay.kernels import fp8_einsum as fe  # noqa: E402
from sparkpair_overlay.numerics import fp8_einsum_reference, graph_time_us, make_fp8_operands, rel_fro  # noqa: E402

G, D, R = 4, 1024, 4096
EQ = "bhr,hdr->bhd"
BF16 = torch.bfloat16


def one_t(t: int, env: dict, rows: list) -> None:
    one = torch.ones((), device="cuda", dtype=torch.float32)
    sets = [make_fp8_operands(t, G, D, R, (1, 1, 128), "int32-bcast", seed=t + 1000 * k) for k in range(8)]
    a, sa, w, sw, sa_f, sw_f = sets[0]
    ref = fp8_einsum_reference(a, sa_f, w, sw_f)
    out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
    tma = fe._tma_ok(a, w)
    cfg = fe.select_fp8_einsum_config(t, False, tma, True, tma and fe._gluon_ok(a, w))
    a2s = [s[0][:, 0, :].contiguous() for s in sets]
    w2s = [s[2].view(-1, R).t() for s in sets]

    provs = {
        f"rows:{cfg.name}": lambda s: fe.fp8_einsum_with_config(
            EQ, (s[0], s[1]), (s[2], s[3]), out, (1, 1, 128), cfg
        ),
        f"view:{cfg.name}": lambda s: fe.fp8_einsum_with_config(
            EQ, (s[0], s[1]), (s[2], s[3][:, ::128, :]), out, (1, 128, 128), cfg
        ),
    }
    shape = f"T={t},G={G},D={D},R={R},scales=int32-bcast"
    bits = {}
    for name, f in provs.items():
        try:
            out.fill_(float("nan"))
            f(sets[0])
            err = rel_fro(out, ref)
            bits[name] = out.clone()
            res = {}
            for mode in ("warm", "cold"):
                ss = sets if mode == "cold" else sets[:1]
                p20, p50, p80 = graph_time_us(
                    lambda i, ss=ss, f=f: f(ss[i % len(ss)]), calls=20, reps=15, warmup=len(ss)
                )
                res[mode] = p50
                rows.append(dict(kernel="fp8_einsum", provider=name, shape=shape,
                                 l2=mode, p20_us=p20, p50_us=p50, p80_us=p80, rel_fro_err=err,
                                 command="decode_view.py " + " ".join(sys.argv[1:]), **env))  # fmt: skip
        except Exception as exc:  # noqa: BLE001
            print(f"  T={t} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        print(
            f"  T={t:4d} {name:40s} err {err:.1e} warm {res['warm']:7.2f} cold {res['cold']:7.2f}", flush=True
        )
    res = {}
    for mode in ("warm", "cold"):
        n = 8 if mode == "cold" else 1
        _, res[mode], _ = graph_time_us(
            lambda i, n=n: torch._scaled_mm(a2s[i % n], w2s[i % n], one, one, out_dtype=BF16),
            calls=20, reps=15, warmup=n,
        )  # fmt: skip
    print(f"  T={t:4d} {'cublas_fp8':40s} warm {res['warm']:7.2f} cold {res['cold']:7.2f}", flush=True)
    if len(bits) == 2:
        a_, b_ = bits.values()
        print(f"  T={t} view == rows bit for bit: {torch.equal(a_, b_)}", flush=True)


def main() -> None:
    out_csv, ts = Path(sys.argv[1]), [int(v) for v in sys.argv[2].split(",")]
    env = env_fields()
    rows: list = []
    for t in ts:
        one_t(t, env, rows)
        torch.cuda.empty_cache()
    append_rows(out_csv, rows)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
