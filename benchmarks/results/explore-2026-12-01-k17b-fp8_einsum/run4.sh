#!/usr/bin/env bash
# Issue 17 round 2, device call 4 (H200): every tile-loop (PATH 0) config of a9a59c6's kernel at
# the mid-T counts, warm, cold and cold-iso, both served scale layouts, beside the plan, e0d50ad
# and cuBLAS's fp8 GEMM: does an existing config beat the plan's t64_d64_r2_s4 / t64_d64_s4 there?
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17b-fp8_einsum/run4.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=$(python3 -c 'from sparkpair_overlay.kernels import fp8_einsum as fe; print(",".join(c.name for c in fe.FP8_EINSUM_CONFIGS if c.constexprs().get("PATH", 0) == 0))')
args=(--ts 36,64,128 --recipes fp32,int32-bcast --cold --iso --sweep-max-t 128 --configs "$cfgs")
timeout 420 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_sweep.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_sweep.log" 2>&1
grep -v "^  " "$OUT/bench_fp8_sweep.log"
