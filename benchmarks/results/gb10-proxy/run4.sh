#!/usr/bin/env bash
# Device call 4 of issue 31 (H100/H200, torch 2.11, Triton 3.6): the decode sweep that looks for
# configs closing the plan's gaps to cuBLAS at T = 1..8 and 18..36, on 48 SMs (green context), cold
# L2: the plan's configs beside other decode tiles (other BLOCK_D, warps and K splits) and 64/32-token
# tile loops with more K splits, fewer stages or narrower D tiles, on the scales as the dispatcher
# hands them over (int32-bcast: the block view; fp32 in the default mode), with and without
# DISABLE_MMA_V3=1, and cuBLAS's fp8 GEMM in the same context.
#   usage (repo root): OUT=<dir> SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/gb10-proxy/run4.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks"
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
DEC=1,2,4,6,8,12,16,18,24,30,32,36
CFGS=dec_t16_d128_k4_w8,dec_t16_d128_k2_w8,dec_t16_d64_k4_w8,dec_t16_d64_k2_w4,dec_t32_d64_k4_w4,dec_t32_d128_k2_w8,dec_t32_d64_k4_w8,t64_d64_r2_s4,t64_d64_r4_s4,t64_d64_r2_s3,t64_d32_r2_s4,t64_d32_r4_s4,t32_d64_r2_s4,t32_d32_r4_s4,t16_d64_r4_s4
for mode in default v2; do
  vars=(SPARKPAIR_MMA_RUN="$mode")
  recipes=int32-bcast,fp32
  [[ $mode == v2 ]] && vars+=(DISABLE_MMA_V3=1 TRITON_CACHE_DIR=/tmp/triton-cache-v2) && recipes=int32-bcast
  env "${vars[@]}" timeout 250 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/sweep-$mode.csv" \
    --ts "$DEC" --recipes "$recipes" --providers cublas_fp8 --configs "$CFGS" \
    --command "benchmarks/bench_fp8_einsum.py --ts $DEC --recipes $recipes --providers cublas_fp8 --configs $CFGS" \
    >> "$OUT/bench.log" 2>&1
  echo "$mode rc=$?"
done
tail -3 "$OUT/bench.log"
exit 0
