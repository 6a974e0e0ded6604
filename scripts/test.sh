#!/usr/bin/env bash
# Set up (scripts/setup.sh, scripts/setup-stack.sh, scripts/ensure-chromium.sh,
# scripts/ensure-prometheus.sh), start a Docker engine (scripts/ensure-docker.sh) and run every CPU test tier: unit, vLLM-real, kernels-AOT, docker
# in .venv (vLLM 0.32 CPU build), then the stack tier in .venv-stack (vLLM 0.33.0 wheel). The
# gpu tier needs an NVIDIA GPU and is run by hand on an H200 (see benchmarks/README.md).
#
# Exit status: non-zero when either run fails (or the stack run collects no test). The last
# line sums both runs' pytest summaries.
#
# env: SPARKPAIR_SKIP_DOCKER=1  run without the docker tier (no engine is started);
#      CI ignores it: the docker tier always runs there. The stack tier always runs.
# Extra arguments go to the first pytest run (the .venv tiers).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/setup-stack.sh"
# Headless Chromium (the status-page screenshot) and Prometheus/promtool (the metrics tests).
"$root/scripts/ensure-chromium.sh"
"$root/scripts/ensure-prometheus.sh"
cd "$root"
marks="not gpu"
if [[ "${SPARKPAIR_SKIP_DOCKER:-0}" == "1" && "${CI:-}" != "true" ]]; then
  echo "sparkpair: SPARKPAIR_SKIP_DOCKER=1: the docker tier is not run"
  marks="not gpu and not docker"
else
  "$root/scripts/ensure-docker.sh" --timeout 180
fi

logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
rc_main=0
"$root/.venv/bin/python" -m pytest -m "$marks" --ignore=tests/stack --durations=25 "$@" \
  | tee "$logs/main.log" || rc_main=$?
rc_stack=0
"$root/.venv-stack/bin/python" -m pytest tests/stack -m stack --durations=10 \
  | tee "$logs/stack.log" || rc_stack=$?

# One closing line for both runs: "N passed, N failed, ..." summed, then each run's own.
python3 - "$logs/main.log" "$rc_main" "$logs/stack.log" "$rc_stack" <<'PY'
import re
import sys
from collections import Counter

total, parts, secs = Counter(), [], 0.0
for name, (log, rc) in zip(("main tiers", "stack tier"), (sys.argv[1:3], sys.argv[3:5])):
    lines = [ln for ln in open(log, errors="replace").read().splitlines() if re.search(r" in [0-9.]+s", ln)]
    last = lines[-1].strip("= ") if lines else f"no pytest summary (rc {rc})"
    for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)", last):
        total["error" if what.startswith("error") else what] += int(n)
    secs += sum(float(s) for s in re.findall(r" in ([0-9.]+)s", last)[-1:])
    parts.append(f"{name}: {last}, rc {rc}")
order = ("failed", "error", "passed", "skipped", "deselected", "xfailed", "xpassed")
summary = ", ".join(f"{total[k]} {k}" for k in order if total[k]) or "no tests ran"
print(f"==== {summary} in {secs:.2f}s ({'; '.join(parts)}) ====")
PY
if [[ $rc_main -ne 0 || $rc_stack -ne 0 ]]; then
  exit 1
fi
