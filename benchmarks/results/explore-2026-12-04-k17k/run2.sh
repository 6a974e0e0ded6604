#!/usr/bin/env bash
# Round 11, run 2 (H200): the scales staged in one 2-D load (BATCH) in PATH 4 and in tm_kernel,
# beside `auto` (ab63c02's dispatch: PATH 4 stages a K block at a time) and cuBLAS; see README.md.
# usage: OUT=<dir> bash benchmarks/results/explore-2026-12-04-k17k/run2.sh   (from the repo root)
set -u
here=benchmarks/results/explore-2026-12-04-k17k
export PYTHONPATH=$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
T32=gl_t32_d64_sk4_s8_b+gl_t32_d64_sk2_s8_b+gl_t32_d64_sk2_s12_b+tm_t64_d32_s16_a2+tm_t64_d32_s16_a2_nob+tm_t64_d32_s12_a2+tm_t64_d32_s8_a2+tm_t64_d16_s8_a2+tm_t64_d64_s12_a2+tm_t64_d32_s8_a2_sk2
T36=gl_t64_d64_sk4_s6_b+gl_t64_d64_sk2_s6_b+tm_t64_d32_s16_a2+tm_t64_d32_s12_a2+tm_t64_d16_s8_a2+tm_t64_d64_s12_a2
T16=gl_t16_d64_sk4_s8_b+gl_t16_d64_sk2_s12_b+tm_t64_d32_s16_a2+tm_t64_d16_s8_a2
T1=gl_t16_d64_sk4_s8_b+tm_t64_d32_s16_a2+tm_t64_d16_s8_a2
T64=gl_t64_d64_sk4_s6_b+gl_t64_d64_sk2_s6_b+tm_t64_d32_s12_a2+tm_t64_d64_s12_a2
T128=tm_t128_d32_s8_a2_w8+tm_t128_d64_s6_a2_w8+gl_t64_d128_sk4_s4_w8_b+gl_t64_d64_sk4_s6_b
timeout 500 python3 $here/tm_bench.py "$OUT/run2.csv" int32-bcast,fp32 "32:$T32,36:$T36,16:$T16,1:$T1,64:$T64,128:$T128"
