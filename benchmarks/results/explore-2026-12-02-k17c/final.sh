#!/usr/bin/env bash
# Issue 17 round 3, device calls 5 and 6 (H200): the shipped PATH 3 (tma_t64_d128_s3_r168; call 5:
# from T = 512, every scale layout; call 6: from T = 1024, block weight scales only) in the benchmark
# beside e0d50ad's configs, cuBLAS and the configs it replaces, then the GPU tests of fp8_einsum.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17c/final.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
sha="${SPARKPAIR_GIT_SHA:-unknown}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
args=(--ts 512,1024,2048,8192,16384 --recipes fp32,int32-bcast,int32 --sweep-max-t 16384
  --configs tma_t64_d128_s3_r168,t128_d64_s3_w8,t64_d128_s4_bc)
timeout 300 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_einsum.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_$sha.log" 2>&1
grep -v "^  " "$OUT/bench_fp8_$sha.log"
timeout 280 python3 -m pytest tests/gpu/test_fp8_einsum.py -m gpu -q -p no:cacheprovider \
  > "$OUT/gpu_tests_fp8_$sha.log" 2>&1
tail -15 "$OUT/gpu_tests_fp8_$sha.log"
