#!/usr/bin/env bash
# Issue 17 round 2, device call 2 (H200): the plan with the mid-T decode config, warm / cold /
# cold-iso for the decode T and warm at 8192, beside e0d50ad's plan and cuBLAS's fp8 GEMM in the
# same run, the remaining candidates swept at T <= 128; then tests/gpu/test_fp8_einsum.py.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17b/final.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
grep -c ALL_T overlay/sparkpair_overlay/kernels/fp8_einsum.py > /dev/null || { echo "not this tree"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=dec_t32_d64_k8_w8,dec_t16_d64_k8_w4,dec_t32_d64_k8_w4,dec_t16_d64_k8_w4_at
args=(--ts 1,4,16,32,36,64,128,8192 --recipes fp32,int32-bcast --cold --iso --sweep-max-t 128 --configs "$cfgs")
timeout 300 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_einsum.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8.log" 2>&1
grep -v "^  " "$OUT/bench_fp8.log"
timeout 200 python3 -m pytest tests/gpu/test_fp8_einsum.py -q -p no:cacheprovider -m gpu -rfE \
  --durations=5 > "$OUT/gpu_tests.log" 2>&1
tail -15 "$OUT/gpu_tests.log"
