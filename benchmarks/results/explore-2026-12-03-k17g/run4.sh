#!/usr/bin/env bash
# Round 7, run 4: PATH 2's SUM_BLOCK (outputs per program) 256 / 512 / 1024 (shipped) / 2048 through
# the public dispatch at T = 1 ... 64, cold and warm, beside cuBLAS; twice, to see the spread.
#   usage: bash benchmarks/results/explore-2026-12-03-k17g/run4.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-03-k17g
OUT="${OUT:-$PWD/out}"
{
  timeout 250 python3 $D/sum_bench.py "$OUT/run4.csv" 1,4,16,32,36,64 1024,256,512,2048
  timeout 250 python3 $D/sum_bench.py "$OUT/run4.csv" 1,4,16,32,36,64 1024,256,512,2048
} 2>&1 | tee "$OUT/run4.log"
