#!/usr/bin/env bash
# Make the Prometheus server and promtool available to the metrics tests (idempotent).
#
# Installs Debian's `prometheus` package (server + promtool) at a pinned version when
# either binary is missing, and never leaves the package's own service running: the tests
# start their own Prometheus on a free port. Safe to call when it is already installed.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/ensure-prometheus.sh
  Ensures 'prometheus' and 'promtool' (Debian package prometheus, version
  \$SPARKPAIR_PROMETHEUS_VERSION, default ${default_version}) are installed; installs them
  with apt-get when missing (needs root).
USAGE
}

# The version the metrics tests were written against (Debian bookworm, 2026-12).
default_version="2.42.0+ds-5+deb12u1"
version="${SPARKPAIR_PROMETHEUS_VERSION:-$default_version}"

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  echo "ensure-prometheus: $(prometheus --version 2>&1 | head -n1) already installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "ensure-prometheus: prometheus/promtool missing and this is not root; want: root to apt-get install prometheus=${version}" >&2
  exit 1
fi
echo "ensure-prometheus: installing prometheus=${version} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
# No service start from the package's maintainer scripts (policy-rc.d exit 101 = "forbidden").
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  created_policy=1
fi
cleanup() { if [[ $created_policy -eq 1 ]]; then rm -f "$policy"; fi; }
trap cleanup EXIT
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "prometheus=${version}" >/dev/null
echo "ensure-prometheus: $(prometheus --version 2>&1 | head -n1)"
