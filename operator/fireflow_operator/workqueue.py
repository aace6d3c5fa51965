"""The operator's running parts and its work queue (I/O): one pool's reconciles never overlap (a lock per
pool), a reconcile may ask to be run again after a delay (at most one wake-up per pool, the earliest), and what
a finished reconcile tells the metrics and the pool's events. A failed reconcile is logged and retried after
`resync_seconds`, never in a hot loop. `handlers.py` registers kopf's triggers; they all end here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import kopf
from kubernetes import client, config

from fireflow_contract import logformat, telemetry
from fireflow_operator.api import conditions, names
from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.finalizer import finalize, report_waiting
from fireflow_operator.kube import Kube
from fireflow_operator.observability import metrics
from fireflow_operator.observability.pool_metrics import PoolSeries
from fireflow_operator.pool_index import PoolIndex
from fireflow_operator.reconcile import Reconciler
from fireflow_operator.settings import OperatorSettings

log = logging.getLogger("fireflow.operator")
Key = tuple[str, str]  # (namespace, pool name)
_PHASES = ("Pending", "Migrating", "Running", "Degraded")


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
        self.reconciler = Reconciler(self.kube, settings)
        self._series = PoolSeries()
        self._locks: dict[Key, asyncio.Lock] = {}
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

    async def reconcile(self, namespace: str, name: str) -> None:
        logformat.enter_pool(namespace, name)  # this line and kopf's about the handler name the pool
        with telemetry.span("reconcile", {"k8s.namespace.name": namespace, "fireflow.pool": name}):
            await self._reconcile(namespace, name)

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

    async def _reconcile(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        async with self._locks.setdefault(key, asyncio.Lock()):
            started = time.monotonic()
            try:
                fetched: Any = await asyncio.to_thread(
                    self.kube.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
                )
            except client.ApiException as err:
                if err.status == 404:
                    self._forget(key)
                    return
                raise
            body: dict[str, Any] = fetched
            if body["metadata"].get("deletionTimestamp"):
                return  # the finalizer's
            if not self.settings.selects(body["metadata"].get("labels")):
                self._forget(key)  # another shard's: relabelled away, or its child's event reached every operator
                return
            try:
                outcome = await asyncio.to_thread(self.reconciler.reconcile, body)
            except Exception as err:
                if isinstance(err, client.ApiException) and err.status == 403 and "being terminated" in str(err.body):
                    return  # the namespace is going: only the finalizer has work left, and it runs on its own
                metrics.RECONCILES.labels("error").inc()
                telemetry.record_failure(err)
                delay = self.settings.resync_seconds
                log.exception("reconcile of %s/%s failed; retrying in %s s", namespace, name, delay)
                self._requeue(key, delay)
                return
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
        """A deleted pool, or one moved to another shard, leaves no lock, phase, wake-up or stale series behind."""
        self._locks.pop(key, None)
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
        self._requeues[key] = loop.call_later(delay, lambda: asyncio.ensure_future(self.reconcile(*key)))
