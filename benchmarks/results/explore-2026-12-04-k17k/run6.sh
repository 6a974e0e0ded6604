#!/usr/bin/env bash
# Round 11, run 6 (H200, a2690c3): PATH 4 forms at T = 33 ... 48 with int32-bcast scales read
# through the block view (as the dispatch reads them); see README.md.
# usage: OUT=<dir> bash benchmarks/results/explore-2026-12-04-k17k/run6.sh   (from the repo root)
set -u
here=benchmarks/results/explore-2026-12-04-k17k
export PYTHONPATH=$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks
C=glv_t64_d64_sk2_s8+glv_t64_d64_sk2_s6+glv_t64_d64_sk2_s10+glv_t64_d64_sk2_s12+glv_t64_d64_sk4_s6+glv_t64_d64_sk4_s8
timeout 280 python3 $here/tm_bench.py "$OUT/run6.csv" int32-bcast,fp32 "36:$C,33:$C,48:$C"
