#!/usr/bin/env bash
# Builds the test control plane (etcd, etcdctl, kube-apiserver, kube-controller-manager), helm and psa-check from
# Go modules with the plain `go` client, into a per-version cache outside the repo:
#   ${FIREFLOW_TOOLS_DIR:-$HOME/.cache/fireflow-pool/tools}/<tool>-<version>/bin/
# A tool whose binaries exist for the pinned version is reused; anything missing is (re)built.
# Pins live in versions.env next to this script. See ../shared/docs/control-plane-from-go-modules.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
log() { printf '[build-control-plane] %s\n' "$*" >&2; }
# shellcheck source=lib-go.sh
source "$here/lib-go.sh"

build_etcd() {
    local dir="$tools_dir/etcd-$ETCD_VERSION"
    if complete "$dir" etcd etcdctl; then log "etcd $ETCD_VERSION: cached in $dir/bin"; return; fi
    log "etcd $ETCD_VERSION: building into $dir/bin"
    wrapper_module "$dir" fireflow.local/tools/etcd
    (
        cd "$dir/module"
        # etcd's own go.mod points its sibling modules at ../api etc.; pin them to the release instead.
        cat >> go.mod <<MOD

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/etcdctl/v3 $ETCD_VERSION
	go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
)

tool (
	go.etcd.io/etcd/server/v3
	go.etcd.io/etcd/etcdctl/v3
)
MOD
        go mod tidy
        go build "${build_flags[@]}" -ldflags "-s -w" -o ../bin.partial/etcd go.etcd.io/etcd/server/v3
        go build "${build_flags[@]}" -ldflags "-s -w" -o ../bin.partial/etcdctl go.etcd.io/etcd/etcdctl/v3
    )
    finish "$dir"
}

build_kubernetes() {
    local dir="$tools_dir/kubernetes-$KUBERNETES_VERSION"
    if complete "$dir" kube-apiserver kube-controller-manager; then
        log "kubernetes $KUBERNETES_VERSION: cached in $dir/bin"; return
    fi
    log "kubernetes $KUBERNETES_VERSION: building kube-apiserver, kube-controller-manager into $dir/bin"
    kubernetes_build "$dir" fireflow.local/tools/kubernetes kube-apiserver kube-controller-manager
    finish "$dir"
}

build_helm() {
    local dir="$tools_dir/helm-$HELM_VERSION"
    if complete "$dir" helm; then log "helm $HELM_VERSION: cached in $dir/bin"; return; fi
    log "helm $HELM_VERSION: building into $dir/bin"
    # helm has no replace directives, so plain `go install` works.
    go_install_tool "$dir" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
}

# psa-check (psa-check/main.go): the restricted-profile verdict of the real k8s.io/pod-security-admission
# library at the control plane's release, for pod templates the tests build. Cached per release and source.
psa_check_dir() {
    local source_hash
    source_hash="$(sha256sum "$here/psa-check/main.go" | cut -c1-12)"
    printf '%s/psa-check-%s-%s' "$tools_dir" "$KUBERNETES_VERSION" "$source_hash"
}

build_psa_check() {
    local dir staging_version="v0.${KUBERNETES_VERSION#v1.}"
    dir="$(psa_check_dir)"
    if complete "$dir" psa-check; then log "psa-check $KUBERNETES_VERSION: cached in $dir/bin"; return; fi
    log "psa-check $KUBERNETES_VERSION: building into $dir/bin"
    wrapper_module "$dir" fireflow.local/tools/psa-check
    cp "$here/psa-check/main.go" "$dir/module/"
    (
        cd "$dir/module"
        printf '\nrequire (\n\tk8s.io/pod-security-admission %s\n\tk8s.io/api %s\n)\n' \
            "$staging_version" "$staging_version" >> go.mod
        go mod tidy
        go build "${build_flags[@]}" -ldflags "-s -w" -o ../bin.partial/psa-check .
    )
    finish "$dir"
}

main() {
    command -v go >/dev/null || { log "the go toolchain is required (Go >= 1.26)"; exit 1; }
    mkdir -p "$tools_dir"
    local only="${1:-all}" start=$SECONDS t
    log "$(go version); tools dir $tools_dir"
    for tool in etcd kubernetes helm psa-check; do
        [[ "$only" == all || "$only" == "$tool" ]] || continue
        t=$SECONDS
        "build_${tool//-/_}"
        log "$tool: done in $((SECONDS - t))s"
    done
    log "all done in $((SECONDS - start))s"
}

main "$@"
