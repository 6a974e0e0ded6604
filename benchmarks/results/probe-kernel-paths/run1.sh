#!/usr/bin/env bash
# Device call of issue 31, phase 2 (H100/H200, torch 2.11, Triton 3.6, no vLLM): the probe's kernel-path
# step, every plan candidate at every token count of the DSpark profile on the served layout
# (tests/gpu/test_probe_kernel_paths_gpu.py, its rows written as kernel_paths.json), and run_probe with
# capability 12.1 faked (probe.json). Triton 3.6's sm_90 code: these rows measure structure, not GB10.
#   usage (repo root): OUT=<dir> bash benchmarks/results/probe-kernel-paths/run1.sh
set -uo pipefail
export PYTHONPATH="$PWD/overlay:$PWD/scripts:$PWD/healthchecks:$PWD/benchmarks"
export PYTHONUNBUFFERED=1
OUT="${OUT:?set OUT}"
export SPARKPAIR_PROBE_OUT="$OUT"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())' \
  | tee "$OUT/device.txt"
timeout 140 python3 -m pytest tests/gpu/test_probe_kernel_paths_gpu.py -q -p no:cacheprovider -m gpu -rfE \
  -k every_plan_candidate > "$OUT/gpu_tests.log" 2>&1
timeout 55 python3 -m pytest tests/gpu/test_probe_kernel_paths_gpu.py -q -p no:cacheprovider -m gpu -rfE \
  -k capability_12_1 >> "$OUT/gpu_tests.log" 2>&1
tail -12 "$OUT/gpu_tests.log"
exit 0
