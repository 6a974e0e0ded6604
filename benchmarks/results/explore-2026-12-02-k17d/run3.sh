#!/usr/bin/env bash
# Issue 17 round 4, device call 3 (H200): the mid-T plan (PATH 3 with K in four splits for
# T = 33 ... 128 on compute capability 9.x) in the benchmark beside e0d50ad's configs and cuBLAS,
# warm, cold and cold-iso, three encodings, T = 1 ... 256; then the GPU tests of fp8_einsum.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17d/run3.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
sha="${SPARKPAIR_GIT_SHA:-unknown}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
args=(--ts 1,4,16,32,33,36,64,96,128,129,256 --recipes fp32,int32-bcast,int32 --cold --iso --cold-max-t 256
  --sweep-max-t 256 --configs tma_t64_d64_s4_sk4_pdl_nosc,tma_t64_d128_s4_sk4_nosc)
timeout 300 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_einsum.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_$sha.log" 2>&1
grep -v "^  " "$OUT/bench_fp8_$sha.log" | tail -40
timeout 250 python3 -m pytest tests/gpu/test_fp8_einsum.py -m gpu -q -p no:cacheprovider \
  > "$OUT/gpu_tests_fp8_$sha.log" 2>&1
tail -15 "$OUT/gpu_tests_fp8_$sha.log"
