"""The operator's running parts and its work queue (I/O): one pool's reconciles never overlap, a pool waits in
the queue at most once however many events ask for it, the most urgent request goes first (a spec change
before a child's change before the resyncs, so a change never waits behind a fleet's timers), a reconcile may
ask to be run again after a delay (at most one wake-up per pool, the earliest), and what a finished reconcile
tells the metrics and the pool's events. A failed reconcile is logged and retried after `resync_seconds`,
never in a hot loop. `handlers.py` registers kopf's triggers; they all end here.

The pool and its children are read from what kopf's watches keep (pool_index.py, watch_cache.py), so an idle
pool's reconcile reads nothing from the API server but its database URL's Secret.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import kopf
from kubernetes import client, config

from fireflow_contract import logformat, telemetry
from fireflow_operator.api import conditions, names
from fireflow_operator.finalizer import finalize, report_waiting
from fireflow_operator.kube import Kube
from fireflow_operator.observability import metrics
from fireflow_operator.observability.pool_metrics import PoolSeries
from fireflow_operator.pool_index import PoolIndex
from fireflow_operator.reconcile import Reconciler
from fireflow_operator.settings import OperatorSettings
from fireflow_operator.watch_cache import WatchCache

log = logging.getLogger("fireflow.operator")
Key = tuple[str, str]  # (namespace, pool name)
_PHASES = ("Pending", "Migrating", "Running", "Degraded")
# What asks for a reconcile, most urgent first. Only the resync may use database facts read by another pool's
# reconcile within the last resync period (database/dbprobe.py); the others look afresh.
PRIORITY = {"pool": 0, "child": 1, "requeue": 1, "timer": 2}
RECONCILE_THREADS = 4  # reconciles mostly compute now (reads come from the watch): more threads only contend


@dataclass
class _Waiting:
    """A pool's place in the queue, and everyone waiting for the reconcile that will start from it."""

    priority: int
    order: int
    done: asyncio.Future[None]


class ReconcileQueue:
    """Pools waiting for a reconcile, most urgent first, each at most once and never two at a time; `run`
    reconciles one pool (given the priority it was asked with) and must not raise."""

    def __init__(self, run: Callable[[Key, int], Awaitable[None]], workers: int = RECONCILE_THREADS) -> None:
        self._run = run
        self._workers = workers
        self._order = itertools.count()
        self._ready: asyncio.PriorityQueue[tuple[int, int, Key]] | None = None
        self._waiting: dict[Key, _Waiting] = {}
        self._running: set[Key] = set()
        self._tasks: list[asyncio.Task[None]] = []

    async def request(self, key: Key, priority: int) -> None:
        """Return once a reconcile of the pool that started after this call has finished."""
        ready = self._start()
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = self._waiting[key] = _Waiting(
                priority, next(self._order), asyncio.get_running_loop().create_future()
            )
            if key not in self._running:
                ready.put_nowait((priority, waiting.order, key))
        elif priority < waiting.priority:  # more urgent now: a new place (the old one is skipped when reached)
            waiting.priority, waiting.order = priority, next(self._order)
            if key not in self._running:
                ready.put_nowait((priority, waiting.order, key))
        metrics.RECONCILE_QUEUE.set(len(self._waiting))
        await asyncio.shield(waiting.done)

    def _start(self) -> asyncio.PriorityQueue[tuple[int, int, Key]]:
        """The queue and its workers, made on first use: inside kopf's handler, whose context (where kopf posts
        events from) the workers' tasks inherit."""
        if self._ready is None:
            self._ready = asyncio.PriorityQueue()
            self._tasks = [asyncio.create_task(self._work(self._ready)) for _ in range(self._workers)]
        return self._ready

    async def _work(self, ready: asyncio.PriorityQueue[tuple[int, int, Key]]) -> None:
        while True:
            _, order, key = await ready.get()
            waiting = self._waiting.get(key)
            if waiting is None or waiting.order != order or key in self._running:
                continue  # a place given up for a more urgent one, or already taken
            del self._waiting[key]
            metrics.RECONCILE_QUEUE.set(len(self._waiting))
            self._running.add(key)
            try:
                await self._run(key, waiting.priority)
            finally:
                self._running.discard(key)
                if not waiting.done.done():
                    waiting.done.set_result(None)
                again = self._waiting.get(key)  # asked for while it ran: queued now
                if again is not None:
                    ready.put_nowait((again.priority, again.order, key))


def kubernetes_client() -> client.ApiClient:
    """In a pod its service account, elsewhere the kubeconfig."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class PoolWorkQueue:
    def __init__(self, settings: OperatorSettings, api: client.ApiClient) -> None:
        self.settings = settings
        self.kube = Kube.from_client(api)
        self.pool_index = self.kube.pool_index = PoolIndex()
        self.children = self.kube.children = WatchCache(lambda kind: self.kube.list_owned(kind, settings.namespaces))
        self.reconciler = Reconciler(self.kube, settings)
        self._series = PoolSeries()
        self._queue = ReconcileQueue(self._reconcile)
        self._threads = ThreadPoolExecutor(RECONCILE_THREADS, thread_name_prefix="reconcile")
        self._requeues: dict[Key, asyncio.TimerHandle] = {}
        self._phases: dict[Key, str] = {}
        self._filling = asyncio.Lock()

    def observe(self, body: dict[str, Any], *, deleted: bool) -> None:
        """A pool's watch event, any shard's: into the index; a pool gone, or relabelled away from this shard, is
        forgotten (its children's later events reconcile nothing)."""
        self.pool_index.observe(body, deleted=deleted)
        meta = body["metadata"]
        key = (str(meta["namespace"]), str(meta["name"]))
        if key in self._phases and (deleted or not self.settings.selects(meta.get("labels"))):
            self._forget(key)

    async def may_select(self, namespace: str, name: str) -> bool:
        """False for a pool the index knows to be another shard's, or gone: its children's events cost nothing
        (at the start, before kopf's watch delivered the pools, one LIST fills the index instead of a GET each)."""
        async with self._filling:  # one LIST however many events arrive at once
            if not self.pool_index.filled:
                await asyncio.to_thread(self.kube.list_pools, self.settings.namespaces)
        known = self.pool_index.get(namespace, name)
        if known is None:
            return not self.pool_index.gone(namespace, name)
        return self.settings.selects(known["metadata"].get("labels"))

    async def reconcile(self, namespace: str, name: str, trigger: str = "pool") -> None:
        """Reconcile the pool soon (at once unless more urgent work waits), and return once that is done."""
        logformat.enter_pool(namespace, name)  # kopf's line about the handler names the pool
        metrics.RECONCILE_REQUESTS.labels(trigger).inc()
        await self._queue.request((namespace, name), PRIORITY[trigger])

    async def finalize(self, body: kopf.Body) -> None:
        """Let a deleted pool go once its runs are handed back; else say why on the pool and raise kopf's retry."""
        waiting = await asyncio.to_thread(finalize, self.kube, self.settings, dict(body))
        key = (str(body.metadata.namespace), str(body.metadata.name))
        if waiting is None:
            mine = names.pool_finalizer(self.settings.pool_selector)
            await asyncio.to_thread(self.kube.drop_other_pool_finalizers, *key, mine)
            self._forget(key)  # no child is left to trigger the reconcile that would find the pool gone
            return
        # Said where users look (the conditions, its series, and an event when that changes), then looked at again.
        changed, status = await asyncio.to_thread(report_waiting, self.kube, dict(body), waiting)
        self._series.update(*key, status)
        if waiting.blocked:
            kopf.warn(body, reason=conditions.REASON_RUNS_NOT_RECOVERED, message=waiting.message)
            raise kopf.TemporaryError(waiting.message, delay=30)
        if changed:
            kopf.info(body, reason=conditions.REASON_DELETING, message=waiting.message)
        raise kopf.TemporaryError(waiting.message, delay=waiting.retry_seconds)

    async def _reconcile(self, key: Key, priority: int) -> None:
        namespace, name = key
        logformat.enter_pool(namespace, name)  # the reconcile's own lines name the pool
        with telemetry.span("reconcile", {"k8s.namespace.name": namespace, "fireflow.pool": name}):
            try:
                await self._reconcile_in_thread(key, priority)
            except Exception as err:  # the queue's workers must go on; a failure is retried, never in a hot loop
                metrics.RECONCILES.labels("error").inc()
                telemetry.record_failure(err)
                log.exception(
                    "reconcile of %s/%s failed; retrying in %s s", namespace, name, self.settings.resync_seconds
                )
                self._requeue(key, self.settings.resync_seconds)

    async def _reconcile_in_thread(self, key: Key, priority: int) -> None:
        namespace, name = key
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        found = await loop.run_in_executor(self._threads, self.kube.pool, namespace, name, self.settings.namespaces)
        if found is None:
            self._forget(key)
            return
        body: dict[str, Any] = found
        if body["metadata"].get("deletionTimestamp"):
            return  # the finalizer's
        if not self.settings.selects(body["metadata"].get("labels")):
            self._forget(key)  # another shard's: relabelled away, or its child's event reached every operator
            return
        # A resync may use what another reconcile on the same database read within a resync period.
        facts_age = self.settings.resync_seconds if priority == PRIORITY["timer"] else 0.0
        try:
            outcome = await loop.run_in_executor(self._threads, self.reconciler.reconcile, body, facts_age)
        except client.ApiException as err:
            if err.status == 403 and "being terminated" in str(err.body):
                return  # the namespace is going: only the finalizer has work left, and it runs on its own
            raise
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started)
        metrics.RECONCILES.labels("ok").inc()
        self._phases[key] = outcome.phase
        for phase in _PHASES:
            metrics.POOLS.labels(phase).set(sum(1 for p in self._phases.values() if p == phase))
        metrics.RECOVERED_RUNS.inc(outcome.recovered_runs)
        if outcome.allowed_replicas is not None:
            metrics.BUDGET_ALLOWED.labels(namespace, name).set(outcome.allowed_replicas)
        self._series.update(namespace, name, outcome.status)
        for kind, reason, message in outcome.events:
            kopf.event(kopf.Body(body), type=kind, reason=reason, message=message)  # type: ignore[arg-type]
        if outcome.requeue_seconds is not None:
            self._requeue(key, outcome.requeue_seconds)

    def _forget(self, key: Key) -> None:
        """A deleted pool, or one moved to another shard, leaves no phase, wake-up or stale series behind."""
        self._phases.pop(key, None)
        if (pending := self._requeues.pop(key, None)) is not None:
            pending.cancel()
        for phase in _PHASES:
            metrics.POOLS.labels(phase).set(sum(1 for p in self._phases.values() if p == phase))
        with contextlib.suppress(KeyError):
            metrics.BUDGET_ALLOWED.remove(*key)
        self._series.forget(*key)

    def _requeue(self, key: Key, delay: float) -> None:
        loop = asyncio.get_running_loop()
        pending = self._requeues.get(key)
        if pending is not None and not pending.cancelled() and pending.when() <= loop.time() + delay:
            return
        if pending is not None:
            pending.cancel()
        self._requeues[key] = loop.call_later(delay, lambda: asyncio.ensure_future(self.reconcile(*key, "requeue")))
