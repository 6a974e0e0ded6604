#!/usr/bin/env bash
# Round 11, run 3 (H200): T = 128 forms of tm_kernel, T = 36 and 17 ... 32 forms of PATH 4 with
# the batched scale staging, beside `auto` (ab63c02's dispatch) and cuBLAS; see README.md.
# usage: OUT=<dir> bash benchmarks/results/explore-2026-12-04-k17k/run3.sh   (from the repo root)
set -u
here=benchmarks/results/explore-2026-12-04-k17k
export PYTHONPATH=$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
T128=tm_t128_d32_s8_a2_w8+tm_t128_d32_s8_a1_w8+tm_t128_d32_s8_a3_w8+tm_t128_d32_s10_a2_w8+tm_t128_d32_s4_a2_w8+tm_t128_d16_s5_a2_w8+tm_t64_d32_s8_a2
T36=gl_t64_d64_sk4_s6_b+gl_t64_d64_sk2_s8_b+gl_t32_d64_sk2_s8_b+gl_t32_d64_sk4_s8_b
T32=gl_t32_d64_sk4_s8_b+gl_t32_d64_sk2_s8_b+gl_t32_d64_sk2_s6_b+gl_t32_d64_sk2_s10_b
T24=gl_t32_d64_sk4_s8_b+gl_t32_d64_sk2_s8_b
timeout 500 python3 $here/tm_bench.py "$OUT/run3.csv" int32-bcast,fp32 "128:$T128,36:$T36,32:$T32,17:$T24,24:$T24,96:tm_t128_d32_s8_a2_w8+tm_t128_d16_s5_a2_w8,65:tm_t128_d32_s8_a2_w8+tm_t128_d16_s5_a2_w8"
