"""Prometheus metrics of one worker process, in a registry of its own (no default process collectors
are mixed in by accident; they are added explicitly)."""

from __future__ import annotations

import bisect
import functools
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.values import MutexValue

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

# A label value per flow name, up to this many per process: a label must stay a small set.
MAX_FLOW_LABELS = 100
OTHER_FLOWS = "other"
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)

RUNS_STARTED = Counter(
    "fireflow_runs_started",
    "Runs this worker started executing (a recovered run counts again).",
    ["queue"],
    registry=REGISTRY,
)
RUNS_SUCCEEDED = Counter(
    "fireflow_runs_succeeded", "Runs that finished successfully here.", ["queue"], registry=REGISTRY
)
RUNS_FAILED = Counter("fireflow_runs_failed", "Runs that ended in an error here.", ["queue"], registry=REGISTRY)
RUNS_CANCELLED = Counter(
    "fireflow_runs_cancelled", "Runs that were cancelled while executing here.", ["queue"], registry=REGISTRY
)
RUN_ENCODINGS = Counter(
    "fireflow_run_encodings",
    "Runs claimed here in an encoding other than DBOS's portable JSON, by encoding and outcome: decoded "
    "(DBOS-py's pickle or the TypeScript SDK's own, rewritten as portable JSON) or unreadable (ended ERROR at once, "
    "counted in fireflow_runs_failed_total too).",
    ["encoding", "outcome"],
    registry=REGISTRY,
)
ACTIVE_RUNS = Gauge("fireflow_active_runs", "Runs executing in this process now.", registry=REGISTRY)
RUN_DURATION = Histogram(
    "fireflow_run_duration_seconds",
    "Wall time of a run, from its start on this worker to its end, by flow (the first "
    f'{MAX_FLOW_LABELS} flow names a process sees; later ones are counted as flow="{OTHER_FLOWS}").',
    ["flow"],
    buckets=_DURATION_BUCKETS,
    registry=REGISTRY,
)
NODE_DURATION = Histogram(
    "fireflow_node_duration_seconds",
    "Wall time of one node attempt.",
    ["type", "outcome"],
    buckets=_DURATION_BUCKETS,
    registry=REGISTRY,
)
CLAIM_LATENCY = Histogram(
    "fireflow_claim_latency_seconds",
    "From enqueue to the moment a worker dequeued the run (database clock).",
    ["queue"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "fireflow_queue_depth",
    "Runs in a queue by status, as last sampled from the database.",
    ["queue", "status"],
    registry=REGISTRY,
)
QUEUE_OLDEST_AGE = Gauge(
    "fireflow_queue_oldest_enqueued_age_seconds",
    "Age of the oldest ENQUEUED run of a queue (0 when none waits), as last sampled.",
    ["queue"],
    registry=REGISTRY,
)
QUEUE_DEPTH_SAMPLE_ERRORS = Counter(
    "fireflow_queue_depth_sample_errors",
    "Failed samples of the queue depth.",
    registry=REGISTRY,
)
PROVISION_CACHE = Counter(
    "fireflow_provision_cache_lookups",
    "Stored-flow lookups by the provision cache.",
    ["result"],
    registry=REGISTRY,
)
READY = Gauge("fireflow_worker_ready", "1 while the worker accepts runs, 0 once it drains.", registry=REGISTRY)


# Labelled children, looked up once, and updated on the hot path (every run, every node attempt) without the
# client's per-call work: its public `inc` and `observe` check on every call what holds for a child from the
# start (observable, a non-negative amount) and take a lock per value (a histogram's sum and bucket: two),
# which cost a run of three nodes as much as its own metrics. A hot child adds to the client's values under
# one lock of its own; the client reads each value under that value's lock, and a float's assignment is atomic,
# so a scrape sees each value before or after an update. Every update of these children goes through here.
# prometheus-client is pinned; tests/unit/test_hot_metrics.py holds these to the public methods' samples.


class HotCounter:
    """A counter (or gauge) child's `inc`, without the per-call checks."""

    __slots__ = ("_lock", "_value")

    def __init__(self, child: Counter | Gauge) -> None:
        self._value = _mutex_value(child._value)
        self._lock = threading.Lock()

    def inc(self, amount: float) -> None:
        with self._lock:
            self._value._value += amount


class HotHistogram:
    """A histogram child's `observe` (no exemplar): its sum and its bucket (found by bisection; the client
    walks the bounds one by one) under one lock."""

    __slots__ = ("_bounds", "_buckets", "_lock", "_sum")

    def __init__(self, child: Histogram) -> None:
        self._sum = _mutex_value(child._sum)
        self._buckets = [_mutex_value(bucket) for bucket in child._buckets]
        self._bounds: list[float] = child._upper_bounds  # ascending, +Inf last
        self._lock = threading.Lock()

    def observe(self, amount: float) -> None:
        bucket = self._buckets[bisect.bisect_left(self._bounds, amount)]
        with self._lock:
            self._sum._value += amount
            bucket._value += 1


def _mutex_value(value: object) -> MutexValue:
    # A multi-process value (PROMETHEUS_MULTIPROC_DIR) lives in a file: the worker does not use that mode.
    if type(value) is not MutexValue:
        raise TypeError(f"prometheus-client keeps this metric in a {type(value).__name__}, not a MutexValue")
    return value


ACTIVE = HotCounter(ACTIVE_RUNS)  # inc(1) as a run starts, inc(-1) as it ends


@functools.cache
def node_duration(node_type: str, outcome: str) -> HotHistogram:
    return HotHistogram(NODE_DURATION.labels(node_type, outcome))


@functools.cache
def run_counter(counter: Counter, queue: str) -> HotCounter:
    return HotCounter(counter.labels(queue))


_run_durations: dict[str, HotHistogram] = {}


def run_duration(flow: str) -> HotHistogram:
    """The run-duration child of a flow; past MAX_FLOW_LABELS distinct flows, the `other` child."""
    child = _run_durations.get(flow)
    if child is None:
        if len(_run_durations) >= MAX_FLOW_LABELS:
            return _run_duration_child(OTHER_FLOWS)
        child = _run_durations[flow] = _run_duration_child(flow)
    return child


@functools.cache
def _run_duration_child(label: str) -> HotHistogram:
    # One hot child per label: two, each with its own lock, could lose each other's updates.
    return HotHistogram(RUN_DURATION.labels(label))
