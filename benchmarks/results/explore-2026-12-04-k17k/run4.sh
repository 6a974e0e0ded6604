#!/usr/bin/env bash
# Round 11, run 4 (H200): where PATH 4's two-split 64-token tile and tm_kernel (one K block of wgmma
# in flight, AHEAD = 1) win, T = 33 ... 128, three encodings; see README.md.
# usage: OUT=<dir> bash benchmarks/results/explore-2026-12-04-k17k/run4.sh   (from the repo root)
set -u
here=benchmarks/results/explore-2026-12-04-k17k
export PYTHONPATH=$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
G64=gl_t64_d64_sk4_s6_b+gl_t64_d64_sk2_s8_b
TM=tm_t128_d32_s8_a1_w8+tm_t128_d32_s6_a1_w8
timeout 250 python3 $here/tm_bench.py "$OUT/run4.csv" fp32,int32-bcast "33:$G64,48:$G64,64:$G64"
timeout 300 python3 $here/tm_bench.py "$OUT/run4.csv" fp32,int32-bcast,int32 "128:$TM,112:$TM,96:$TM,80:$TM,65:$TM"
