#!/usr/bin/env bash
# The vLLM upgrade lane (docs/operations.md, "Upgrading vLLM"): given a vLLM release, download its
# wheel, read what changed for the overlay against the newest older release the stack tier runs
# (patch targets, o_proj owner and recipe, router tiers, DeepGEMM conditions, switches, pins the
# registry lacks), then make that release's stack venv and run the stack tier in it.
# Exit 0 only when nothing needs an owner's action and the stack tier passed
# (scripts/sparkpair_cli/vllm_lane/__init__.py says what each line means).
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/vllm-lane.sh VERSION [--base VERSION] [--no-stack] [--json FILE]
  VERSION     the vLLM release to check, e.g. 0.34.0
  --base      the release to compare with (default: the newest older one the stack tier runs)
  --no-stack  read the source only (a minute); make no venv and run no tests
  --json      also write the findings to FILE
USAGE
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
# The version is checked before anything is installed: a typo costs no setup.
# grep reads line by line: a value with a newline would pass on any one good line of it.
if [[ $1 == *$'\n'* ]] || ! LC_ALL=C grep -qE '^(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)){2}$' <<<"$1"; then
  echo "vllm-lane: VERSION=${1@Q} is not a release version; wanted MAJOR.MINOR.PATCH in ASCII digits without leading zeros, e.g. 0.34.0" >&2
  exit 2
fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" >/dev/null
exec "$root/.venv/bin/python" -m sparkpair_cli.vllm_lane "$@"
