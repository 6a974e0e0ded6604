"""Issue 17 round 10, run 1: the block view of int32-bcast scales (sw[:, ::128, :], recipe
(1,128,128)) at every T the dispatcher below FP8_EINSUM_TMA_ROW_MIN_T serves, on both plans: the
TMA plan (compute capability 9.x: PATH 1 / 4 / 3 / 0) and the plan without TMA (what GB10 runs:
PATH 1 / 0). For each T and plan: the config the plan picks for per-row scales, on the per-row
scales (``rows``, today's dispatch), against the config it picks for block scales, on the view
(``view``), warm and cold (8 rotating operand sets), CUDA-graph replay p50, beside cuBLAS's fp8
GEMM. Outputs checked against fp64 and bit for bit between the two.

usage: python3 view_all_t.py OUT.csv T,T,... [cold_max_t]
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


def one_t(t: int, cold_max_t: int, env: dict, rows: list) -> None:
    one = torch.ones((), device="cuda", dtype=torch.float32)
    n_sets = 8 if t <= cold_max_t else 1
    sets = [
        make_fp8_operands(t, G, D, R, (1, 1, 128), "int32-bcast", seed=t + 1000 * k) for k in range(n_sets)
    ]
    a, sa, w, sw, sa_f, sw_f = sets[0]
    ref = fp8_einsum_reference(a, sa_f, w, sw_f) if t <= 2048 else None
    out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
    a2s = [s[0][:, 0, :].contiguous() for s in sets]
    w2s = [s[2].view(-1, R).t() for s in sets]
    tma_ok = fe._tma_ok(a, w)
    modes = ("warm", "cold") if n_sets > 1 else ("warm",)
    shape = f"T={t},G={G},D={D},R={R},scales=int32-bcast"
    for plan in ("tma", "notma") if tma_ok else ("notma",):
        tma = plan == "tma" and t >= min(fe.FP8_EINSUM_GLUON_MIN_T, fe.FP8_EINSUM_TMA_MID_MIN_T)
        gl = tma and fe._gluon_ok(a, w)
        rcfg = fe.select_fp8_einsum_config(t, False, tma, True, gl)
        bcfg = fe.select_fp8_einsum_config(t, False, tma, False, gl)
        provs = {
            f"{plan}:rows:{rcfg.name}": lambda s, c=rcfg: fe.fp8_einsum_with_config(
                EQ, (s[0], s[1]), (s[2], s[3]), out, (1, 1, 128), c
            ),
            f"{plan}:view:{bcfg.name}": lambda s, c=bcfg: fe.fp8_einsum_with_config(
                EQ, (s[0], s[1]), (s[2], s[3][:, ::128, :]), out, (1, 128, 128), c
            ),
        }
        bits = {}
        for name, f in provs.items():
            try:
                out.fill_(float("nan"))
                f(sets[0])
                err = rel_fro(out, ref) if ref is not None else float("nan")
                bits[name] = out.clone()
                out.fill_(float("nan"))
                f(sets[0])
                if not torch.equal(bits[name], out):
                    raise RuntimeError("nondeterministic: two calls gave different bits")
                res = {}
                for mode in modes:
                    ss = sets if mode == "cold" else sets[:1]
                    p20, p50, p80 = graph_time_us(
                        lambda i, ss=ss, f=f: f(ss[i % len(ss)]), calls=20 if t <= 512 else 5,
                        reps=15, warmup=len(ss),
                    )  # fmt: skip
                    res[mode] = p50
                    rows.append(dict(kernel="fp8_einsum", provider=name, shape=shape,
                                     l2=mode, p20_us=p20, p50_us=p50, p80_us=p80, rel_fro_err=err,
                                     command="view_all_t.py " + " ".join(sys.argv[1:]), **env))  # fmt: skip
            except Exception as exc:  # noqa: BLE001
                print(f"  T={t} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            print(
                f"  T={t:5d} {name:46s} err {err:.1e} " + " ".join(f"{m} {v:8.2f}" for m, v in res.items()),
                flush=True,
            )
        if len(bits) == 2:
            a_, b_ = bits.values()
            print(f"  T={t} {plan}: view == rows bit for bit: {torch.equal(a_, b_)}", flush=True)
    res = {}
    for mode in modes:
        n = n_sets if mode == "cold" else 1
        _, res[mode], _ = graph_time_us(
            lambda i, n=n: torch._scaled_mm(a2s[i % n], w2s[i % n], one, one, out_dtype=BF16),
            calls=20 if t <= 512 else 5, reps=15, warmup=n,
        )  # fmt: skip
    print(f"  T={t:5d} {'cublas_fp8':46s} " + " ".join(f"{m} {v:8.2f}" for m, v in res.items()), flush=True)


def main() -> None:
    out_csv, ts = Path(sys.argv[1]), [int(v) for v in sys.argv[2].split(",")]
    cold_max_t = int(sys.argv[3]) if len(sys.argv) > 3 else 128
    env = env_fields()
    rows: list = []
    for t in ts:
        one_t(t, cold_max_t, env, rows)
        torch.cuda.empty_cache()
    append_rows(out_csv, rows)


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"# {time.time() - t0:.0f} s")
