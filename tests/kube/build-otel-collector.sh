#!/usr/bin/env bash
# Builds the OpenTelemetry Collector the tracing tests send spans to: the Collector Builder (ocb) from Go
# modules, then a distribution of just the OTLP receiver (gRPC and HTTP) and the contrib file exporter,
# which writes what it receives as OTLP JSON lines. Cached per pinned version like the control plane:
#   ${FIREFLOW_TOOLS_DIR:-$HOME/.cache/fireflow-pool/tools}/otelcol-<version>/bin/fireflow-otelcol
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
log() { printf '[build-otel-collector] %s\n' "$*" >&2; }
# shellcheck source=lib-go.sh
source "$here/lib-go.sh"

main() {
    command -v go >/dev/null || { log "the go toolchain is required (Go >= 1.26)"; exit 1; }
    local builder_dir="$tools_dir/ocb-$OTELCOL_VERSION" dir="$tools_dir/otelcol-$OTELCOL_VERSION" start=$SECONDS
    if complete "$dir" fireflow-otelcol; then log "otelcol $OTELCOL_VERSION: cached in $dir/bin"; return; fi
    if ! complete "$builder_dir" builder; then
        log "ocb $OTELCOL_VERSION: building into $builder_dir/bin"
        go_install_tool "$builder_dir" "go.opentelemetry.io/collector/cmd/builder@$OTELCOL_VERSION"
    fi
    log "otelcol $OTELCOL_VERSION: building into $dir/bin"
    rm -rf "$dir/bin.partial" "$dir/build"
    mkdir -p "$dir/bin.partial" "$dir/build"
    cat > "$dir/manifest.yaml" <<MANIFEST
dist:
  name: fireflow-otelcol
  description: OTLP receiver and file exporter for fireflow-pool's tracing tests
  output_path: $dir/build
  version: ${OTELCOL_VERSION#v}
receivers:
  - gomod: go.opentelemetry.io/collector/receiver/otlpreceiver $OTELCOL_VERSION
exporters:
  - gomod: github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter $OTELCOL_VERSION
providers:
  - gomod: go.opentelemetry.io/collector/confmap/provider/envprovider $OTELCOL_CONFMAP_VERSION
  - gomod: go.opentelemetry.io/collector/confmap/provider/fileprovider $OTELCOL_CONFMAP_VERSION
MANIFEST
    # ocb only writes the sources: its `go mod tidy` also resolves the components' test-only dependencies,
    # some of which the module proxy does not serve; `go build -mod=mod` resolves just what is built.
    "$builder_dir/bin/builder" --config "$dir/manifest.yaml" --skip-get-modules --skip-compilation
    cat > "$dir/build/go.mod" <<MOD
module fireflow.local/tools/otelcol

go 1.26

require (
	go.opentelemetry.io/collector/otelcol $OTELCOL_VERSION
	go.opentelemetry.io/collector/service $OTELCOL_VERSION
	go.opentelemetry.io/collector/receiver/otlpreceiver $OTELCOL_VERSION
	github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter $OTELCOL_VERSION
	go.opentelemetry.io/collector/confmap/provider/envprovider $OTELCOL_CONFMAP_VERSION
	go.opentelemetry.io/collector/confmap/provider/fileprovider $OTELCOL_CONFMAP_VERSION
)
MOD
    (cd "$dir/build" && go build "${build_flags[@]}" -ldflags "-s -w" -o "$dir/bin.partial/fireflow-otelcol" .)
    rm -rf "$dir/build"
    finish "$dir"
    log "done in $((SECONDS - start))s"
}

main "$@"
