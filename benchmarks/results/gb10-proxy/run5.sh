#!/usr/bin/env bash
# Device call 5 of issue 31 (H100/H200, torch 2.11, Triton 3.6): the final GB10 plan after run 4's
# sweep: the GPU tests it touches (every config's correctness included), then the plan and cuBLAS at
# every decode capture size and T = 128, on 48 SMs (green context), cold L2, both served recipes,
# default MMA mode (the device time left allowed one mode; run 4's sweep-v2.csv has the plan's
# configs with DISABLE_MMA_V3=1 on int32-bcast).
#   usage (repo root): OUT=<dir> SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/gb10-proxy/run5.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks"
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())'
timeout 150 python3 -m pytest tests/gpu/test_fp8_einsum.py tests/gpu/test_capture_sizes.py -q -p no:cacheprovider -m gpu -rfE \
  -k "rows_sharing or decode_pdl or every_t or every_config or dispatch_matches or capture" > "$OUT/gpu_tests.log" 2>&1
tail -6 "$OUT/gpu_tests.log"
TS=1,2,4,6,8,12,16,18,24,30,32,36,128
for mode in default; do
  vars=(SPARKPAIR_MMA_RUN="$mode")
  [[ $mode == v2 ]] && vars+=(DISABLE_MMA_V3=1 TRITON_CACHE_DIR=/tmp/triton-cache-v2)
  env "${vars[@]}" timeout 100 python3 benchmarks/bench_fp8_einsum.py --out "$OUT/plan-$mode.csv" \
    --ts "$TS" --recipes int32-bcast,fp32 \
    --command "benchmarks/bench_fp8_einsum.py --ts $TS --recipes int32-bcast,fp32" \
    >> "$OUT/bench.log" 2>&1
  echo "$mode rc=$?"
done
grep -A14 "^# per" "$OUT/bench.log" | cut -c1-170
exit 0
