#!/usr/bin/env bash
# Round 5, run 2: the Gluon decode tile against the shipped dispatch and cuBLAS (cold and warm).
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17e/run2.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-02-k17e
OUT="${OUT:-$PWD/out}"
timeout 560 python3 $D/gl_bench.py "$OUT/run2.csv" "$@" 2>&1 | tee "$OUT/run2.log"
