#!/usr/bin/env bash
# Make a Docker engine available to the test suite (idempotent).
#
# Installs docker.io from the distribution's packages when dockerd is missing, starts
# dockerd in the background (log: $SPARKPAIR_DOCKERD_LOG) when no engine answers, and
# waits until `docker info` works. Safe to call when an engine is already running.
set -euo pipefail

usage() {
  cat <<USAGE
usage: scripts/ensure-docker.sh [--timeout SECONDS]
  Ensures a Docker engine answers 'docker info'. Installs docker.io with apt-get when
  dockerd is missing (needs root), starts dockerd in the background when it is not
  running, and waits up to SECONDS (default 120) for it.
  env: SPARKPAIR_DOCKERD_LOG  dockerd log file (default /var/log/sparkpair-dockerd.log)
USAGE
}

timeout_s=120
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --timeout) timeout_s="${2:?--timeout needs a value}"; shift 2 ;;
    *) usage >&2; exit 2 ;;
  esac
done

log="${SPARKPAIR_DOCKERD_LOG:-/var/log/sparkpair-dockerd.log}"

engine_up() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && command -v docker-init >/dev/null 2>&1 && engine_up; then
  echo "ensure-docker: engine already running ($(docker version --format '{{.Server.Version}}' 2>/dev/null || echo '?'))"
  exit 0
fi

# docker.io: the engine; tini: provides docker-init, which compose's `init: true` needs.
if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker-init >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "ensure-docker: dockerd or docker-init is missing and this is not root; want: root to apt-get install docker.io tini" >&2
    exit 1
  fi
  echo "ensure-docker: installing docker.io and tini (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends docker.io tini >/dev/null
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  echo "ensure-docker: starting dockerd (log: $log)"
  mkdir -p "$(dirname "$log")"
  nohup dockerd >>"$log" 2>&1 &
  disown || true
fi

deadline=$((SECONDS + timeout_s))
until engine_up; do
  if (( SECONDS > deadline )); then
    echo "ensure-docker: docker info still fails after ${timeout_s} s; dockerd log tail ($log):" >&2
    tail -n 30 "$log" >&2 || true
    exit 1
  fi
  sleep 1
done
echo "ensure-docker: engine ready ($(docker version --format '{{.Server.Version}}'))"
