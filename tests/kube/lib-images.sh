# Shared by build-images.sh and build-kind-node.sh (sourced, not run): the Docker engine, Debian root
# filesystems made with debootstrap, and the Debian Python base image. Needs versions.env sourced first.

cache_dir="${FIREFLOW_CACHE_DIR:-$HOME/.cache/fireflow-pool}"
images_dir="$cache_dir/images"
logs_dir="$cache_dir/logs"
export DOCKER_BUILDKIT=0 # the legacy builder: BuildKit would fetch its dockerfile frontend from a registry

# on_exit <command>: run when the script ends, however it ends (last registered, first run); Ctrl-C and
# SIGTERM end it through the EXIT trap too.
_cleanups=()
on_exit() { _cleanups+=("$1"); }
_run_cleanups() {
    local i
    for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do eval "${_cleanups[i]}" || true; done
    _cleanups=()
}
trap _run_cleanups EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# kill_tree <pid>: a background job and everything it started (debootstrap, apt, dpkg).
kill_tree() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
    kill "$1" 2>/dev/null || true
}

# ensure_docker: a running engine; one this script started is stopped when it exits, unless the caller
# holds the engine for longer (FIREFLOW_DOCKER_HELD, set by .ci/test and .ci/main).
ensure_docker() {
    mkdir -p "$images_dir" "$logs_dir"
    local engine
    engine="$(bash "$here/docker-engine.sh" up)"
    if [[ "$engine" == started && -z "${FIREFLOW_DOCKER_HELD:-}" ]]; then
        on_exit 'bash "$here/docker-engine.sh" down'
    fi
}

# apt_install <package...>: on the host, for build tools that are missing (debootstrap, gcc). Builds run in
# parallel: one apt at a time (our lock), and apt waits for anyone else's dpkg lock instead of failing.
apt_install() {
    if [[ "$(id -u)" != 0 ]]; then log "missing $*; install it (needs root): apt-get install $*"; exit 1; fi
    local lock
    mkdir -p "$cache_dir/run"
    exec {lock}>"$cache_dir/run/apt.lock"
    flock "$lock"
    log "installing $* from Debian"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        "$@" >/dev/null
    exec {lock}>&-
}

# discard_workdirs <prefix>: what an interrupted build left in <prefix>.* (a chroot may still have /proc mounted).
discard_workdirs() {
    local dir
    for dir in "$1".*; do
        [[ -d "$dir" ]] || continue
        umount "$dir/root/proc" 2>/dev/null || true
        rm -rf --one-file-system "$dir"
    done
}

# in_root <root> <command...>: a command in the chroot with a clean environment (none of the host's
# PIP_*, proxies or locale leaks into the image).
in_root() {
    local root="$1"; shift
    chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"
}

# debootstrap_root <root> <package...>: Debian minbase plus the packages (and their dependencies, which
# debootstrap's --include does not resolve), with the release's security and bug-fix updates. Leaves
# /proc mounted in <root>: the caller's subshell unmounts it (see make_base_rootfs).
debootstrap_root() {
    local root="$1"; shift
    debootstrap --variant=minbase --include=ca-certificates "$DEBIAN_SUITE" "$root" "$DEBIAN_MIRROR" >&2
    mount -t proc proc "$root/proc"
    cat > "$root/etc/apt/sources.list" <<SOURCES
deb $DEBIAN_MIRROR $DEBIAN_SUITE main
deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main
deb ${DEBIAN_MIRROR%/debian}/debian-security $DEBIAN_SUITE-security main
SOURCES
    in_root "$root" apt-get update -qq
    in_root "$root" apt-get install -y -qq --no-install-recommends "$@" >&2
}

# slim_root <root>: apt's lists and caches, documentation and logs out.
slim_root() {
    local root="$1"
    in_root "$root" apt-get clean
    rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
        "$root"/usr/share/info/* "$root"/var/log/*.log "$root"/var/cache/debconf/*-old
}

# cached_rootfs <name> <key> <make function>: the path of a rootfs tarball cached as
# $images_dir/<name>-<key>.tar, made by `<make function> <root dir>` when missing.
cached_rootfs() {
    local name="$1" key="$2" make="$3" tarball work t=$SECONDS lock
    tarball="$images_dir/$name-$key.tar"
    # One builder at a time (.ci/test starts builds in parallel): a second waits, then finds the tarball.
    mkdir -p "$images_dir"
    exec {lock}>"$images_dir/.$name.lock"
    flock "$lock"
    if [[ ! -f "$tarball" ]]; then
        command -v debootstrap >/dev/null || apt_install debootstrap
        discard_workdirs "$images_dir/.$name"
        work="$(mktemp -d "$images_dir/.$name.XXXXXX")"
        log "$name: debootstrap $DEBIAN_SUITE into $work (a few minutes)"
        "$make" "$work/root" >&2
        tar --numeric-owner -C "$work/root" -cf "$work/rootfs.tar" .
        mv "$work/rootfs.tar" "$tarball"
        rm -rf --one-file-system "$work"
        log "$name: rootfs cached in $tarball ($((SECONDS - t))s)"
        local old
        for old in "$images_dir/$name"-*.tar; do [[ "$old" == "$tarball" ]] || rm -f "$old"; done
    fi
    exec {lock}>&-
    echo "$tarball"
}

# prune_tags <repository> <tag to keep>: earlier versions of one of our images (a tag still used by an image
# built on it stays until that image goes).
prune_tags() {
    local tag
    for tag in $(docker image ls --format '{{.Tag}}' "$1"); do
        [[ "$tag" == "$2" ]] || docker rmi "$1:$tag" >/dev/null 2>&1 || true
    done
}

# The one recipe of the Debian Python base; its hash (with the CA bundle it trusts) names the cached image.
BASE_PACKAGES=(python3.11 python3.11-venv ca-certificates)
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

base_key() {
    {
        declare -f make_base_rootfs debootstrap_root slim_root
        echo "${BASE_PACKAGES[*]} $DEBIAN_SUITE $DEBIAN_MIRROR"
        if [[ -f "$HOST_CA_BUNDLE" ]]; then cat "$HOST_CA_BUNDLE"; fi
    } | sha256sum | cut -c1-12
}

# make_base_rootfs <root>: a minimal bookworm with Debian's Python 3.11, shaped like the official python
# image where the Dockerfiles rely on it: `python` on PATH, pip/setuptools installed (with their RECORD, so
# the final stage's `pip uninstall` works) and no EXTERNALLY-MANAGED marker.
make_base_rootfs() (
    root="$1"
    trap 'umount "$root/proc" 2>/dev/null || true' EXIT
    debootstrap_root "$root" "${BASE_PACKAGES[@]}"
    ln -sf /usr/bin/python3.11 "$root/usr/local/bin/python"
    ln -sf /usr/bin/python3.11 "$root/usr/local/bin/python3"
    rm -f "$root"/usr/lib/python3.11/EXTERNALLY-MANAGED
    local pip_wheel
    pip_wheel="$(cd "$root" && echo usr/share/python-wheels/pip-*.whl)"
    in_root "$root" python3.11 "/$pip_wheel/pip" install --quiet --no-index --no-cache-dir \
        --root-user-action=ignore --find-links /usr/share/python-wheels pip setuptools
    # Builds reach PyPI from this machine's network, which trusts the host's CA bundle.
    if [[ -f "$HOST_CA_BUNDLE" ]]; then cp "$HOST_CA_BUNDLE" "$root/etc/ssl/certs/ca-certificates.crt"; fi
    slim_root "$root"
)

ensure_base_image() {
    local key tag tarball lock
    key="$(base_key)"
    tag="fireflow-pool/python-base:3.11-$DEBIAN_SUITE-$key"
    mkdir -p "$images_dir"
    exec {lock}>"$images_dir/.python-base-image.lock"
    flock "$lock"
    if docker image inspect "$tag" >/dev/null 2>&1; then
        log "python base: cached image $tag"
    else
        tarball="$(cached_rootfs "python-base-$DEBIAN_SUITE" "$key" make_base_rootfs)"
        log "python base: importing $tarball as $tag"
        docker import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'ENV LANG=C.UTF-8' \
            --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt" \
            --change 'CMD ["python3"]' \
            "$tarball" "$tag" >/dev/null
        prune_tags fireflow-pool/python-base "${tag#*:}"
    fi
    exec {lock}>&-
    echo "$tag"
}

