#!/usr/bin/env bash
# Builds the project's images, Dockerfile.worker and Dockerfile.operator, with the local Docker engine
# (started by docker-engine.sh when none is running). Their PYTHON_IMAGE build argument is either
#   --base debian    (default) a Debian bookworm Python 3.11 image made here from Debian packages with
#                    debootstrap: no registry needed. Cached as a tarball under
#                    ${FIREFLOW_CACHE_DIR:-~/.cache/fireflow-pool}/images/ and as a local image.
#   --base official  the Dockerfiles' own default, the pinned python:3.11-slim-bookworm from Docker Hub.
# The project images are tagged fireflow-worker:<version> and fireflow-operator:<version> (pyproject's
# version, the chart's appVersion); Docker's layer cache makes a rebuild without changes take seconds.
# --test-images also builds the e2e's two test images (the worker on OLDER_DBOS_VERSION, a crashing worker).
# stdout: KEY=VALUE lines (PYTHON_IMAGE, WORKER_IMAGE, OPERATOR_IMAGE[, OLDER_DBOS_WORKER_IMAGE,
# CRASHING_WORKER_IMAGE]); progress and sizes on stderr.
set -euo pipefail
shopt -s inherit_errexit

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
log() { printf '[build-images] %s\n' "$*" >&2; }
# shellcheck source=lib-images.sh
source "$here/lib-images.sh"

project_version() { sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n1; }

# build_image <label> <tag> <dockerfile> <context> <python image>: the build's output goes to a log; on failure
# its tail. An empty python image keeps the Dockerfile's own default (the official base, as a user builds it).
build_image() {
    local label="$1" tag="$2" dockerfile="$3" context="$4" python_image="$5" t=$SECONDS build_arg=()
    local build_log="$logs_dir/$label.build.log"
    [[ -z "$python_image" ]] || build_arg=(--build-arg "PYTHON_IMAGE=$python_image")
    if ! docker build --network host "${build_arg[@]}" -f "$dockerfile" -t "$tag" "$context" >"$build_log" 2>&1; then
        log "$label: docker build failed; last lines of $build_log:"
        tail -n 30 "$build_log" >&2
        return 1
    fi
    log "$label: built $tag from $(basename "$dockerfile") in $((SECONDS - t))s"
}

build_project_image() { # <name> <dockerfile> <python image>
    build_image "$1" "$1:$(project_version)" "$repo/$2" "$repo" "$3"
}

# The upgrade e2e's "before" image: the same worker and Dockerfile, its dbos pinned to an older release whose
# schema is older, so the upgrade migrates for real (tests/e2e/test_upgrade_scenarios.py).
build_older_dbos_worker() { # <python image>
    local context status=0
    context="$(mktemp -d)"
    (cd "$repo" && tar -c --exclude=__pycache__ --exclude='*.egg-info' .dockerignore pyproject.toml README.md \
        .ci/constraints.txt worker operator) | tar -x -C "$context"
    sed -i "s/\"dbos==[0-9.]*\"/\"dbos==$OLDER_DBOS_VERSION\"/" "$context/pyproject.toml"
    sed -i "s/^dbos==.*/dbos==$OLDER_DBOS_VERSION/" "$context/.ci/constraints.txt"
    build_image fireflow-worker-older-dbos "fireflow-worker:$(project_version)-dbos-$OLDER_DBOS_VERSION" \
        "$repo/Dockerfile.worker" "$context" "$1" || status=$?
    rm -rf "$context"
    return "$status"
}

# The rollback e2e's bad image: migrates like the worker, its worker exits at start (tests/kube/crashing-worker.sh
# in front of the real entry point on PATH).
build_crashing_worker() {
    local worker="$1" tag="fireflow-worker-crashing:$(project_version)"
    if ! docker build --network none -t "$tag" -f - "$here" >"$logs_dir/fireflow-worker-crashing.build.log" 2>&1 <<EOF
FROM $worker
COPY crashing-worker.sh /opt/fireflow-crashing/bin/fireflow-worker
ENV PATH=/opt/fireflow-crashing/bin:\$PATH FIREFLOW_REAL_WORKER=/opt/fireflow/bin/fireflow-worker
EOF
    then
        log "fireflow-worker-crashing: docker build failed; see $logs_dir/fireflow-worker-crashing.build.log"
        return 1
    fi
    log "fireflow-worker-crashing: built $tag"
}

size_mb() { docker image inspect --format '{{.Size}}' "$1" | awk '{printf "%d MB", $1 / 1000000}'; }

main() {
    local base=debian test_images=0
    while (($#)); do
        case "$1" in
            --base) base="$2"; shift 2 ;;
            --test-images) test_images=1; shift ;;
            *) log "usage: $0 [--base debian|official] [--test-images]"; exit 2 ;;
        esac
    done
    ensure_docker
    local start=$SECONDS python_image build_arg
    case "$base" in
        debian) python_image="$(ensure_base_image)"; build_arg="$python_image" ;;
        official)
            # Pulled by its pinned reference and also tagged plainly: `kind load` takes no digests.
            local pinned
            pinned="$(sed -n 's/^ARG PYTHON_IMAGE=//p' "$repo/Dockerfile.worker")"
            docker pull -q "$pinned" >&2
            python_image=fireflow-pool/python-base:official
            docker tag "$pinned" "$python_image"
            build_arg="" ;;
        *) log "--base is debian or official, not $base"; exit 2 ;;
    esac
    # Both images in parallel: most of a build is pip waiting on the network.
    build_project_image fireflow-worker Dockerfile.worker "$build_arg" & local worker=$!
    build_project_image fireflow-operator Dockerfile.operator "$build_arg" & local operator=$!
    local older=""
    if ((test_images)); then build_older_dbos_worker "$build_arg" & older=$!; fi
    local failed=0
    wait "$worker" || failed=1
    wait "$operator" || failed=1
    [[ -z "$older" ]] || wait "$older" || failed=1
    ((failed == 0)) || exit 1
    local version
    version="$(project_version)"
    log "sizes: python base $(size_mb "$python_image"), fireflow-worker:$version $(size_mb "fireflow-worker:$version"), fireflow-operator:$version $(size_mb "fireflow-operator:$version")"
    log "all done in $((SECONDS - start))s"
    echo "PYTHON_IMAGE=$python_image"
    echo "WORKER_IMAGE=fireflow-worker:$version"
    echo "OPERATOR_IMAGE=fireflow-operator:$version"
    if ((test_images)); then
        build_crashing_worker "fireflow-worker:$version"
        echo "OLDER_DBOS_WORKER_IMAGE=fireflow-worker:$version-dbos-$OLDER_DBOS_VERSION"
        echo "CRASHING_WORKER_IMAGE=fireflow-worker-crashing:$version"
    fi
}

main "$@"
