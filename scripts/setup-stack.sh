#!/usr/bin/env bash
# Create a `stack` test tier virtualenv for one vLLM release (idempotent).
#
# The stack tier runs against each release in scripts/stack-requirements-<version>.txt (the
# releases the guard claims: sparkpair_overlay.versions). A release's venv holds what that vLLM
# runs that matters to the overlay, on a CPU: the official vLLM wheel (with the DeepGEMM it
# vendors), the FlashInfer it pins (or the nearest the registry has), the image's Triton (the pin of
# pyproject.toml's `kernels` extra, read by scripts/triton_requirement.py: the one place the project
# names it) and the CPU build of torch 2.13.0 (vLLM asks for 2.14.0, which has no CPU build on
# PyPI). Every other version is pinned in scripts/stack-requirements.txt (shared by every release);
# everything is installed with --no-deps, so those files are the whole environment. After the
# install it checks every pin vLLM's wheel asks for against what is installed and prints each
# substitute; a substitute the release's record (sparkpair_overlay.versions) does not name fails.
# Re-running skips the install while the files (and pyproject.toml, for sparkpair's own editable
# install) are unchanged since the last success. Another release's venv starts as hard links to the
# image's (made first) and pip replaces only the pins that differ: about 2 CPU-minutes and 1.5 GB
# for vLLM 0.34.0 (its wheel, FlashInfer 0.7.4, nvcc), against ~4 GB and a full install from nothing.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/setup-stack.sh [--vllm VERSION | --all | --list] [--force]
  Creates the stack venv of vLLM VERSION (CPython 3.11) from
  scripts/stack-requirements-VERSION.txt, then installs sparkpair into it (editable, --no-deps).
  VERSION defaults to the image's (the Dockerfile's VLLM_IMAGE_TAG); its venv is ./.venv-stack,
  any other release's is ./.venv-stack-VERSION.
  --all    every release that has a requirements file, one after the other
  --list   print "VERSION VENV" for every such release (the image's first) and exit
  --force  rebuild from scratch
  env: SPARKPAIR_STACK_VENV  where the venv goes (one release only; default as above)
       PYTHON               the interpreter that makes it (default: python3)
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

force=0
version=""
all=0
list=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --force) force=1; shift ;;
    --all) all=1; shift ;;
    --list) list=1; shift ;;
    --vllm) version="${2:?--vllm needs a version, e.g. 0.34.0}"; shift 2 ;;
    --vllm=*) version="${1#--vllm=}"; shift ;;
    *) usage >&2; exit 2 ;;
  esac
done

# The image's vLLM: the Dockerfile's default base tag (v0.33.0 -> 0.33.0).
image_version="$(sed -n 's/^ARG VLLM_IMAGE_TAG=v\{0,1\}\([0-9][0-9A-Za-z.+-]*\)[[:space:]]*$/\1/p' Dockerfile | head -n1)"
if [[ -z "$image_version" ]]; then
  echo "sparkpair: Dockerfile has no 'ARG VLLM_IMAGE_TAG=vX.Y.Z' line; wanted the image's vLLM release" >&2
  exit 1
fi

# Every release with a requirements file, the image's first.
releases() {
  local f v
  echo "$image_version"
  for f in "$root"/scripts/stack-requirements-*.txt; do
    v="$(basename "$f" .txt)"
    v="${v#stack-requirements-}"
    [[ "$v" != "$image_version" ]] && echo "$v"
  done
}
venv_of() {
  if [[ "$1" == "$image_version" ]]; then echo "$root/.venv-stack"; else echo "$root/.venv-stack-$1"; fi
}

if [[ $list -eq 1 ]]; then
  for v in $(releases); do echo "$v $(venv_of "$v")"; done
  exit 0
fi
if [[ $all -eq 1 ]]; then
  [[ -z "$version" ]] || { usage >&2; exit 2; }
  args=()
  [[ $force -eq 1 ]] && args+=(--force)
  for v in $(releases); do
    "$root/scripts/setup-stack.sh" --vllm "$v" "${args[@]}"
  done
  exit 0
fi

version="${version:-$image_version}"
reqs="$root/scripts/stack-requirements-$version.txt"
common="$root/scripts/stack-requirements.txt"
if [[ ! -f "$reqs" ]]; then
  have="$(releases | tr '\n' ' ')"
  echo "sparkpair: no $reqs; the stack tier knows vLLM ${have% }. A new release gets its file from" \
       "the upgrade lane (scripts/vllm-lane.sh $version)" >&2
  exit 1
fi
venv="${SPARKPAIR_STACK_VENV:-$(venv_of "$version")}"
stamp="$venv/.sparkpair-stack-installed"
triton_req="$("${PYTHON:-python3}" "$root/scripts/triton_requirement.py")"
want_reqs="reqs $(cat "$common" "$reqs" | sha256sum | cut -d' ' -f1) $triton_req"
want_self="sparkpair $root $(sha256sum pyproject.toml | cut -d' ' -f1)"

have_reqs=""
have_self=""
if [[ -f "$stamp" ]]; then
  have_reqs="$(sed -n 1p "$stamp")"
  have_self="$(sed -n 2p "$stamp")"
fi
if [[ $force -eq 0 && "$have_reqs" == "$want_reqs" && "$have_self" == "$want_self" ]]; then
  echo "sparkpair: $venv (vLLM $version) is up to date"
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
  rm -f "$stamp"
  image_venv="$(venv_of "$image_version")"
  image_stamp="$image_venv/.sparkpair-stack-installed"
  if [[ "$version" != "$image_version" && "$venv" != "$image_venv" && -f "$image_stamp" ]] &&
     [[ "$(sed -n 1p "$image_stamp" | cut -d' ' -f3-)" == "$triton_req" ]]; then
    # Another release's venv starts as hard links to the image's (no copy, no extra disk for the
    # ~160 pins they share); pip then replaces only what this release pins otherwise (vLLM,
    # FlashInfer, ...): it unlinks a file before writing its replacement, so the image's venv is
    # never touched. Scripts that name the image's interpreter are rewritten (sed -i writes a new
    # file), and what only the image's release pins is removed.
    echo "sparkpair: making $venv (vLLM $version wheel and its own pins over $image_venv's shared ones)"
    rm -rf "$venv"
    cp -al "$image_venv" "$venv"
    rm -f "$stamp"
    while IFS= read -r -d '' script; do
      if [[ "$(head -c 2 "$script")" == "#!" ]]; then
        sed -i "1s|^#!.*/bin/python[0-9.]*\$|#!$venv/bin/python|" "$script"
      fi
    done < <(find "$venv/bin" -maxdepth 1 -type f -print0)
    release_pins() { sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$1" | tr 'A-Z_' 'a-z-' | sort -u; }
    only_image="$(comm -23 <(release_pins "$root/scripts/stack-requirements-$image_version.txt") \
                           <(release_pins "$reqs"))"
    if [[ -n "$only_image" ]]; then
      # shellcheck disable=SC2086  # one name per word
      quiet_pip uninstall -q -y $only_image
    fi
  else
    # A changed pin list (or --force) rebuilds from nothing: --no-deps never removes a package.
    echo "sparkpair: making $venv (vLLM $version wheel, FlashInfer, CPU torch; ~3-6 min the first time)"
    "$py" -m venv --clear "$venv"
    quiet_pip install -q --upgrade pip
  fi
  quiet_pip install -q --no-deps -r "$reqs" "$triton_req"
  printf '%s\n' "$want_reqs" > "$stamp"
fi

quiet_pip install -q --no-deps -e "$root"
# Fail here, not in the tests, when the stack does not import or is not the release it claims.
SPARKPAIR_TRITON_REQ="$triton_req" SPARKPAIR_STACK_RELEASE="$version" SPARKPAIR_ROOT="$root" \
  "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import importlib.util
import os
import sys

import flashinfer
import torch
import triton
import vllm

from sparkpair_overlay.versions import release

sys.path.insert(0, os.path.join(os.environ["SPARKPAIR_ROOT"], "tests", "stack"))
from stacklib import installed_substitutes  # noqa: E402 - the tier's own reading of the wheel's pins

version = os.environ["SPARKPAIR_STACK_RELEASE"]
# The DeepGEMM vLLM vendors: located, not imported (its extension needs CUDA libraries).
if importlib.util.find_spec("vllm.third_party.deep_gemm") is None:
    raise SystemExit(f"sparkpair: vllm.third_party.deep_gemm is missing from the vLLM {version} wheel")
seen = {"vllm": vllm.__version__, "torch": torch.__version__, "triton": triton.__version__,
        "flashinfer": flashinfer.__version__}
if seen["vllm"] != version or seen["triton"] != os.environ["SPARKPAIR_TRITON_REQ"].split("==")[1]:
    raise SystemExit(f"sparkpair: stack venv has {seen}; wanted vLLM {version} and "
                     f"{os.environ['SPARKPAIR_TRITON_REQ']}")
eps = [ep.value for ep in md.entry_points(group="vllm.general_plugins") if ep.name == "sparkpair"]
if eps != ["sparkpair_overlay:register"]:
    raise SystemExit(f"sparkpair: vllm.general_plugins entry point 'sparkpair' is {eps}; wanted "
                     "['sparkpair_overlay:register']")
# Every pin the wheel asks for, against what is installed: each difference must be a substitute the
# release's record names (sparkpair_overlay.versions), and each is printed.
rec = release(version)
if rec is None:
    raise SystemExit(f"sparkpair: vLLM {version} has no record in sparkpair_overlay.versions.RELEASES; "
                     "wanted one naming its tier, level and substitutes")
subs = installed_substitutes()
unnamed = [s for s in subs if s not in rec.substitutes]
unused = [s for s in rec.substitutes if s not in subs]
if unnamed or unused:
    raise SystemExit(f"sparkpair: vLLM {version}: installed substitutes {[str(s) for s in subs]}; the "
                     f"release's record names {[str(s) for s in rec.substitutes]} (unnamed: "
                     f"{[str(s) for s in unnamed]}, named but not installed: {[str(s) for s in unused]})")
print(f"sparkpair: stack venv for vLLM {version} has", ", ".join(f"{k} {v}" for k, v in seen.items()))
for s in subs:
    print(f"sparkpair: vLLM {version} substitute: {s}")
PY
printf '%s\n%s\n' "$want_reqs" "$want_self" > "$stamp"
