#!/usr/bin/env bash
# Issue 17 round 3, device call 4 (H200): the plan and PROTOS4 (3 or 4 CTAs per SM, register caps,
# 64x64 and 128x64 tiles, two K blocks per step) interleaved, 3 rounds, T = 8192, both served scale
# layouts, with the SM clock and power logged.
#   usage (repo root, on the device): bash benchmarks/results/explore-2026-12-02-k17c/run4.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > "$OUT/run4-clocks.csv" 2>&1 &
smi=$!
timeout 300 python3 benchmarks/results/explore-2026-12-02-k17c/proto_prefill.py "$OUT/run4-ab.csv" run4 \
  > "$OUT/run4-ab.log" 2>&1
kill "$smi"
grep -v "^  \|^Traceback\|^    " "$OUT/run4-ab.log"
awk -F, 'NR>1 && $2+0 > 1000 {print $2, $4, $6}' "$OUT/run4-clocks.csv" | sort | uniq -c | sort -rn | head -8
