#!/usr/bin/env bash
# Builds the test control plane (etcd, etcdctl, kube-apiserver, kube-controller-manager) and helm from
# Go modules with the plain `go` client, into a per-version cache outside the repo:
#   ${FIREFLOW_TOOLS_DIR:-$HOME/.cache/fireflow-pool/tools}/<tool>-<version>/bin/
# A tool whose binaries exist for the pinned version is reused; anything missing is (re)built.
# Pins live in versions.env next to this script. See ../shared/docs/control-plane-from-go-modules.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
tools_dir="${FIREFLOW_TOOLS_DIR:-$HOME/.cache/fireflow-pool/tools}"

export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
build_flags=(-trimpath -tags notest)

log() { printf '[build-control-plane] %s\n' "$*" >&2; }

# complete <dir> <binary...>: true when every binary exists for this pin (the stamp is written last,
# so an interrupted build is never mistaken for a finished one).
complete() {
    local dir="$1"; shift
    [[ -f "$dir/.complete" ]] || return 1
    local bin
    for bin in "$@"; do [[ -x "$dir/bin/$bin" ]] || return 1; done
}

# wrapper_module <dir> <module path>: a fresh throwaway module the tool is built from; `go install
# pkg@version` refuses modules that carry replace directives (k8s, etcd server).
wrapper_module() {
    rm -rf "$1/module" "$1/bin.partial"
    mkdir -p "$1/module" "$1/bin.partial"
    printf 'module %s\n\ngo 1.26\n' "$2" > "$1/module/go.mod"
}

finish() {
    local dir="$1"
    rm -rf "$dir/bin"
    mv "$dir/bin.partial" "$dir/bin"
    date -u +%Y-%m-%dT%H:%M:%SZ > "$dir/.complete"
}

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
    wrapper_module "$dir" fireflow.local/tools/kubernetes
    local gomod staging_version minor
    gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    minor="${KUBERNETES_VERSION#v1.}"
    staging_version="v0.${minor}"
    local etcd_wanted
    etcd_wanted="$(awk '$1 == "go.etcd.io/etcd/client/v3" {print $2}' "$gomod")"
    if [[ "$etcd_wanted" != "$ETCD_VERSION" ]]; then
        log "note: k8s $KUBERNETES_VERSION requires etcd client $etcd_wanted; ETCD_VERSION pin is $ETCD_VERSION"
    fi
    (
        cd "$dir/module"
        {
            printf '\nrequire k8s.io/kubernetes %s\n\n' "$KUBERNETES_VERSION"
            printf 'tool (\n\tk8s.io/kubernetes/cmd/kube-apiserver\n\tk8s.io/kubernetes/cmd/kube-controller-manager\n)\n\n'
            # k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them to ./staging/...;
            # those replaces are ignored for a dependency (kubernetes/kubernetes#79384), so map each
            # one to its published release. The set differs between releases: derive it from go.mod.
            printf 'replace (\n'
            awk -v v="$staging_version" '$2 == "=>" && $3 ~ /^\.\/staging\// {printf "\t%s => %s %s\n", $1, $1, v}' "$gomod"
            printf ')\n'
        } >> go.mod
        go mod tidy
        local pkg=k8s.io/component-base/version cpkg=k8s.io/client-go/pkg/version stamp="" p
        local major_minor="${KUBERNETES_VERSION#v}"; major_minor="${major_minor%.*}"
        for p in "$pkg" "$cpkg"; do
            stamp+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=${major_minor%%.*}"
            stamp+=" -X $p.gitMinor=${major_minor#*.} -X $p.gitTreeState=clean"
            stamp+=" -X $p.buildDate=1970-01-01T00:00:00Z"
        done
        go build "${build_flags[@]}" -ldflags "-s -w$stamp" -o ../bin.partial/ \
            k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
    )
    finish "$dir"
}

build_helm() {
    local dir="$tools_dir/helm-$HELM_VERSION"
    if complete "$dir" helm; then log "helm $HELM_VERSION: cached in $dir/bin"; return; fi
    log "helm $HELM_VERSION: building into $dir/bin"
    rm -rf "$dir/bin.partial"; mkdir -p "$dir/bin.partial"
    # helm has no replace directives, so plain `go install` works.
    GOBIN="$dir/bin.partial" go install "${build_flags[@]}" \
        -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    finish "$dir"
}

main() {
    command -v go >/dev/null || { log "the go toolchain is required (Go >= 1.26)"; exit 1; }
    mkdir -p "$tools_dir"
    local only="${1:-all}" start=$SECONDS t
    log "$(go version); tools dir $tools_dir"
    for tool in etcd kubernetes helm; do
        [[ "$only" == all || "$only" == "$tool" ]] || continue
        t=$SECONDS
        "build_$tool"
        log "$tool: done in $((SECONDS - t))s"
    done
    log "all done in $((SECONDS - start))s"
}

main "$@"
