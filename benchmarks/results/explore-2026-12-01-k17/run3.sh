#!/usr/bin/env bash
# Device call 3 of issue 17 (H200): the decode configs again (register and pipelined-loop forms),
# warm, cold, and cold-iso (each call preceded by a kernel rewriting its activations, so calls
# cannot overlap through PDL), against e0d50ad's plan and cuBLAS's fp8 GEMM.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17/run3.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
dec=dec_t16_d64_k4_w4,dec_t16_d64_k4_w4_nopdl,dec_t16_d128_k4_w8,dec_t16_d64_k8_w8,dec_t32_d128_k4_w8,dec_t32_d64_k8_w8,dec_t64_d64_k4_w4,dec_t64_d128_k4_w8
dec="$dec,$(python3 -c 'from sparkpair_overlay.kernels import fp8_einsum as fe; print(",".join(c.name for c in fe.FP8_EINSUM_DECODE_CONFIGS if c["LOOP_STAGES"]))')"
timeout 500 python3 benchmarks/bench_fp8_einsum.py --ts 1,16,32,36,128,4 --recipes fp32,int32-bcast \
  --cold --iso --sweep-max-t 128 --configs "$dec" --out "$OUT/fp8_sweep3.csv" \
  --command "benchmarks/bench_fp8_einsum.py --ts 1,16,32,36,128,4 --recipes fp32,int32-bcast --cold --iso --sweep-max-t 128 --configs <run3.sh list>" \
  2>&1 | tee "$OUT/bench_fp8_sweep3.log" | grep -v "^  " || true
