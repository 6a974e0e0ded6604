#!/usr/bin/env bash
# Device call 1 of issue 31 (H100/H200, torch 2.11, Triton 3.6): the GPU tests of the paths GB10
# runs (the block-scaled path included, decomposed on sm_90), then on 48 SMs (green context), cold
# L2, with and without DISABLE_MMA_V3=1: the GB10 plan and cuBLAS at every capture size, T = 128
# and prefill, and a sweep of decode configs; last the router's fp32-weight tiles (8 warps now).
#   usage (repo root): OUT=<dir> SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/gb10-proxy/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks"
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
timeout 150 python3 -m pytest tests/gpu/test_fp8_einsum.py -q -p no:cacheprovider -m gpu -rfE \
  -k "block_scaled or dispatch_matches or every_t or prefill or graph or decode_pdl or no_recompile" \
  > "$OUT/gpu_tests.log" 2>&1
tail -12 "$OUT/gpu_tests.log"
DEC=1,2,4,6,8,12,16,18,24,30,32,36,128
CFGS=dec_t16_d64_k4_w4,dec_t16_d64_k2_w4,dec_t16_d128_k4_w8,dec_t32_d64_k2_w4,dec_t32_d64_k4_w4,dec_t32_d128_k2_w8,dec_t32_d128_k4_w8,dec_t64_d64_k2_w4,dec_t64_d64_k2_w8,dec_t64_d128_k2_w8,t64_d64_r2_s4,t32_d64_r4_s4,t16_d64_r4_s4
for mode in default v2; do
  vars=(SPARKPAIR_MMA_RUN="$mode")
  [[ $mode == v2 ]] && vars+=(DISABLE_MMA_V3=1 TRITON_CACHE_DIR=/tmp/triton-cache-v2)
  env "${vars[@]}" timeout 60 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/plan-$mode.csv" \
    --ts "$DEC,1024,2048" --recipes int32-bcast,fp32 \
    --command "benchmarks/bench_fp8_einsum.py --ts $DEC,1024,2048 --recipes int32-bcast,fp32" \
    > "$OUT/plan-$mode.log" 2>&1
  grep -A40 "^# per" "$OUT/plan-$mode.log" | cut -c1-200
  env "${vars[@]}" timeout 120 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/sweep-$mode.csv" \
    --ts "$DEC" --recipes int32-bcast --providers gb10,cublas_fp8 --configs "$CFGS" \
    --command "benchmarks/bench_fp8_einsum.py --ts $DEC --recipes int32-bcast --configs $CFGS" \
    > "$OUT/sweep-$mode.log" 2>&1
  grep -A20 "^# per" "$OUT/sweep-$mode.log" | cut -c1-220
done
timeout 40 python3 benchmarks/bench_router_gemm.py --dtypes fp32 --ms 64,256,1024,2048,8192 --configs none --out "$OUT/router.csv" \
  > "$OUT/router.log" 2>&1
tail -8 "$OUT/router.log"
exit 0
