#!/usr/bin/env bash
# Round 7, run 7 (after SUM_BLOCK 256, abae945): PATH 3 with K in 2 / 4 / 8 splits at T = 65 ... 128,
# for fp32 block scales too (their plan keeps PATH 0 there), beside `auto` and cuBLAS, cold and warm.
#   usage: bash benchmarks/results/explore-2026-12-03-k17g/run7.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17g
OUT="${OUT:-$PWD/out}"
timeout 300 python3 $D/mid_bench.py "$OUT/run7.csv" 65,96,128 \
  tma_t64_d128_s4_sk4_nosc,tma:64x128x4x4x1,tma:64x128x4x8,tma:64x128x4x8x1,tma:64x128x3x2 2>&1 | tee "$OUT/run7.log"
