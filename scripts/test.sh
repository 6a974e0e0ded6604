#!/usr/bin/env bash
# Set up (scripts/setup.sh), start a Docker engine (scripts/ensure-docker.sh) and run every
# CPU test tier: unit, vLLM-real, kernels-AOT, docker. The gpu tier needs an NVIDIA GPU and
# is run by hand on an H200 (see benchmarks/README.md).
#
# env: SPARKPAIR_SKIP_DOCKER=1  run without the docker tier (no engine is started);
#      CI ignores it: the docker tier always runs there.
# Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
marks="not gpu"
if [[ "${SPARKPAIR_SKIP_DOCKER:-0}" == "1" && "${CI:-}" != "true" ]]; then
  echo "sparkpair: SPARKPAIR_SKIP_DOCKER=1: the docker tier is not run"
  marks="not gpu and not docker"
else
  "$root/scripts/ensure-docker.sh" --timeout 180
fi
exec "$root/.venv/bin/python" -m pytest -m "$marks" --durations=25 "$@"
