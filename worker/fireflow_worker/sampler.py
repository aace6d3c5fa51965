"""The queue-depth gauge and the claim-latency histogram, sampled off the request path of /metrics (and off
the runs' hot path) through DBOS's pooled engine: one query each per interval, whatever the run rate."""

from __future__ import annotations

import threading
from collections.abc import Callable

import sqlalchemy as sa

from fireflow_worker import engine as run_engine
from fireflow_worker import metrics, worker_db

QUEUE_DEPTH_SAMPLE_SECONDS = 5.0


class QueueDepthSampler(threading.Thread):
    """Samples ENQUEUED/PENDING counts per served queue into `fireflow_queue_depth`."""

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
                for name in self._served:
                    for status in ("ENQUEUED", "PENDING"):
                        metrics.QUEUE_DEPTH.labels(name, status).set(counts.get((name, status), 0))
            if self.stopped.wait(QUEUE_DEPTH_SAMPLE_SECONDS):
                return
