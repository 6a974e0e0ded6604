#!/usr/bin/env bash
# Round 7, run 3: the 32-token PATH 4 tile at T = 33 ... 48 (two T tiles) and at T = 16, and the
# 64-token tile at T = 96 / 128, beside the public dispatch and cuBLAS, cold and warm.
#   usage: bash benchmarks/results/explore-2026-12-03-k17g/run3.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17g
OUT="${OUT:-$PWD/out}"
{
  timeout 200 python3 $D/mid_bench.py "$OUT/run3.csv" 16,33,36,40,48 gl_t32_d64_sk4_s8_w4,gl_t64_d64_sk4_s6_w4
  timeout 120 python3 $D/mid_bench.py "$OUT/run3.csv" 96,128 gl_t64_d64_sk4_s6_w4
} 2>&1 | tee "$OUT/run3.log"
