#!/usr/bin/env bash
# Round 6, run 1: PATH 4 with the K splits of a tile summed through distributed shared memory in a
# thread-block cluster (cl_*), beside the shipped dispatch, the PATH 2 form and cuBLAS.
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-03-k17f/run1.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17f
OUT="${OUT:-$PWD/out}"
timeout ${BENCH_TIMEOUT:-570} python3 $D/cl_bench.py "$OUT/run1.csv" "$@" 2>&1 | tee "$OUT/run1.log"
