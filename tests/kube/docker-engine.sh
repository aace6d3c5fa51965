#!/usr/bin/env bash
# The Docker engine the image and kind scripts need, started only when none is running.
#   docker-engine.sh up     a running engine: reuse it, or install docker.io from Debian (when dockerd is
#                           missing) and start dockerd; prints "started" when this script owns it, else "running".
#                           The caller that got "started" stops it; callers below it run with
#                           FIREFLOW_DOCKER_HELD=1 and leave it be (one top-level owner at a time)
#   docker-engine.sh down   stop the dockerd this script started (a no-op for anyone else's engine)
#   docker-engine.sh status "owned", "foreign" or "stopped"
# Ownership is a pid file under ${FIREFLOW_CACHE_DIR:-~/.cache/fireflow-pool}/run, so a run that was
# interrupted leaves a dockerd the next run adopts and stops, instead of one nobody stops.
set -euo pipefail

cache_dir="${FIREFLOW_CACHE_DIR:-$HOME/.cache/fireflow-pool}"
run_dir="$cache_dir/run"
pid_file="$run_dir/dockerd.pid"
log_file="$run_dir/dockerd.log"

log() { printf '[docker-engine] %s\n' "$*" >&2; }

responding() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

owned_pid() {
    [[ -f "$pid_file" ]] || return 1
    local pid
    pid="$(cat "$pid_file")"
    [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == dockerd ]] || return 1
    echo "$pid"
}

status() {
    if owned_pid >/dev/null; then echo owned
    elif responding; then echo foreign
    else echo stopped
    fi
}

install_engine() {
    if [[ "$(id -u)" != 0 ]]; then
        log "dockerd is not installed and installing it needs root: apt-get install docker.io"
        exit 1
    fi
    log "installing docker.io from Debian"
    mkdir -p "$run_dir"
    local lock
    exec {lock}>"$run_dir/apt.lock" # the lock of lib-images.sh's apt_install: one apt at a time
    flock "$lock"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        docker.io >/dev/null
    exec {lock}>&-
}

up() {
    if owned_pid >/dev/null && responding; then echo started; return; fi
    if responding; then echo running; return; fi
    # A dockerd still shutting down would refuse a second one: let it finish first.
    local waited=0
    while pgrep -x dockerd >/dev/null && ((waited < 60)); do sleep 0.5; waited=$((waited + 1)); done
    command -v dockerd >/dev/null || install_engine
    mkdir -p "$run_dir"
    # A dockerd killed mid-run leaves its pid file and containerd state; dockerd clears both itself when
    # the pid in them is gone.
    log "starting dockerd (log: $log_file)"
    setsid dockerd >>"$log_file" 2>&1 < /dev/null &
    echo $! > "$pid_file"
    waited=0
    until responding; do
        if ! owned_pid >/dev/null; then
            log "dockerd exited at start; last lines of $log_file:"
            tail -n 20 "$log_file" >&2
            exit 1
        fi
        if (( waited >= 120 )); then log "dockerd did not answer within 60 s; see $log_file"; exit 1; fi
        sleep 0.5; waited=$((waited + 1))
    done
    echo started
}

down() {
    local pid
    if ! pid="$(owned_pid)"; then rm -f "$pid_file"; return; fi
    log "stopping dockerd ($pid)"
    kill -TERM "$pid" 2>/dev/null || true
    local waited=0
    while [[ -d "/proc/$pid" ]] && (( waited < 60 )); do sleep 0.5; waited=$((waited + 1)); done
    if [[ -d "/proc/$pid" ]]; then log "dockerd did not stop within 30 s; killing it"; kill -KILL "$pid" 2>/dev/null || true; fi
    # Only our record: a dockerd started meanwhile by someone else has written its own.
    if [[ "$(cat "$pid_file" 2>/dev/null)" == "$pid" ]]; then rm -f "$pid_file"; fi
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
