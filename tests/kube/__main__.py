"""A local cluster for demos and debugging: `python -m tests.kube` (from the repo root).

Starts the Go-built control plane and the process node, applies `crds/`, prints the admin kubeconfig
path and runs until Ctrl-C / SIGTERM, then tears everything down. `--audit` writes the API server's audit
log (tests/kube/audit.py) and prints its path and the kubeconfig of the operator's own user.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from types import FrameType

from .cluster import LocalCluster
from .tools import MissingBinariesError


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kube", description=__doc__.splitlines()[0])
    parser.add_argument("--audit", action="store_true", help="write the API server's audit log (Metadata level)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    try:
        cluster = LocalCluster(audit=args.audit).start()
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
        if cluster.control_plane.audit is not None:
            print(f"audit log: {cluster.control_plane.audit.path}", flush=True)
            print(f"the operator's own user: KUBECONFIG={cluster.operator_kubeconfig}", flush=True)
        print("pod output is kept under", cluster.node.pods_dir if cluster.node else "?", flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
