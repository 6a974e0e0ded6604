#!/usr/bin/env bash
# Issue 17 round 3, device call 1 (H200): prefill candidates at T = 8192, both served scale layouts,
# beside the shipped plan (= e0d50ad's configs at this T) in the same process.
#   usage (repo root, on the device): bash benchmarks/results/explore-2026-12-02-k17c/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.version.cuda)'
timeout 480 python3 benchmarks/results/explore-2026-12-02-k17c/proto_prefill.py "$OUT/run1-prefill.csv" \
  > "$OUT/run1-prefill.log" 2>&1
grep -v "^  \|^Traceback\|^    " "$OUT/run1-prefill.log"
