#!/usr/bin/env bash
# Round 5, run 3: the pipelined Gluon tile (gl_pipe) against the shipped dispatch and cuBLAS (cold and warm).
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17e/run3.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-02-k17e
OUT="${OUT:-$PWD/out}"
timeout 560 python3 $D/gl_bench.py --pipe "$OUT/run3.csv" "$@" 2>&1 | tee "$OUT/run3.log"
