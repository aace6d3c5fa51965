#!/usr/bin/env bash
# Installs Debian's `prometheus` package (prometheus and promtool) for the monitoring tests
# (tests/chart/test_prometheus.py); a no-op when both are on the PATH. Needs root to install.
set -euo pipefail
log() { printf '[install-prometheus] %s\n' "$*" >&2; }
run_dir="${FIREFLOW_CACHE_DIR:-$HOME/.cache/fireflow-pool}/run"

if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
    log "prometheus $(prometheus --version 2>&1 | head -1 | awk '{print $3}'): installed"
    exit 0
fi
if [[ "$(id -u)" != 0 ]]; then
    log "prometheus is not installed and installing it needs root: apt-get install prometheus"
    exit 1
fi
log "installing prometheus from Debian"
mkdir -p "$run_dir"
exec {lock}>"$run_dir/apt.lock" # the lock of lib-images.sh's apt_install and docker-engine.sh: one apt at a time
flock "$lock"
apt-get -o DPkg::Lock::Timeout=600 update -qq
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    prometheus >/dev/null
# The package starts its own service where there is an init system; the tests start their own servers.
if command -v systemctl >/dev/null && [[ -d /run/systemd/system ]]; then systemctl disable --now prometheus || true; fi
exec {lock}>&-
