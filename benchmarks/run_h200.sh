#!/usr/bin/env bash
# One device call on the H200 (the `run` tool; see benchmarks/README.md): GPU tests, then both
# benchmarks, everything logged under $OUT. Phases are time-capped to fit the 10-minute limit.
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/run_h200.sh [tests|router|fp8|cache|aotproof|all]...
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
phases=("$@")
[[ ${#phases[@]} -eq 0 ]] && phases=(all)
want() { [[ " ${phases[*]} " == *" all "* || " ${phases[*]} " == *" $1 "* ]]; }
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
if want cache && [[ -d out/aot-sm90a ]]; then
  # Does the runtime hit the AOT-built cache (built on a CPU machine for sm_90a)?
  n0=$(find out/aot-sm90a -name '*.cubin' | wc -l)
  TRITON_CACHE_DIR="$PWD/out/aot-sm90a" timeout 120 python3 benchmarks/check_aot_cache.py 2>&1 | tee "$OUT/aot_cache.log"
  n1=$(find out/aot-sm90a -name '*.cubin' | wc -l)
  echo "aot cache cubins before $n0 after $n1" | tee -a "$OUT/aot_cache.log"
  python3 benchmarks/aot_cache_key.py 2>&1 | tee -a "$OUT/aot_cache.log"
  ls /usr/local/cuda/bin/ptxas 2>/dev/null; env | grep -i -E '^TRITON|^CUDA_HOME' | tee -a "$OUT/aot_cache.log"
fi
if want aotproof; then
  # Build the cache with the AOT gate on this machine's own Triton (no GPU used by the gate), then
  # check that the runtime loads every kernel it needs from it without compiling.
  rm -rf /tmp/aot-proof
  timeout 150 python3 -c '
import time; t=time.time()
from sparkpair_overlay.kernels import aot, router_gemm_configs as rgc, fp8_einsum as fe
plan = {c.name for _, c in rgc.ROUTER_BF16_DISPATCH + rgc.ROUTER_FP32_DISPATCH + rgc.ROUTER_FP32_NO_PLANES_DISPATCH} | {n for _, n in fe.FP8_EINSUM_PLAN_UE8M0 + fe.FP8_EINSUM_PLAN_FP32}
vs = [v for v in aot.router_variants() + aot.fp8_einsum_variants(("fp32", "ue8m0-int32", "ue8m0-int32-blocks")) if v.config.name in plan or v.config.name.startswith("reduce")]
rs = aot.build(["sm_90a"], "/tmp/aot-proof", vs)
print("aot-on-device built", sum(r.fits for r in rs), "/", len(rs), "in", round(time.time()-t), "s")
' 2>&1 | tee "$OUT/aot_proof.log"
  TRITON_CACHE_DIR=/tmp/aot-proof timeout 120 python3 benchmarks/check_aot_cache.py 2>&1 | tee -a "$OUT/aot_proof.log"
fi
if want tests; then
  timeout 250 python3 -m pytest tests/gpu -q -p no:cacheprovider -m gpu -rfE 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
fi
if want router; then
  timeout 240 python3 benchmarks/bench_router_gemm.py --cold --out "$OUT/router_gemm.csv" \
    --command "benchmarks/bench_router_gemm.py --cold" > "$OUT/bench_router.log" 2>&1
  tail -32 "$OUT/bench_router.log"
fi
if want fp8; then
  timeout 400 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/fp8_einsum.csv" \
    --command "benchmarks/bench_fp8_einsum.py" > "$OUT/bench_fp8.log" 2>&1
  tail -24 "$OUT/bench_fp8.log"
fi
exit 0
