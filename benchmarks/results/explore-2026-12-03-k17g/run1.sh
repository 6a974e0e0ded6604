#!/usr/bin/env bash
# Round 7, run 1: PATH 4 (Gluon) with K unsplit and bf16 out as a prefill kernel, four tiles,
# beside the shipped dispatch and cuBLAS, warm, T = 2048 and 8192, three encodings.
#   usage (prefill.patch applied): bash benchmarks/results/explore-2026-12-03-k17g/run1.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17g
OUT="${OUT:-$PWD/out}"
timeout ${BENCH_TIMEOUT:-570} python3 $D/pf_bench.py "$OUT/run1.csv" "${1:-2048,8192}" \
  64,128,3,8 64,128,4,8 128,64,3,8 128,64,4,8 64,64,4,4 64,64,6,4 128,128,3,8 128,128,4,8 2>&1 | tee "$OUT/run1.log"
