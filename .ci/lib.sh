# Shared by .ci/test and .ci/main (sourced): progress lines, background builds with their logs, and the
# clean-up of what a run started (background builds, its kind cluster, a dockerd it started), run when the
# script ends however it ends (Ctrl-C and SIGTERM included).
# Needs: ci_name (for the progress lines) and kind_cluster (the cluster to delete at the end, if any).

start=$SECONDS
logs="${FIREFLOW_CACHE_DIR:-$HOME/.cache/fireflow-pool}/logs"
mkdir -p "$logs"
engine=""
background=() # builds, waited for by wait_background
beside=()     # jobs the script waits for itself (a test tier, a check); stopped at the end like the builds

say() { printf '[%s %dm%02ds] %s\n' "$ci_name" $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)) "$*" >&2; }

kill_tree() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}

ci_cleanup() {
    local status=$?
    trap - EXIT INT TERM
    local pid
    for pid in "${background[@]}" "${beside[@]}"; do kill_tree "$pid"; done
    if [[ -n "$engine" ]]; then
        .venv/bin/python -m tests.kube.kind cleanup --name "$kind_cluster" || true
    fi
    if [[ "$engine" == started ]]; then bash tests/kube/docker-engine.sh down; fi
    say "done (exit status $status)"
    exit "$status"
}
trap ci_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# docker_up: the engine for the whole run; scripts and pytest below leave it running, ci_cleanup stops it
# when this run started it.
docker_up() {
    engine="$(bash tests/kube/docker-engine.sh up)"
    export FIREFLOW_DOCKER_HELD=1
}

# in_background <name> <command...>: its output in $logs/<name>.log, shown when it fails.
in_background() {
    local name="$1"; shift
    ( "$@" > "$logs/$name.log" 2>&1 || { echo "[$ci_name] $name failed; the end of $logs/$name.log:" >&2
        tail -n 40 "$logs/$name.log" >&2; exit 1; } ) &
    background+=("$!")
}

# beside_this <name> <command...>: like in_background, but not waited for by wait_background; its pid in
# $beside_pid.
beside_this() {
    in_background "$@"
    beside_pid=${background[-1]}
    unset 'background[-1]'
    beside+=("$beside_pid")
}

# wait_background: every background job waited for; the status is the first failure's.
wait_background() {
    local pid status=0 failed
    for pid in "${background[@]}"; do
        failed=0
        wait "$pid" || failed=$?
        ((status)) || status=$failed
    done
    background=()
    return "$status"
}

# build_images_beside_the_control_plane: the network-bound Debian builds (the project images on their base,
# the node rootfs) in the background while the control plane's Go build runs.
build_images_beside_the_control_plane() {
    say "building (cached by version): the Debian images beside the control plane (Go)"
    in_background images bash tests/kube/build-images.sh --test-images
    in_background node-rootfs bash tests/kube/build-kind-node.sh rootfs
    bash tests/kube/build-control-plane.sh
}
