#!/usr/bin/env bash
# Issue 17 round 4, device call 5 (H200): prefill on per-row UE8M0 scales, PATH 3 without the share
# check (per-row promotion in one K loop: no spill under the register cap) beside the plan's PATH 0
# config and PATH 3 with the share check; warm, T = 1024 ... 16384, int32-bcast and int32.
#   usage (repo root, on the device): SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17d/run4.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks" PYTHONUNBUFFERED=1
OUT="${OUT:-$PWD/out/h200}"
mkdir -p "$OUT"
sha="${SPARKPAIR_GIT_SHA:-unknown}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader || true
args=(--ts 512,1024,2048,8192,16384 --recipes int32-bcast,int32 --sweep-max-t 16384
  --configs tma_t64_d128_s3_r168,tma_t64_d128_s3_r168_nosc,tma_t64_d128_s3_r160_nosc,t64_d128_s4_bc)
for round in 1 2; do
  timeout 200 python3 benchmarks/bench_fp8_einsum.py "${args[@]}" --out "$OUT/run4-r$round.csv" \
    --command "benchmarks/bench_fp8_einsum.py ${args[*]}" > "$OUT/run4-r$round.log" 2>&1
  grep -E "^fp8_einsum|^T=" "$OUT/run4-r$round.log" | grep -v "^  " | tail -12
done
