#!/usr/bin/env bash
# Device calls 1-2 of issue 17 (H200): cold/warm sweep of the decode configs against e0d50ad's plan
# and cuBLAS's fp8 GEMM, then the decode kernels' registers / spills / shared memory on sm_90a.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-01-k17/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
dec=$(python3 -c 'from sparkpair_overlay.kernels import fp8_einsum as fe; print(",".join(c.name for c in fe.FP8_EINSUM_DECODE_CONFIGS))')
timeout 420 python3 benchmarks/bench_fp8_einsum.py --ts 1,4,16,32,36,64,128 --recipes fp32,int32-bcast \
  --cold --sweep-max-t 128 --configs "$dec" --out "$OUT/fp8_sweep.csv" \
  --command "benchmarks/bench_fp8_einsum.py --ts 1,4,16,32,36,64,128 --recipes fp32,int32-bcast --cold --sweep-max-t 128 --configs <FP8_EINSUM_DECODE_CONFIGS>" \
  2>&1 | tee "$OUT/bench_fp8_sweep.log" | grep -v "^  " || true
python3 - <<'PY' 2>&1 | tee "$OUT/resources.log"
from sparkpair_overlay.kernels import fp8_einsum as fe
for dev, (cache, *_rest) in fe._fp8_einsum_kernel.device_caches.items():
    for key, k in cache.items():
        md = k.metadata
        print(getattr(md, "name", "?"), "regs", getattr(k, "n_regs", "?"), "spills", getattr(k, "n_spills", "?"),
              "shared", getattr(md, "shared", "?"), "warps", getattr(md, "num_warps", "?"), str(key)[-160:])
PY
timeout 240 python3 -m pytest tests/gpu/test_fp8_einsum.py -q -p no:cacheprovider -m gpu -rfE \
  -k "every_config or split_configs" 2>&1 | tee "$OUT/gpu_tests_configs.log" | tail -15
