#!/usr/bin/env bash
# Set up (scripts/setup.sh, scripts/setup-stack.sh, scripts/ensure-chromium.sh,
# scripts/ensure-prometheus.sh), start a Docker engine (scripts/ensure-docker.sh) and run every
# CPU test tier: unit, vLLM-real and kernels-AOT in .venv (vLLM 0.32 CPU build), the docker tier
# in .venv, the stack tier in .venv-stack (vLLM 0.33.0 wheel), and the stack034 run: the whole
# stack tier on vLLM 0.34.0, in .venv-stack-0.34.0. The
# gpu tier needs an NVIDIA GPU and is run by hand on an H100/H200 (see benchmarks/README.md).
#
# Three runs go on side by side from the start (much of each is one busy core — Triton compiles,
# mypy, the interpreter, a server starting — or waiting on containers and health timeouts): the
# main run, the docker run, and the stack runs one after the other (stack034, then stack). The
# last CI (80 minutes) started the 0.33 stack run only when the second of the others ended, and
# it was the last to end. Each run writes its own log and temp folder; a run's log is printed
# whole when it ends, and every 5 minutes the last line of each unfinished one.
#
# The soak tier (tests/vllm_real/test_canary_soak.py: the gateway over the real CPU vLLM under a
# load generator, ~4 minutes) runs with SPARKPAIR_SOAK=1, last and alone, when every other run has
# ended. It is not run by default: under its minutes of full load this 2-core VM stalls whole for
# seconds (a separate process's 0.1 s sleep overshot by up to 15.6 s), past the canary's bounds,
# so it failed 3 of 5 runs alone on 2026-12-06 for a cause outside what it judges (the VM is a
# Firecracker guest: the host stops it whole; docs/health-verdict.md has the runs).
#
# Exit status: non-zero when any run fails (or the stack run collects no test). The last line
# sums every run's pytest summary.
#
# env: SPARKPAIR_SKIP_DOCKER=1  run without the docker tier (no engine is started);
#      CI ignores it: the docker tier always runs there. The stack tier always runs.
#      SPARKPAIR_SOAK=1  also run the soak tier, last and alone.
# Extra arguments go to the unit / vLLM-real / kernels-AOT run.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/setup-stack.sh"
# Headless Chromium (the status-page screenshot) and Prometheus/promtool (the metrics tests).
"$root/scripts/ensure-chromium.sh"
"$root/scripts/ensure-prometheus.sh"
cd "$root"
docker_tier=1
if [[ "${SPARKPAIR_SKIP_DOCKER:-0}" == "1" && "${CI:-}" != "true" ]]; then
  echo "sparkpair: SPARKPAIR_SKIP_DOCKER=1: the docker tier is not run"
  docker_tier=0
else
  "$root/scripts/ensure-docker.sh" --timeout 180
fi

logs="$(mktemp -d)"
t0=$SECONDS
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$logs"' EXIT

# start NAME CMD...: run a pytest in the background, its output in $logs/NAME.log, its exit
# status in $logs/NAME.rc, its temp folder under $logs/NAME.tmp.
start() {
  local name="$1"
  shift
  echo "sparkpair: $(date +%H:%M:%S) starting the $name run"
  ( rc=0; "$@" --basetemp "$logs/$name.tmp" >"$logs/$name.log" 2>&1 || rc=$?; echo "$rc" >"$logs/$name.rc" ) &
}
# finish: wait for any started run to end and print its log.
finish() {
  wait -n || true
  local name
  for name in main soak docker stack stack034; do
    if [[ -f "$logs/$name.rc" && ! -f "$logs/$name.shown" ]]; then
      touch "$logs/$name.shown"
      echo "sparkpair: $(date +%H:%M:%S) the $name run ended (rc $(cat "$logs/$name.rc")); its log:"
      cat "$logs/$name.log"
    fi
  done
}

# Progress while the runs go on (their logs print only when they end): every 5 minutes, the last
# line of each unfinished run's log.
(
  while sleep 300; do
    for name in main soak docker stack stack034; do
      if [[ -f "$logs/$name.log" && ! -f "$logs/$name.rc" ]]; then
        echo "sparkpair: $(date +%H:%M:%S) $name run: $(tail -c 300 "$logs/$name.log" | tr -d '\r' | tail -n 1)"
      fi
    done
  done
) &
progress=$!

py="$root/.venv/bin/python"
stack_py="$root/.venv-stack/bin/python"
start main "$py" -m pytest -m "not gpu and not docker and not soak" --ignore=tests/stack --durations=25 "$@"
if [[ $docker_tier == 1 ]]; then
  start docker "$py" -m pytest -m "docker and not gpu" --ignore=tests/stack --durations=10 -p no:cacheprovider
fi
# vLLM 0.34.0: the whole stack tier (the tests marked per_version drive each release's own code;
# the rest hold on both because they ask the same of each), in its own venv made
# inside the run (hard links to .venv-stack plus its own pins: scripts/setup-stack.sh); then, in
# the same slot, the whole stack tier on vLLM 0.33.0 (.venv-stack). The 0.33 run starts whatever
# became of the 0.34 one: each has its own log and exit status.
stack034() {
  "$root/scripts/setup-stack.sh" --vllm 0.34.0 &&  # its failure names the package pip could not install
    "$root/.venv-stack-0.34.0/bin/python" -m pytest tests/stack -m stack "$@"
}
stacks() {
  start stack034 stack034 --durations=10 -p no:cacheprovider
  wait $!
  start stack "$stack_py" -m pytest tests/stack -m stack --durations=10 -p no:cacheprovider
  wait $!
}
stacks &
while [[ $(find "$logs" -name '*.shown' | wc -l) -lt $((3 + docker_tier)) ]]; do
  finish
done
if [[ "${SPARKPAIR_SOAK:-0}" != "1" ]]; then
  echo "sparkpair: the soak tier is not run (SPARKPAIR_SOAK=1 runs it, last and alone)"
else
  echo "sparkpair: $(date +%H:%M:%S) every other run has ended; the soak runs last and alone"
  start soak "$py" -m pytest -m "soak and not gpu" --ignore=tests/stack --durations=5 -p no:cacheprovider
  while [[ ! -f "$logs/soak.shown" ]]; do
    finish
  done
fi
kill "$progress" 2>/dev/null || true

# One closing line for every run: "N passed, N failed, ..." summed, then each run's own.
python3 - "$logs" $((SECONDS - t0)) main soak docker stack stack034 <<'PY'
import re
import sys
from collections import Counter
from pathlib import Path

logs, wall, names = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
total, parts = Counter(), []
for name in names:
    if not (logs / f"{name}.rc").exists():
        continue
    rc = (logs / f"{name}.rc").read_text().strip()
    text = (logs / f"{name}.log").read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if re.search(r" in [0-9.]+s", ln)]
    last = lines[-1].strip("= ") if lines else f"no pytest summary (rc {rc})"
    for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", last):
        total["error" if what.startswith("error") else what] += int(n)
    parts.append(f"{name}: {last}, rc {rc}")
order = ("failed", "error", "passed", "skipped", "xfailed", "xpassed")  # each run deselects the others' tests
summary = ", ".join(f"{total[k]} {k}" for k in order if total[k]) or "no tests ran"
print(f"==== {summary} in {wall:.2f}s ({'; '.join(parts)}) ====")
PY
for name in main soak docker stack stack034; do
  if [[ -f "$logs/$name.rc" && "$(cat "$logs/$name.rc")" != "0" ]]; then
    exit 1
  fi
done
