#!/usr/bin/env bash
# Issue 17 round 3, device call 3 (H200): the plan and run 2's two best candidates interleaved
# (4 rounds) at T = 512, 2048, 8192, both served scale layouts, with the SM clock and power logged.
#   usage (repo root, on the device): bash benchmarks/results/explore-2026-12-02-k17c/run3.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 500 > "$OUT/run3-clocks.csv" 2>&1 &
smi=$!
timeout 300 python3 benchmarks/results/explore-2026-12-02-k17c/proto_prefill.py "$OUT/run3-ab.csv" run3 \
  > "$OUT/run3-ab.log" 2>&1
kill "$smi"
grep -v "^  \|^Traceback\|^    " "$OUT/run3-ab.log"
sort -t, -k2 -n "$OUT/run3-clocks.csv" | awk -F, 'NR>1{print $2, $4, $5, $6}' | sort | uniq -c | sort -rn | head -12
