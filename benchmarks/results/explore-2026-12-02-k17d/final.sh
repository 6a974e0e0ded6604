#!/usr/bin/env bash
# Issue 17 round 4, device call 6 (H200): the shipped plan at prefill T (fp32 block scales, whose
# PATH 3 config the split-K change recompiled; per-row UE8M0 from T = 2048 on PATH 3) beside
# e0d50ad and cuBLAS, warm; then the GPU tests of fp8_einsum and the AOT proof.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17d/final.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
sha="${SPARKPAIR_GIT_SHA:-unknown}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
args=(--ts 1024,2048,8192,16384 --recipes fp32,int32-bcast,int32 --sweep-max-t 0)
timeout 150 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_einsum.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_$sha.log" 2>&1
grep -E "^T=" "$OUT/bench_fp8_$sha.log" | tail -12
timeout 200 python3 -m pytest tests/gpu/test_fp8_einsum.py -m gpu -q -p no:cacheprovider \
  > "$OUT/gpu_tests_fp8_$sha.log" 2>&1
tail -3 "$OUT/gpu_tests_fp8_$sha.log"
OUT="$OUT" bash benchmarks/run_h200.sh aotproof > "$OUT/aot_proof_$sha.log" 2>&1
grep -E "built|compile events|MISS" "$OUT/aot_proof_$sha.log"
