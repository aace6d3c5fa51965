#!/usr/bin/env bash
# The TypeScript caller of the interop tests (examples/interop/typescript): its pinned @dbos-inc/dbos-sdk
# versions installed with `npm ci` from the npm registry, once per lock file, into
#   ${FIREFLOW_CACHE_DIR:-~/.cache/fireflow-pool}/npm/interop-<hash of package.json + package-lock.json>
# (npm's own cache beside it, so a second install needs no network). Prints that directory. Node.js and npm
# come from Debian (`nodejs`, `npm`) when missing, which needs root. A no-op when cached. Several processes
# (pytest-xdist's, .ci/test's) may run it at once on a cold cache: one installs, under a lock, the others wait
# for it and print the same directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
source_dir=examples/interop/typescript
cache_dir="${FIREFLOW_CACHE_DIR:-$HOME/.cache/fireflow-pool}"
key="$(cat "$source_dir/package.json" "$source_dir/package-lock.json" | sha256sum | cut -c1-16)"
dest="$cache_dir/npm/interop-$key"

log() { printf '[typescript-sdk] %s\n' "$*" >&2; }

if [[ -f "$dest/.installed" ]]; then
    echo "$dest"
    exit 0
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    if [[ "$(id -u)" != 0 ]]; then
        log "Node.js and npm are missing and installing them needs root: apt-get install nodejs npm"
        exit 1
    fi
    log "installing nodejs and npm from Debian"
    mkdir -p "$cache_dir/run"
    exec {lock}>"$cache_dir/run/apt.lock" # one apt at a time (docker-engine.sh, lib-images.sh take it too)
    flock "$lock"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        nodejs npm >/dev/null
    exec {lock}>&-
fi
mkdir -p "$cache_dir/npm" "$cache_dir/run"
exec {install_lock}>"$cache_dir/run/npm-interop.lock" # one npm ci, rm and mv at a time
flock "$install_lock"
if [[ -f "$dest/.installed" ]]; then # installed by another process while this one waited
    echo "$dest"
    exit 0
fi
work="$(mktemp -d "$cache_dir/npm/.interop-XXXXXX")"
trap 'rm -rf "$work"' EXIT
cp "$source_dir/package.json" "$source_dir/package-lock.json" "$work/"
log "npm ci of $source_dir (@dbos-inc/dbos-sdk as pinned there) into $dest"
(cd "$work" && npm ci --no-audit --no-fund --ignore-scripts --prefer-offline --loglevel=error \
    --cache "$cache_dir/npm/cache" >&2)
touch "$work/.installed"
rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest"
