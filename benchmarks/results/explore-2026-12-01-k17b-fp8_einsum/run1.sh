#!/usr/bin/env bash
# Issue 17 round 2, device call 1 (H200): the mid-T decode candidates (8 K blocks per CTA; one CTA
# per D tile looping over every T tile, "_at") against the plan, e0d50ad and cuBLAS's fp8 GEMM,
# cold L2, both served scale layouts.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17b-fp8_einsum/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
git log -1 --oneline 2>/dev/null || true
grep -c ALL_T overlay/sparkpair_overlay/kernels/fp8_einsum.py || { echo "not this tree"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=dec_t16_d128_k4_w8,dec_t32_d128_k4_w8,dec_t32_d64_k8_w8,dec_t16_d128_k4_w8_at,dec_t32_d128_k4_w8_at
cfgs="$cfgs,dec_t16_d64_k4_w4_at,dec_t32_d64_k4_w4_at,dec_t32_d64_k8_w8_at,dec_t16_d64_k8_w4_at"
args=(--ts 16,32,36,64,128 --recipes fp32,int32-bcast --cold --no-warm-decode --sweep-max-t 128 --configs "$cfgs")
timeout 480 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_sweep.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_sweep.log" 2>&1
grep -v "^  " "$OUT/bench_fp8_sweep.log"
