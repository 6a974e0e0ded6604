#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the local demo: a tiny model served by the real vLLM
# CPU build with the sparkpair overlay loaded, judged by the health suite after readiness.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
exec "$root/.venv/bin/sparkpair" demo "$@"
