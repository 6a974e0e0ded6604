#!/usr/bin/env bash
# Create .venv-stack, the `stack` test tier's virtualenv (idempotent).
#
# It holds the packages the image's vLLM 0.33.0 runs that matter to the overlay, on a CPU:
# the vLLM 0.33.0 wheel (with the DeepGEMM it vendors), FlashInfer 0.7.2.post1, the image's
# Triton (the pin of pyproject.toml's `kernels` extra, read by scripts/triton_requirement.py:
# the one place the project names it) and the CPU build of torch 2.13.0 (vLLM asks for 2.14.0,
# which has no CPU build on PyPI). Every other version is pinned in scripts/stack-requirements.txt;
# everything is installed with --no-deps, so those two are the whole environment. Re-running skips
# the install while they (and pyproject.toml, for sparkpair's own editable install) are unchanged
# since the last success.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/setup-stack.sh [--force]
  Creates ./.venv-stack (CPython 3.11) from scripts/stack-requirements.txt, then installs
  sparkpair into it (editable, --no-deps). --force rebuilds it from scratch.
  env: SPARKPAIR_STACK_VENV  where the venv goes (default: .venv-stack at the repo root)
       PYTHON               the interpreter that makes it (default: python3)
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
venv="${SPARKPAIR_STACK_VENV:-$root/.venv-stack}"
reqs="$root/scripts/stack-requirements.txt"
stamp="$venv/.sparkpair-stack-installed"
triton_req="$("${PYTHON:-python3}" "$root/scripts/triton_requirement.py")"
want_reqs="reqs $(sha256sum "$reqs" | cut -d' ' -f1) $triton_req"
want_self="sparkpair $root $(sha256sum pyproject.toml | cut -d' ' -f1)"

have_reqs=""
have_self=""
if [[ -f "$stamp" ]]; then
  have_reqs="$(sed -n 1p "$stamp")"
  have_self="$(sed -n 2p "$stamp")"
fi
if [[ $force -eq 0 && "$have_reqs" == "$want_reqs" && "$have_self" == "$want_self" ]]; then
  echo "sparkpair: $venv is up to date"
  exit 0
fi

# Hide only pip's notes about this machine's unused local index folders.
quiet_pip() {
  "$venv/bin/python" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location 'file://.*' is ignored" || true; }
}

if [[ $force -eq 1 || "$have_reqs" != "$want_reqs" ]]; then
  py="${PYTHON:-python3}"
  # The pins were resolved on CPython 3.11 (torch's CPU wheel is built per Python version).
  if ! "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)'; then
    echo "sparkpair: $py is $("$py" --version 2>&1); the stack venv wants CPython 3.11 (set PYTHON=...)" >&2
    exit 1
  fi
  # A changed pin list (or --force) rebuilds from nothing: --no-deps never removes a package.
  echo "sparkpair: making $venv (vLLM 0.33.0 wheel, FlashInfer, CPU torch; ~3-6 min the first time)"
  rm -f "$stamp"
  "$py" -m venv --clear "$venv"
  quiet_pip install -q --upgrade pip
  quiet_pip install -q --no-deps -r "$reqs" "$triton_req"
  printf '%s\n' "$want_reqs" > "$stamp"
fi

quiet_pip install -q --no-deps -e "$root"
# Fail here, not in the tests, when the stack does not import.
SPARKPAIR_TRITON_REQ="$triton_req" "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import os
import importlib.util

import flashinfer
import torch
import triton
import vllm

# The DeepGEMM vLLM 0.33 vendors: located, not imported (its extension needs CUDA libraries).
if importlib.util.find_spec("vllm.third_party.deep_gemm") is None:
    raise SystemExit("sparkpair: vllm.third_party.deep_gemm is missing from the vLLM wheel")

want = {"vllm": "0.33.0", "torch": "2.13.0+cpu", "triton": os.environ["SPARKPAIR_TRITON_REQ"].split("==")[1],
        "flashinfer": "0.7.2.post1"}
seen = {"vllm": vllm.__version__, "torch": torch.__version__, "triton": triton.__version__,
        "flashinfer": flashinfer.__version__}
bad = {k: (seen[k], want[k]) for k in want if seen[k] != want[k]}
if bad:
    raise SystemExit("sparkpair: stack venv versions wrong (seen, wanted): " + repr(bad))
eps = [ep.value for ep in md.entry_points(group="vllm.general_plugins") if ep.name == "sparkpair"]
if eps != ["sparkpair_overlay:register"]:
    raise SystemExit(f"sparkpair: vllm.general_plugins entry point 'sparkpair' is {eps}; wanted "
                     "['sparkpair_overlay:register']")
print("sparkpair: stack venv has", ", ".join(f"{k} {v}" for k, v in seen.items()))
PY
printf '%s\n%s\n' "$want_reqs" "$want_self" > "$stamp"
