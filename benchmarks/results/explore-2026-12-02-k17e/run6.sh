#!/usr/bin/env bash
# Round 5, run 6: gl_pipe with every scale of the CTA's K range staged in shared memory before its K loop (glps), with and without the split sum (diag_nosum_glps: wrong output, timing only).
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17e/run6.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-02-k17e
OUT="${OUT:-$PWD/out}"
GL_BENCH_ENCODINGS=${GL_BENCH_ENCODINGS:-fp32,int32-bcast,int32} timeout 560 python3 $D/gl_bench.py --pipe6 "$OUT/run6.csv" "$@" 2>&1 | tee "$OUT/run6.log"
