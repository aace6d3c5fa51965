"""The queue-depth gauge, sampled off the request path of /metrics through DBOS's pooled engine."""

from __future__ import annotations

import threading
from collections.abc import Callable

import sqlalchemy as sa

from fireflow_worker import metrics, worker_db

QUEUE_DEPTH_SAMPLE_SECONDS = 5.0


class QueueDepthSampler(threading.Thread):
    """Samples ENQUEUED/PENDING counts per served queue into `fireflow_queue_depth`."""

    def __init__(self, engine: Callable[[], sa.Engine], served: list[str]) -> None:
        super().__init__(name="queue-depth", daemon=True)
        self._engine = engine
        self._served = served
        self.stopped = threading.Event()

    def run(self) -> None:
        while True:
            try:
                counts = worker_db.queue_depths(self._engine())
            except Exception:
                metrics.QUEUE_DEPTH_SAMPLE_ERRORS.inc()
            else:
                for name in self._served:
                    for status in ("ENQUEUED", "PENDING"):
                        metrics.QUEUE_DEPTH.labels(name, status).set(counts.get((name, status), 0))
            if self.stopped.wait(QUEUE_DEPTH_SAMPLE_SECONDS):
                return
