#!/usr/bin/env bash
# Round 8, run 1 (on 2aff14d): fp32 block scales at T = 65 ... 128, where the plan keeps e0d50ad's
# PATH 0 config because PATH 3's 4-split form (with PDL since 2aff14d for UE8M0) is 0.4-0.8 us
# slower warm: PATH 3 split forms with PDL and other tiles / rings / split counts, cold and warm.
#   usage: bash benchmarks/results/explore-2026-12-03-k17h/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/out}"
timeout 400 python3 benchmarks/results/explore-2026-12-03-k17g/mid_bench.py "$OUT/run1.csv" 65,96,128 \
  t64_d64_s4,tma:64x128x4x4x1,tma:64x64x4x4x1,tma:64x64x6x4x1,tma:64x128x6x4x1,tma:128x128x4x4x1,tma:64x128x6x2x1,tma:64x64x6x2x1 \
  fp32 2>&1 | tee "$OUT/run1.log"
