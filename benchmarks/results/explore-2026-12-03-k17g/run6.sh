#!/usr/bin/env bash
# Round 7, run 6 (after SUM_BLOCK 256, abae945): PATH 4 tiles with 2 and 8 K splits and 128-row D
# tiles at T = 32 / 36, beside the plan's tiles, the public dispatch and cuBLAS, cold and warm.
#   usage: bash benchmarks/results/explore-2026-12-03-k17g/run6.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17g
OUT="${OUT:-$PWD/out}"
{
  timeout 200 python3 $D/mid_bench.py "$OUT/run6.csv" 24,32 \
    gl:32x64x8x4x4,gl:32x64x2x8x4,gl:32x128x4x4x8,gl:32x64x4x4x4
  timeout 200 python3 $D/mid_bench.py "$OUT/run6.csv" 36,64 \
    gl:64x64x8x4x4,gl:64x64x2x8x4,gl:64x128x4x4x8,gl:64x64x4x4x4
} 2>&1 | tee "$OUT/run6.log"
