#!/usr/bin/env bash
# Issue 17 round 4, device call 2 (H200): decode tiles that hold their weight and loop over every
# T tile (T_LOOP, dec_*_tl*) beside the shipped decode tiles (same code, straight-line), PATH 3
# with K splits, e0d50ad and cuBLAS, cold L2, T = 1 ... 128; then the GPU tests of fp8_einsum.
#   usage (repo root, on the device): bash benchmarks/results/explore-2026-12-02-k17d/run2.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
cfgs=$(python3 -c "from sparkpair_overlay.kernels import fp8_einsum as fe; print(','.join(c.name for c in fe.FP8_EINSUM_DECODE_CONFIGS))")
args=(--ts 1,4,16,32,36,64,128 --recipes fp32,int32-bcast --cold --no-warm-decode --sweep-max-t 128
  --configs "$cfgs,tma_t64_d128_s4_sk4_nosc,tma_t64_d64_s4_sk4_pdl_nosc,tma_t64_d128_s4_sk2_pdl_nosc")
timeout 330 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/run2.csv" \
  --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/run2.log" 2>&1
grep -v "^  " "$OUT/run2.log" | tail -30
timeout 200 python3 -m pytest tests/gpu/test_fp8_einsum.py -m gpu -q -x -p no:cacheprovider \
  > "$OUT/run2-gpu-tests.log" 2>&1
tail -15 "$OUT/run2-gpu-tests.log"
