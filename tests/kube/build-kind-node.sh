#!/usr/bin/env bash
# Assembles an offline kind node image at KUBERNETES_VERSION without any container registry, from
#   - Go modules: kind, crictl, coredns, and kubelet, kubeadm, kubectl, kube-scheduler, kube-proxy
#     (the wrapper-module build of build-control-plane.sh, sharing its Go build cache), plus the
#     control plane's own etcd, kube-apiserver and kube-controller-manager;
#   - Debian packages: systemd, containerd, runc, the CNI plugins, iptables and the rest of kind's base
#     image, debootstrapped, with kind's own base files (entrypoint, units, containerd config) taken from
#     the kind module;
#   - pause, compiled with `gcc -static` from the k8s.io/kubernetes module.
# The component images carry the registry.k8s.io names kubeadm expects and are imported into the node's
# containerd, so `kind create cluster` pulls nothing. kindnetd is not on the Go proxy: the node has a
# static ptp + host-local CNI config (single node) and the cluster is made with disableDefaultCNI.
#
# Everything is cached by version: binaries under ${FIREFLOW_TOOLS_DIR:-~/.cache/fireflow-pool/tools},
# the node rootfs tarball under ${FIREFLOW_CACHE_DIR:-~/.cache/fireflow-pool}/images, the node image in
# the local Docker engine as fireflow-pool/kind-node:<k8s version>-<recipe hash>. Cached, this is a no-op.
#   build-kind-node.sh            everything; stdout: NODE_IMAGE=... and KIND=<path of kind>
#   build-kind-node.sh binaries [pause|node_binaries|kind|crictl|coredns...]
#                                 only those Go and gcc builds (default all; no Docker needed)
#   build-kind-node.sh rootfs     only the node's root filesystem tarball (no Docker needed)
set -euo pipefail
shopt -s inherit_errexit

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
log() { printf '[build-kind-node] %s\n' "$*" >&2; }
# shellcheck source=lib-go.sh
source "$here/lib-go.sh"
# shellcheck source=lib-images.sh
source "$here/lib-images.sh"

kind_dir="$tools_dir/kind-$KIND_VERSION"
crictl_dir="$tools_dir/crictl-$CRICTL_VERSION"
coredns_dir="$tools_dir/coredns-$COREDNS_VERSION"
node_bin_dir="$tools_dir/kubernetes-node-$KUBERNETES_VERSION"
pause_dir="$tools_dir/pause-$PAUSE_VERSION"
etcd_dir="$tools_dir/etcd-$ETCD_VERSION"
control_plane_dir="$tools_dir/kubernetes-$KUBERNETES_VERSION"
NODE_BINARIES=(kubelet kubeadm kubectl kube-scheduler kube-proxy)
build_log="$logs_dir/kind-node.build.log"

# -- binaries ---------------------------------------------------------------------------------------------

build_kind() {
    if complete "$kind_dir" kind; then log "kind $KIND_VERSION: cached"; return; fi
    log "kind $KIND_VERSION: go install"
    go_install_tool "$kind_dir" "sigs.k8s.io/kind@$KIND_VERSION"
}

build_crictl() {
    if complete "$crictl_dir" crictl; then log "crictl $CRICTL_VERSION: cached"; return; fi
    log "crictl $CRICTL_VERSION: go install"
    go_install_tool "$crictl_dir" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
        "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"
}

build_coredns() {
    if complete "$coredns_dir" coredns; then log "coredns $COREDNS_VERSION: cached"; return; fi
    log "coredns $COREDNS_VERSION: go install (the longest of these builds: every plugin is compiled in)"
    go_install_tool "$coredns_dir" "github.com/coredns/coredns@$COREDNS_VERSION"
}

build_node_binaries() {
    if complete "$node_bin_dir" "${NODE_BINARIES[@]}"; then log "kubernetes $KUBERNETES_VERSION node binaries: cached"; return; fi
    log "kubernetes $KUBERNETES_VERSION: building ${NODE_BINARIES[*]}"
    kubernetes_build "$node_bin_dir" fireflow.local/tools/kubernetes-node "${NODE_BINARIES[@]}"
    finish "$node_bin_dir"
}

build_pause() {
    if complete "$pause_dir" pause; then log "pause $PAUSE_VERSION: cached"; return; fi
    command -v gcc >/dev/null && [[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/aarch64-linux-gnu/libc.a ]] \
        || apt_install gcc libc6-dev
    local source
    source="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')/build/pause/linux/pause.c"
    rm -rf "$pause_dir/bin.partial"; mkdir -p "$pause_dir/bin.partial"
    # The flags of build/pause/Makefile.
    gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-fireflow" -o "$pause_dir/bin.partial/pause" "$source"
    finish "$pause_dir"
    log "pause $PAUSE_VERSION: compiled"
}

# build_binaries [step...]: all of them by default.
build_binaries() {
    command -v go >/dev/null || { log "the go toolchain is required (Go >= 1.26)"; exit 1; }
    mkdir -p "$tools_dir"
    local t step steps=("$@")
    ((${#steps[@]})) || steps=(pause node_binaries kind crictl coredns)
    for step in "${steps[@]}"; do
        t=$SECONDS
        "build_$step"
        (( SECONDS - t < 2 )) || log "$step: done in $((SECONDS - t))s"
    done
}

# -- the node's root filesystem ---------------------------------------------------------------------------

NODE_PACKAGES=(
    systemd conntrack iptables nftables iproute2 ethtool util-linux mount kmod libseccomp2 pigz e2fsprogs
    bash ca-certificates curl jq procps containerd runc containernetworking-plugins
)
POD_SUBNET=10.244.0.0/24 # kind's default pod subnet, as the controller-manager gives it to the only node

kind_source() { go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }

# make_node_rootfs <root>: kind's images/base (its Dockerfile's steps, its files) on Debian's packages.
make_node_rootfs() (
    root="$1"
    trap 'umount "$root/proc" 2>/dev/null || true' EXIT
    debootstrap_root "$root" "${NODE_PACKAGES[@]}"
    local files
    files="$(kind_source)/images/base/files"
    install -m 0755 "$files"/usr/local/bin/* "$root/usr/local/bin/"
    mkdir -p "$root/kind/bin" "$root/etc/containerd" "$root/etc/kubernetes/manifests" "$root/opt/cni/bin" \
        "$root/etc/cni/net.d" "$root/etc/systemd/system/kubelet.service.d"
    install -m 0644 "$files"/kind/README.txt "$root/kind/"
    install -m 0755 "$files"/kind/bin/* "$root/kind/bin/"
    install -m 0644 "$files/etc/crictl.yaml" "$root/etc/"
    install -m 0644 "$files"/etc/default/* "$root/etc/default/"
    install -m 0644 "$files"/etc/sysctl.d/* "$root/etc/sysctl.d/"
    local unit
    for unit in "$files"/etc/systemd/system/*; do
        if [[ -f "$unit" ]]; then install -m 0644 "$unit" "$root/etc/systemd/system/"; fi
    done
    install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$root/etc/systemd/system/kubelet.service.d/"
    # kind's containerd config, with our pause and without the fuse-overlayfs proxy (rootless only; its
    # snapshotter is not packaged in Debian).
    sed -e "s|sandbox_image = .*|sandbox_image = \"registry.k8s.io/pause:$PAUSE_VERSION\"|" \
        -e '/^\[proxy_plugins/,/^$/d' -e '/^# fuse-overlayfs/d' \
        "$files/etc/containerd/config.toml" > "$root/etc/containerd/config.toml"
    # Debian's paths where kind's units and containerd expect upstream's.
    ln -sf /usr/bin/containerd "$root/usr/local/bin/containerd"
    local plugin
    for plugin in "$root"/usr/lib/cni/*; do ln -sf "/usr/lib/cni/${plugin##*/}" "$root/opt/cni/bin/"; done
    cat > "$root/etc/cni/net.d/10-fireflow-ptp.conflist" <<CNI
{
  "cniVersion": "1.0.0",
  "name": "fireflow-ptp",
  "plugins": [
    {"type": "ptp", "ipMasq": true, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_SUBNET"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
CNI
    # kind's Dockerfile: only the units kind wants, no kmsg in journald, systemd as init.
    find "$root/lib/systemd/system/sysinit.target.wants/" -name "systemd-tmpfiles-setup.service" -delete
    rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
        "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
        "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
    echo "ReadKMsg=no" >> "$root/etc/systemd/journald.conf"
    ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
    in_root "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
    in_root "$root" systemctl mask systemd-binfmt.service
    in_root "$root" ctr oci spec \
        | in_root "$root" jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
        | in_root "$root" jq 'del(.process.rlimits)' > "$root/etc/containerd/cri-base.json"
    slim_root "$root"
)

node_rootfs_key() {
    { declare -f make_node_rootfs debootstrap_root slim_root; echo "${NODE_PACKAGES[*]} $DEBIAN_SUITE $DEBIAN_MIRROR $KIND_VERSION $PAUSE_VERSION"; } \
        | sha256sum | cut -c1-12
}

# -- images -----------------------------------------------------------------------------------------------

# The key of the finished node image: every input of this script (recipes and pins).
node_image_key() { cat "$0" "$here/versions.env" "$here/lib-go.sh" "$here/lib-images.sh" | sha256sum | cut -c1-12; }

# component_image <context dir> <tag> <ENTRYPOINT json> [USER] <binary...>: a FROM-scratch image of static
# binaries on PATH, with the files distroless gives (/etc/passwd, /etc/group, /tmp).
component_image() {
    local context="$1" tag="$2" entrypoint="$3" user="$4"; shift 4
    rm -rf "$context"; mkdir -p "$context/root/etc" "$context/root/tmp" "$context/root/usr/local/bin"
    chmod 1777 "$context/root/tmp"
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$context/root/etc/passwd"
    printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' > "$context/root/etc/group"
    printf 'hosts: files dns\n' > "$context/root/etc/nsswitch.conf"
    cp "$@" "$context/root/usr/local/bin/"
    cat > "$context/Dockerfile" <<DOCKERFILE
FROM scratch
COPY root/ /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER $user
ENTRYPOINT $entrypoint
DOCKERFILE
    docker build -q -t "$tag" "$context" >/dev/null 2>>"$build_log"
}

build_component_images() {
    local work="$1" base_image="$2" k8s="registry.k8s.io"
    local cp_bin="$control_plane_dir/bin" node_bin="$node_bin_dir/bin"
    component_image "$work/apiserver" "$k8s/kube-apiserver:$KUBERNETES_VERSION" '["/usr/local/bin/kube-apiserver"]' 0 "$cp_bin/kube-apiserver"
    component_image "$work/cm" "$k8s/kube-controller-manager:$KUBERNETES_VERSION" '["/usr/local/bin/kube-controller-manager"]' 0 "$cp_bin/kube-controller-manager"
    component_image "$work/scheduler" "$k8s/kube-scheduler:$KUBERNETES_VERSION" '["/usr/local/bin/kube-scheduler"]' 0 "$node_bin/kube-scheduler"
    component_image "$work/etcd" "$k8s/etcd:$ETCD_IMAGE_TAG" '["/usr/local/bin/etcd"]' 0 "$etcd_dir/bin/etcd" "$etcd_dir/bin/etcdctl"
    component_image "$work/pause" "$k8s/pause:$PAUSE_VERSION" '["/usr/local/bin/pause"]' 65535:65535 "$pause_dir/bin/pause"
    # Upstream's coredns runs as nonroot with a file capability to bind port 53; kubeadm's Deployment adds
    # NET_BIND_SERVICE, which a root process gets without file capabilities the legacy builder may not keep.
    component_image "$work/coredns" "$k8s/coredns/coredns:$COREDNS_VERSION" '["/usr/local/bin/coredns"]' 0 "$coredns_dir/bin/coredns"
    # kube-proxy programs iptables/nftables: Debian's tools on the Python base (the base is only a Debian).
    mkdir -p "$work/proxy"; cp "$node_bin/kube-proxy" "$work/proxy/"
    cat > "$work/proxy/Dockerfile" <<DOCKERFILE
FROM $base_image
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      iptables nftables conntrack ipset kmod >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy
ENTRYPOINT ["/usr/local/bin/kube-proxy"]
DOCKERFILE
    docker build -q --network host -t "$k8s/kube-proxy:$KUBERNETES_VERSION" "$work/proxy" >/dev/null 2>>"$build_log"
}

# The tags kubeadm asks for must be the ones built here (a pin that drifted from kubeadm fails loudly).
check_kubeadm_images() {
    local wanted
    wanted="$("$node_bin_dir/bin/kubeadm" config images list --kubernetes-version "$KUBERNETES_VERSION" 2>/dev/null | sort)"
    local built
    built="$(printf '%s\n' "registry.k8s.io/kube-apiserver:$KUBERNETES_VERSION" \
        "registry.k8s.io/kube-controller-manager:$KUBERNETES_VERSION" "registry.k8s.io/kube-scheduler:$KUBERNETES_VERSION" \
        "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION" "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" \
        "registry.k8s.io/pause:$PAUSE_VERSION" "registry.k8s.io/etcd:$ETCD_IMAGE_TAG" | sort)"
    if [[ "$wanted" != "$built" ]]; then
        log "kubeadm $KUBERNETES_VERSION wants other images than versions.env pins:"
        diff <(echo "$built") <(echo "$wanted") >&2 || true
        exit 1
    fi
}

COMPONENT_IMAGES=()
component_tags() {
    COMPONENT_IMAGES=(
        "registry.k8s.io/kube-apiserver:$KUBERNETES_VERSION" "registry.k8s.io/kube-controller-manager:$KUBERNETES_VERSION"
        "registry.k8s.io/kube-scheduler:$KUBERNETES_VERSION" "registry.k8s.io/kube-proxy:$KUBERNETES_VERSION"
        "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" "registry.k8s.io/pause:$PAUSE_VERSION"
        "registry.k8s.io/etcd:$ETCD_IMAGE_TAG"
    )
}

build_node_image() {
    local tag="$1" rootfs="$2" base_image="$3" work container
    discard_workdirs "$images_dir/.kind-node-build"
    work="$(mktemp -d "$images_dir/.kind-node-build.XXXXXX")"
    container="fireflow-kind-node-build-$$"
    on_exit "docker rm -f '$container' >/dev/null 2>&1; rm -rf --one-file-system '$work'"
    # The rootfs as an image with kind's base metadata (neither `docker import` nor `docker commit` can set
    # STOPSIGNAL; a container keeps its image's, and the commit below keeps the container's).
    local node_base="fireflow-pool/kind-node-base:$(basename "$rootfs" .tar)"
    if ! docker image inspect "$node_base" >/dev/null 2>&1; then
        docker import "$rootfs" "$node_base-rootfs" >/dev/null
        mkdir -p "$work/base"
        cat > "$work/base/Dockerfile" <<DOCKERFILE
FROM $node_base-rootfs
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
DOCKERFILE
        docker build -q -t "$node_base" "$work/base" >/dev/null 2>>"$build_log"
        docker rmi "$node_base-rootfs" >/dev/null
        prune_tags fireflow-pool/kind-node-base "${node_base#*:}"
    fi
    log "node image: component images"
    build_component_images "$work" "$base_image"
    component_tags
    docker save -o "$work/images.tar" "${COMPONENT_IMAGES[@]}"
    docker run -d --name "$container" --entrypoint sleep "$node_base" infinity >/dev/null
    local bin
    for bin in "${NODE_BINARIES[@]}"; do
        case "$bin" in kubelet|kubeadm|kubectl) docker cp "$node_bin_dir/bin/$bin" "$container:/usr/bin/$bin" ;; esac
    done
    docker cp "$crictl_dir/bin/crictl" "$container:/usr/local/bin/crictl"
    docker exec "$container" sh -c "printf %s '$KUBERNETES_VERSION' > /kind/version"
    # Into the node's containerd, as kind's node-image build does: containerd started just for this.
    log "node image: importing the component images into the node's containerd"
    docker exec -d "$container" sh -c 'containerd > /var/log/containerd-import.log 2>&1'
    local waited=0
    until docker exec "$container" ctr version >/dev/null 2>&1; do
        (( waited++ < 60 )) || { docker exec "$container" cat /var/log/containerd-import.log >&2; exit 1; }
        sleep 0.5
    done
    docker exec -i "$container" ctr --namespace=k8s.io images import --all-platforms --no-unpack --digests \
        --snapshotter=overlayfs - < "$work/images.tar" >&2
    docker exec "$container" sh -c 'pkill containerd; while pgrep containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-import.log'
    docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' \
        "$container" "$tag" >/dev/null
    prune_tags fireflow-pool/kind-node "${tag#*:}"
}

main() {
    local only="${1:-all}" start=$SECONDS
    case "$only" in
        all) ;;
        binaries) shift; build_binaries "$@"; log "binaries done in $((SECONDS - start))s"; return ;;
        rootfs) cached_rootfs "kind-node-$DEBIAN_SUITE" "$(node_rootfs_key)" make_node_rootfs; return ;;
        *) log "usage: $0 [binaries [step...] | rootfs]"; exit 2 ;;
    esac
    local tag
    tag="fireflow-pool/kind-node:$KUBERNETES_VERSION-$(node_image_key)"
    ensure_docker
    if docker image inspect "$tag" >/dev/null 2>&1 && complete "$kind_dir" kind; then
        log "node image: cached $tag"
        echo "NODE_IMAGE=$tag"; echo "KIND=$kind_dir/bin/kind"
        return
    fi
    # The node's rootfs is mostly waiting on Debian's mirror: made alongside the CPU-bound Go builds.
    local rootfs_pid rootfs_path
    rootfs_path="$(mktemp)"
    cached_rootfs "kind-node-$DEBIAN_SUITE" "$(node_rootfs_key)" make_node_rootfs > "$rootfs_path" &
    rootfs_pid=$!
    on_exit "kill_tree $rootfs_pid; rm -f '$rootfs_path'"
    build_binaries
    complete "$etcd_dir" etcd && complete "$control_plane_dir" kube-apiserver kube-controller-manager || {
        log "etcd and kube-apiserver are missing; build them first: tests/kube/build-control-plane.sh"
        exit 1
    }
    check_kubeadm_images
    wait "$rootfs_pid" || { log "the node rootfs failed"; exit 1; }
    local rootfs base_image
    rootfs="$(cat "$rootfs_path")"
    base_image="$(ensure_base_image)"
    build_node_image "$tag" "$rootfs" "$base_image"
    log "node image: built $tag ($(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%d MB", $1 / 1000000}')) in $((SECONDS - start))s"
    echo "NODE_IMAGE=$tag"; echo "KIND=$kind_dir/bin/kind"
}

main "$@"
