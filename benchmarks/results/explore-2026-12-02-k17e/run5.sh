#!/usr/bin/env bash
# Round 5, run 5: gl_pipe with one K split (no split sum) and a deep TMA ring (12-24 stages), and 8 warps on 64-row tiles (warps [4, 2] along D, T).
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17e/run5.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-02-k17e
OUT="${OUT:-$PWD/out}"
GL_BENCH_ENCODINGS=${GL_BENCH_ENCODINGS:-fp32,int32-bcast,int32} timeout 560 python3 $D/gl_bench.py --pipe5 "$OUT/run5.csv" "$@" 2>&1 | tee "$OUT/run5.log"
