#!/usr/bin/env bash
# Round 8, run 2 (on 2aff14d): PATH 4 (the Gluon split tile) with a 128-token T tile at
# T = 65 ... 128 (one T tile: the weight read once), 3-5 stages, beside the 64-token tile the
# plan uses up to T = 64, `auto` and cuBLAS, fp32 and int32-bcast, cold and warm.
#   usage: bash benchmarks/results/explore-2026-12-03-k17h/run2.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/out}"
timeout 400 python3 benchmarks/results/explore-2026-12-03-k17g/mid_bench.py "$OUT/run2.csv" 65,96,128 \
  gl_t64_d64_sk4_s6_w4,gl:128x64x4x3x4,gl:128x64x4x4x4,gl:128x64x4x5x4,gl:128x64x2x4x4,gl:128x128x4x3x8 \
  fp32,int32-bcast 2>&1 | tee "$OUT/run2.log"
