"""The queue-depth gauge and the claim-latency histogram, sampled off the request path of /metrics (and off
the runs' hot path) through DBOS's pooled engine: one query each per interval, whatever the run rate."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import sqlalchemy as sa

from fireflow_worker import engine as run_engine
from fireflow_worker import metrics, worker_db

QUEUE_DEPTH_SAMPLE_SECONDS = 5.0


class QueueDepthSampler(threading.Thread):
    """Samples ENQUEUED/PENDING counts per served queue into `fireflow_queue_depth`, and the age of each
    queue's oldest ENQUEUED run (the worker's clock against the database's `created_at`)."""

    def __init__(self, engine: Callable[[], sa.Engine], served: list[str]) -> None:
        super().__init__(name="queue-depth", daemon=True)
        self._engine = engine
        self._served = served
        self.stopped = threading.Event()

    def sample_claim_latencies(self) -> None:
        """Claim latencies of the runs started here since the last sample (enqueue to claim, database clock)."""
        started, run_engine.SETTINGS.claimed = run_engine.SETTINGS.claimed, []
        for first in range(0, len(started), 1000):
            for queue, seconds in worker_db.claim_latencies(self._engine(), started[first : first + 1000]):
                metrics.CLAIM_LATENCY.labels(queue).observe(seconds)

    def run(self) -> None:
        while True:
            try:
                self.sample_claim_latencies()
            except Exception:
                metrics.QUEUE_DEPTH_SAMPLE_ERRORS.inc()
            try:
                counts = worker_db.queue_depths(self._engine())
            except Exception:
                metrics.QUEUE_DEPTH_SAMPLE_ERRORS.inc()
            else:
                now_ms = time.time() * 1000
                for name in self._served:
                    for status in ("ENQUEUED", "PENDING"):
                        metrics.QUEUE_DEPTH.labels(name, status).set(counts.get((name, status), (0, 0))[0])
                    waiting, oldest_ms = counts.get((name, "ENQUEUED"), (0, 0))
                    metrics.QUEUE_OLDEST_AGE.labels(name).set(max(0.0, now_ms - oldest_ms) / 1000 if waiting else 0)
            if self.stopped.wait(QUEUE_DEPTH_SAMPLE_SECONDS):
                return
