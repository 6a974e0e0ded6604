#!/usr/bin/env bash
# Round 5, run 4: gl_pipe with 8 warps and two T tiles at T > 32 (registers and spills printed), the one-launch form (glpf: last CTA sums), the per-row factor formed at the promotion (glpl), and every split candidate without its split-sum launch (diag_nosum: wrong output, timing only).
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17e/run4.sh [T,T,...]
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-02-k17e
OUT="${OUT:-$PWD/out}"
GL_BENCH_ENCODINGS=${GL_BENCH_ENCODINGS:-fp32,int32-bcast} timeout 560 python3 $D/gl_bench.py --pipe4 "$OUT/run4.csv" "$@" 2>&1 | tee "$OUT/run4.log"
