# Shared by build-control-plane.sh and build-kind-node.sh (sourced, not run): Go-built tools cached per
# pinned version under ${FIREFLOW_TOOLS_DIR:-$HOME/.cache/fireflow-pool/tools}/<tool>-<version>/bin/.
# Needs versions.env sourced first.

tools_dir="${FIREFLOW_TOOLS_DIR:-$HOME/.cache/fireflow-pool/tools}"

export CGO_ENABLED=0
export GOFLAGS="-mod=mod -buildvcs=false"
build_flags=(-trimpath -tags notest)

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

# go_install_tool <dir> <package@version> [ldflags]: a module without replace directives, plain `go install`.
go_install_tool() {
    local dir="$1" package="$2" ldflags="${3:-}"
    rm -rf "$dir/bin.partial"; mkdir -p "$dir/bin.partial"
    GOBIN="$dir/bin.partial" go install "${build_flags[@]}" -ldflags "-s -w $ldflags" "$package"
    finish "$dir"
}

# kubernetes_build <dir> <module path> <cmd...>: `go build` of k8s.io/kubernetes/cmd/<cmd> at
# KUBERNETES_VERSION into <dir>/bin.partial, from a wrapper module. Every such module has the same
# requirements, so the Go build cache compiled for one serves the others.
kubernetes_build() {
    local dir="$1" module="$2"; shift 2
    wrapper_module "$dir" "$module"
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
    local cmd packages=()
    for cmd in "$@"; do packages+=("k8s.io/kubernetes/cmd/$cmd"); done
    (
        cd "$dir/module"
        {
            printf '\nrequire k8s.io/kubernetes %s\n\n' "$KUBERNETES_VERSION"
            printf 'tool (\n'
            printf '\t%s\n' "${packages[@]}"
            printf ')\n\n'
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
        go build "${build_flags[@]}" -ldflags "-s -w$stamp" -o ../bin.partial/ "${packages[@]}"
    )
}
