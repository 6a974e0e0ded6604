#!/usr/bin/env bash
# Round 7, run 2: on per-row weight scales, PATH 3 split into two launches by its per-tile share
# check, beside the shipped dispatch, cuBLAS and the block-scale bound, warm, three encodings.
#   usage (prefill.patch applied): bash benchmarks/results/explore-2026-12-03-k17g/run2.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17g
OUT="${OUT:-$PWD/out}"
timeout ${BENCH_TIMEOUT:-570} python3 $D/pf_bench.py "$OUT/run2.csv" "$@" 2>&1 | tee "$OUT/run2.log"
