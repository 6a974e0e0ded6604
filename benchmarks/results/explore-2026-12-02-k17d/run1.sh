#!/usr/bin/env bash
# Issue 17 round 4, device call 1 (H200): PATH 3 with K splits (decode / mid T) beside the decode
# plan, e0d50ad and cuBLAS, cold L2, T = 16 ... 128, then the GPU tests of fp8_einsum.
#   usage (repo root, on the device): bash benchmarks/results/explore-2026-12-02-k17d/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=$(python3 -c "from sparkpair_overlay.kernels import fp8_einsum as fe; print(','.join(c.name for c in fe.FP8_EINSUM_TMA_CONFIGS[1:]))")
args=(--ts 1,16,32,36,64,128 --recipes fp32,int32-bcast --cold --no-warm-decode --sweep-max-t 128
  --configs "$cfgs,dec_t16_d64_k4_w4,dec_t16_d128_k4_w8,dec_t32_d128_k4_w8,t64_d64_r2_s4")
timeout 330 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/run1.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/run1.log" 2>&1
grep -v "^  " "$OUT/run1.log" | tail -60
timeout 200 python3 -m pytest tests/gpu/test_fp8_einsum.py -m gpu -q -x -p no:cacheprovider \
  > "$OUT/run1-gpu-tests.log" 2>&1
tail -15 "$OUT/run1-gpu-tests.log"
