#!/usr/bin/env bash
# Round 11, run 1 (H200): gl_tm.tm_kernel candidates beside `auto` and cuBLAS; see README.md.
# usage: OUT=<dir> bash benchmarks/results/explore-2026-12-04-k17k/run1.sh   (from the repo root)
set -u
here=benchmarks/results/explore-2026-12-04-k17k
export PYTHONPATH=$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
T32=tm_t64_d32_s16_a1+tm_t64_d32_s16_a2+tm_t64_d32_s16_a3+tm_t64_d32_s12_a2+tm_t64_d32_s8_a2+tm_t64_d16_s12_a2+tm_t64_d64_s12_a2+tm_t64_d32_s8_a2_sk2
T64=tm_t64_d32_s12_a2+tm_t64_d32_s16_a2+tm_t64_d16_s12_a2+tm_t64_d64_s12_a2
timeout 420 python3 $here/tm_bench.py "$OUT/run1.csv" int32-bcast,fp32 \
  "32:$T32,36:$T64,16:tm_t64_d32_s16_a2+tm_t64_d16_s12_a2,128:tm_t128_d32_s8_a2_w8+tm_t128_d64_s6_a2_w8+tm_t64_d32_s16_a2,1:tm_t64_d32_s16_a2+tm_t64_d16_s12_a2,64:$T64"
timeout 100 python3 $here/tm_bench.py "$OUT/run1-int32.csv" int32 "32:tm_t64_d32_s16_a2+tm_t64_d16_s12_a2"
