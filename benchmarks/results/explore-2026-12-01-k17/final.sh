#!/usr/bin/env bash
# Issue 17's final H200 runs at the committed plan, one phase per device call:
#   bench: bench_fp8_einsum.py warm / cold / cold-iso for the decode T, warm for prefill, with
#          e0d50ad's plan and cuBLAS's fp8 GEMM in the same run; then the router, cold.
#   tests: tests/gpu/test_fp8_einsum.py; the AOT proof (cache built on the device, every plan
#          entry a cache hit).
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17/final.sh bench|tests
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
if [[ "${1:-}" == bench ]]; then
  args=(--ts 1,4,16,32,36,64,128,512,2048,8192 --recipes fp32,int32-bcast,int32 --cold --iso
        --sweep-max-t 36 --configs dec_t16_d64_k4_w4_nopdl)
  timeout 390 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_einsum.csv" \
    --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8.log" 2>&1
  grep -v "^  " "$OUT/bench_fp8.log"
  timeout 150 python3 benchmarks/bench_router_gemm.py --cold --ms 1,2,4,8,16,32,36 --out "$OUT/router_gemm.csv" \
    --command "benchmarks/bench_router_gemm.py --cold --ms 1,2,4,8,16,32,36" > "$OUT/bench_router.log" 2>&1
  tail -16 "$OUT/bench_router.log"
fi
if [[ "${1:-}" == tests ]]; then
  timeout 330 python3 -m pytest tests/gpu/test_fp8_einsum.py -q -p no:cacheprovider -m gpu -rfE 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -15
  bash benchmarks/run_h200.sh aotproof > /dev/null 2>&1
  tail -5 "$OUT/aot_proof.log"
fi
