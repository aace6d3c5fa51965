"""A local cluster for demos and debugging: `python -m tests.kube` (from the repo root).

Starts the Go-built control plane and the process node, applies `crds/`, prints the admin kubeconfig
path and runs until Ctrl-C / SIGTERM, then tears everything down.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

from .cluster import LocalCluster
from .tools import MissingBinariesError


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        cluster = LocalCluster().start()
    except MissingBinariesError as error:
        print(error, file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        applied = cluster.apply_crds()
        print(f"CRDs applied: {[p.name for p in applied]}", flush=True)
        print(f"export KUBECONFIG={cluster.kubeconfig}", flush=True)
        print("pod output is kept under", cluster.node.pods_dir if cluster.node else "?", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
