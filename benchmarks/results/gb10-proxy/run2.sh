#!/usr/bin/env bash
# Device call 2 of issue 31 (H100/H200, torch 2.11, Triton 3.6): every GPU test of fp8_einsum and
# the capture sizes on the tuned GB10 plan, then on 48 SMs (green context), cold L2, with and
# without DISABLE_MMA_V3=1: the GB10 plan and cuBLAS at every capture size, T = 128 and prefill,
# and the decode candidates on the scales as the dispatcher hands them over (the block view);
# the plain prefill configs beside the block-scaled one (decomposed on sm_90).
#   usage (repo root): OUT=<dir> SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/gb10-proxy/run2.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks"
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
timeout 220 python3 -m pytest tests/gpu/test_fp8_einsum.py tests/gpu/test_capture_sizes.py -q -p no:cacheprovider -m gpu -rfE \
  > "$OUT/gpu_tests.log" 2>&1
tail -8 "$OUT/gpu_tests.log"
DEC=1,2,4,6,8,12,16,18,24,30,32,36,128
CFGS=dec_t16_d64_k4_w4,dec_t16_d128_k4_w8,dec_t32_d64_k4_w4,dec_t16_d64_k2_w4,dec_t32_d64_k2_w4,dec_t32_d128_k4_w8,t16_d64_r4_s4,t32_d64_r4_s4,t64_d64_r2_s4,t64_d64_s4,t16_d32_s6
for mode in default v2; do
  vars=(SPARKPAIR_MMA_RUN="$mode")
  [[ $mode == v2 ]] && vars+=(DISABLE_MMA_V3=1 TRITON_CACHE_DIR=/tmp/triton-cache-v2)
  env "${vars[@]}" timeout 70 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/plan-$mode.csv" \
    --ts "$DEC,1024,2048" --recipes int32-bcast,fp32 \
    --command "benchmarks/bench_fp8_einsum.py --ts $DEC,1024,2048 --recipes int32-bcast,fp32" \
    >> "$OUT/bench.log" 2>&1
  env "${vars[@]}" timeout 90 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/sweep-$mode.csv" \
    --ts "$DEC" --recipes int32-bcast --providers cublas_fp8 --configs "$CFGS" \
    --command "benchmarks/bench_fp8_einsum.py --ts $DEC --recipes int32-bcast --providers cublas_fp8 --configs $CFGS" \
    >> "$OUT/bench.log" 2>&1
done
timeout 60 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/prefill.csv" --ts 1024,2048 --recipes int32-bcast \
  --providers cublas_fp8 --configs t64_d128_s4_w8_bc,t128_d64_s3_w8,mx_t128_d128_k128_w8_s3_acc \
  --command "benchmarks/bench_fp8_einsum.py --ts 1024,2048 --recipes int32-bcast --providers cublas_fp8 --configs t64_d128_s4_w8_bc,t128_d64_s3_w8,mx_t128_d128_k128_w8_s3_acc" \
  >> "$OUT/bench.log" 2>&1
grep -A16 "^# per" "$OUT/bench.log" | cut -c1-190
exit 0
