#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every CPU test tier: unit, vLLM-real, kernels-AOT, docker.
# The gpu tier needs an NVIDIA GPU and is run on the H200 (see tests/gpu/README.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
cd "$root"
exec "$root/.venv/bin/python" -m pytest -m "not gpu" "$@"
