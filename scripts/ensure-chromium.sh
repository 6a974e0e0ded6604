#!/usr/bin/env bash
# Make headless Chromium available to the status-page test (idempotent).
#
# Installs Debian's `chromium` package at a pinned version when no chromium binary is on
# PATH. Safe to call when it is already installed.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/ensure-chromium.sh
  Ensures 'chromium' (Debian package, version \$SPARKPAIR_CHROMIUM_VERSION, default
  ${default_version}) is installed; installs it with apt-get when missing (needs root).
USAGE
}

# The version the status-page test was written against (Debian bookworm-security, 2026-12).
default_version="156.0.8078.114-1~deb12u1"
version="${SPARKPAIR_CHROMIUM_VERSION:-$default_version}"

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) usage >&2; exit 2 ;;
esac

if command -v chromium >/dev/null 2>&1; then
  echo "ensure-chromium: $(chromium --version 2>/dev/null || echo 'chromium') already installed"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "ensure-chromium: chromium is missing and this is not root; want: root to apt-get install chromium=${version}" >&2
  exit 1
fi
echo "ensure-chromium: installing chromium=${version} (apt-get)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "chromium=${version}" fonts-dejavu-core >/dev/null
echo "ensure-chromium: $(chromium --version)"
