#!/usr/bin/env bash
# Issue 17 round 2, device call 3 (H200): the T-looping decode tile ("_at") with 8 K blocks and
# 32- or 64-row tiles (32 rows: fits GB10), beside the plan, e0d50ad and e0d50ad and
# cuBLAS's fp8 GEMM, cold and cold-iso, both served scale layouts.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17b-fp8_einsum/run3.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
grep -c TOGETHER overlay/sparkpair_overlay/kernels/fp8_einsum.py > /dev/null || { echo "not this tree"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=dec_t16_d64_k8_w4_at,dec_t16_d32_k8_w4_at,dec_t16_d32_k8_w2_at
args=(--ts 16,32,36,64 --recipes fp32,int32-bcast --cold --iso --no-warm-decode --sweep-max-t 128 --configs "$cfgs")
timeout 420 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_sweep.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_sweep.log" 2>&1
grep -v "^  " "$OUT/bench_fp8_sweep.log"
