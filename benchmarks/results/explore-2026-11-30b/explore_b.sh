#!/usr/bin/env bash
# 2026-11-30 (b) exploration on the H200: scalar block weight scale / UNROLL=2 fp8 configs and
# swapped-operand router configs, then the GPU tests of both kernels.
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
timeout 200 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/fp8_b.csv" --ts 8192 --sweep-max-t 8192 \
  --configs t128_d64_s4,t64_d128_s4,t128_d128_s3_w8,t128_d64_s2_u2,t64_d128_s2_u2,t128_d128_s2_w8_u2,t128_d64_s3_u2,t256_d64_s2_w8,t128_d64_s3_g16 \
  --command "benchmarks/bench_fp8_einsum.py --ts 8192 --configs (exploration b)" > "$OUT/fp8_b.log" 2>&1
grep -E "8192" "$OUT/fp8_b.log" | tail -30
timeout 150 python3 benchmarks/bench_router_gemm.py --out "$OUT/router_b.csv" --ms 1,8,16,32 --dtypes bf16 \
  --configs bf16_dot_m16_n32_s8_k512_pdl,bf16_dot_m16_n64_s8_k512_pdl,bf16_dot_m16_n64_s8_k512_pdl_swap,bf16_dot_m16_n64_s16_k256_pdl_swap,bf16_dot_m16_n128_s16_k256_pdl_swap,bf16_dot_m16_n64_s16_k256_pdl_swap_w8 \
  --command "bench_router_gemm.py --ms 1,8,16,32 --dtypes bf16 --configs (exploration b)" > "$OUT/router_b.log" 2>&1
tail -30 "$OUT/router_b.log"
timeout 120 python3 benchmarks/bench_router_gemm.py --out "$OUT/router_b.csv" --ms 16,32,64 --dtypes fp32 \
  --configs fp32w3_dot_m16_n16_s16_k256_pdl,fp32w3_dot_m32_n16_s16_k256_pdl,fp32w3_dot_m32_n64_s32_k128_pdl_swap,fp32w3_dot_m16_n64_s32_k128_pdl_swap \
  --command "bench_router_gemm.py --ms 16,32,64 --dtypes fp32 --configs (exploration b)" > "$OUT/router_b32.log" 2>&1
tail -24 "$OUT/router_b32.log"
timeout 240 python3 -m pytest tests/gpu/test_fp8_einsum.py tests/gpu/test_router_gemm.py -q -p no:cacheprovider -m gpu -rfE -x 2>&1 | tee "$OUT/gpu_tests_b.log" | tail -15
