#!/usr/bin/env bash
# Round 5, run 1: Nsight Compute on the shipped decode plans (cold per kernel) beside cuBLAS.
#   usage: SPARKPAIR_GIT_SHA=<sha> bash benchmarks/results/explore-2026-12-02-k17e/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks${PYTHONPATH:+:$PYTHONPATH}"
D=benchmarks/results/explore-2026-12-02-k17e
OUT="${OUT:-$PWD/out}"
ncu --version | tail -1
timeout 400 ncu --profile-from-start off --cache-control all --clock-control none --csv --page details \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  python3 $D/prof_decode.py > "$OUT/run1-ncu.csv" 2> "$OUT/run1-ncu.err"
echo "ncu rc $?"; tail -5 "$OUT/run1-ncu.err"
python3 $D/prof_decode.py --summary "$OUT/run1-ncu.csv" | tee "$OUT/run1-summary.md"
