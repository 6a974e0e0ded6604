#!/usr/bin/env bash
# Issue 17 round 2, device call 2 (H200): decode tiles whose loads are issued all at once ("_tg"),
# with and without the loop over T tiles ("_at"), beside the plan's decode configs, e0d50ad and
# cuBLAS's fp8 GEMM, cold and cold-iso, both served scale layouts.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17b-fp8_einsum/run2.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
grep -c TOGETHER overlay/sparkpair_overlay/kernels/fp8_einsum.py > /dev/null || { echo "not this tree"; exit 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=$(python3 -c 'from sparkpair_overlay.kernels import fp8_einsum as fe; print(",".join(c.name for c in fe.FP8_EINSUM_DECODE_CONFIGS if not c.name.endswith("nopdl")))')
args=(--ts 1,16,32,36,64,128 --recipes fp32,int32-bcast --cold --iso --no-warm-decode --sweep-max-t 128 --configs "$cfgs")
timeout 420 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/fp8_sweep.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/bench_fp8_sweep.log" 2>&1
grep -v "^  " "$OUT/bench_fp8_sweep.log"
