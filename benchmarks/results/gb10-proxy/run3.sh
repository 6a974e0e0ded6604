#!/usr/bin/env bash
# Device call 3 of issue 31 (H100/H200, torch 2.11, Triton 3.6): the final GB10 plan (T = 17..64 on
# t64_d64_r2_s4, from run 2's sweep): the GPU tests it touches, and the plan with cuBLAS at the
# capture sizes it changed, on 48 SMs (green context), cold L2, with and without DISABLE_MMA_V3=1.
#   usage (repo root): OUT=<dir> SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/gb10-proxy/run3.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks"
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
timeout 150 python3 -m pytest tests/gpu/test_fp8_einsum.py tests/gpu/test_capture_sizes.py -q -p no:cacheprovider -m gpu -rfE \
  -k "rows_sharing or decode_pdl or every_t or dispatch_matches or capture" > "$OUT/gpu_tests.log" 2>&1
tail -6 "$OUT/gpu_tests.log"
for mode in default v2; do
  vars=(SPARKPAIR_MMA_RUN="$mode")
  [[ $mode == v2 ]] && vars+=(DISABLE_MMA_V3=1 TRITON_CACHE_DIR=/tmp/triton-cache-v2)
  env "${vars[@]}" timeout 60 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/plan-$mode.csv" \
    --ts 18,24,30,32,36 --recipes int32-bcast,fp32 \
    --command "benchmarks/bench_fp8_einsum.py --ts 18,24,30,32,36 --recipes int32-bcast,fp32" \
    >> "$OUT/bench.log" 2>&1
done
grep -A12 "^# per" "$OUT/bench.log" | cut -c1-170
exit 0
