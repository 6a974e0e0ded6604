"""Issue 17 round 9, run 1: the prefill bound for UE8M0 per-row weight scales that repeat one
value on every row of a 128-row block (DeepGEMM's copies of the checkpoint's block scales,
"int32-bcast"): PATH 3's one-scale loop reading those scales as block scales through a strided
view ``sw[:, ::128, :]`` (recipe (1,128,128), packed-int32 block weight scales), against the plan
(the per-row loop, ``tma_t64_d128_s3_r168_nosc``), the fp32 block-scale plan on fp32 operands,
and cuBLAS's fp8 GEMM. Warm (one operand set), CUDA-graph replay p50 per call. Every kernel
output is checked against fp64 and for run-to-run bits; the view's output must equal the per-row
loop's bit for bit.

usage: python3 prefill_view.py OUT.csv T,T,...
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


def one_t(t: int, env: dict, rows: list) -> None:
    one = torch.ones((), device="cuda", dtype=torch.float32)
    flops = 2.0 * t * G * D * R
    out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, (1, 1, 128), "int32-bcast", seed=t)
    ref = fp8_einsum_reference(a, sa_f, w, sw_f)
    fa, fsa, fw, fsw, fsa_f, fsw_f = make_fp8_operands(t, G, D, R, (1, 128, 128), "fp32", seed=t)
    fref = fp8_einsum_reference(fa, fsa_f, fw, fsw_f)
    view = sw[:, ::128, :]
    a2 = a[:, 0, :].contiguous()
    row_cfg, block_cfg = "tma_t64_d128_s3_r168_nosc", "tma_t64_d128_s3_r168"

    def call(x, sx, wt, swt, recipe, cfg=None):
        return lambda: fe.fp8_einsum_with_config(EQ, (x, sx), (wt, swt), out, recipe, cfg)

    provs = {
        "auto(int32-bcast)": (call(a, sa, w, sw, (1, 1, 128)), ref),
        "nosc(int32-bcast)": (call(a, sa, w, sw, (1, 1, 128), row_cfg), ref),
        "view(int32-bcast)": (call(a, sa, w, view, (1, 128, 128), block_cfg), ref),
        "auto(fp32)": (call(fa, fsa, fw, fsw, (1, 128, 128)), fref),
        "cublas_fp8": (
            lambda: torch._scaled_mm(a2, w.view(-1, R).t(), one, one, out_dtype=torch.bfloat16),
            None,
        ),
    }
    bits = {}
    for name, (f, r) in provs.items():
        err = float("nan")
        try:
            if r is not None:
                out.fill_(float("nan"))
                f()
                err = rel_fro(out, r)
                first = out.clone()
                out.fill_(float("nan"))
                f()
                if not torch.equal(first, out):
                    raise RuntimeError("nondeterministic")
                if err > 1e-2:
                    raise RuntimeError(f"error {err:.2e}")
                bits[name] = first
            p20, p50, p80 = graph_time_us(lambda i, f=f: f(), calls=10, reps=15, warmup=3)
        except Exception as exc:  # noqa: BLE001
            print(f"  T={t} {name}: FAILED {type(exc).__name__}: {str(exc)[:400]}", flush=True)
            continue
        tf = flops / (p50 * 1e-6) / 1e12
        print(f"  T={t:5d} {name:20s} err {err:.1e} p50 {p50:8.2f} us {tf:6.0f} TFLOP/s", flush=True)
        rows.append(dict(kernel="fp8_einsum", provider=name, shape=f"T={t},G={G},D={D},R={R}", l2="warm",
                         p20_us=p20, p50_us=p50, p80_us=p80, rel_fro_err=err,
                         command="prefill_view.py " + " ".join(sys.argv[1:]), **env))  # fmt: skip
    if "view(int32-bcast)" in bits and "nosc(int32-bcast)" in bits:
        same = torch.equal(bits["view(int32-bcast)"], bits["nosc(int32-bcast)"])
        same_auto = torch.equal(bits["view(int32-bcast)"], bits.get("auto(int32-bcast)", out))
        print(f"  T={t} view == per-row loop bit for bit: {same}; == auto: {same_auto}", flush=True)


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
