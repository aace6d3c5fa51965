"""Leader election on a coordination.k8s.io/v1 Lease (I/O): one replica reconciles and writes, the others stand
by, answering their liveness probe, until the leader's Lease expires. A standby reads but never writes: it
keeps the pool index (pool_index.py) filled from a watch of the pools, so that it leads with the fleet known.

The election itself is the Kubernetes client's (`kubernetes.leaderelection`, the client-go algorithm: a
candidate takes the Lease once it saw no renewal for a lease duration; writes carry the resourceVersion, so
two candidates never both win). What is ours: the leader leads only while a background thread keeps renewing
(`leading` is cleared when a renewal deadline passes, and the caller stops kopf); and a leader that exits
cleanly hands the Lease over at once instead of leaving the others to wait for it to expire.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from fireflow_operator.pool_index import PoolIndex
from fireflow_operator.settings import OperatorSettings

log = logging.getLogger("fireflow.operator.leadership")


def identity() -> str:
    """The Lease's holder: the pod's name (the chart passes it), else this host and process."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


class _Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *_: Any) -> None:  # one line per probe otherwise
        return


class StandbyHealth:
    """The liveness endpoint while this replica waits: kopf serves it once this replica leads."""

    def __init__(self, host: str, port: int) -> None:
        self.server = http.server.ThreadingHTTPServer((host, port), _Healthz)
        self.thread = threading.Thread(target=self.server.serve_forever, name="standby-health", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StandbyWatch:
    """The pools this operator may see, listed and then watched into `index` while this replica stands by (and
    until kopf's own watch of them delivered its first event: ended earlier, a pool deleted in between would
    stay in the index). Reads only."""

    def __init__(self, index: PoolIndex, namespaces: list[str]) -> None:
        self.index = index
        self.ended = threading.Event()
        self.api = client.CustomObjectsApi()
        self._unlisted = set(namespaces or [""])
        self._lock = threading.Lock()
        for namespace in sorted(self._unlisted):
            threading.Thread(target=self._follow, args=(namespace,), name="standby-watch", daemon=True).start()

    def _list(self, namespace: str, **options: Any) -> Any:
        if namespace:
            return self.api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, **options)
        return self.api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **options)

    def _follow(self, namespace: str) -> None:
        since = ""  # the resourceVersion to watch from; empty: list first
        while not self.ended.is_set():
            try:
                if not since:
                    listed = self._list(namespace)
                    since = str(listed["metadata"]["resourceVersion"])
                    self.index.listed(listed["items"], namespace, int(since))
                    with self._lock:
                        self._unlisted.discard(namespace)
                        if not self._unlisted:
                            self.index.mark_filled()
                stream = watch.Watch()  # type: ignore[no-untyped-call]
                events = stream.stream(self._list, namespace, resource_version=since, timeout_seconds=300)  # type: ignore[no-untyped-call]
                for event in events:
                    if self.ended.is_set():
                        stream.stop()  # type: ignore[no-untyped-call]
                        return
                    since = str(event["object"]["metadata"]["resourceVersion"])
                    self.index.observe(event["object"], deleted=event["type"] == "DELETED")
            except Exception as err:  # a standby's cache saves time only: kopf lists the pools anyway
                log.debug("standby watch of pools in %r: %s; listing again", namespace or "every namespace", err)
                since = ""
                self.ended.wait(2.0)

    def close(self) -> None:
        self.ended.set()


class Leadership:
    def __init__(self, settings: OperatorSettings, loop: asyncio.AbstractEventLoop, holder: str | None = None) -> None:
        self.settings = settings
        self.holder = holder or identity()
        self.namespace = settings.leader_election_namespace
        # kopf's stop flag: an asyncio.Event of kopf's own loop (a threading.Event would be waited for in an
        # executor thread that a SIGTERM never wakes, and the process would not exit).
        self.loop = loop
        self.stop = asyncio.Event()
        self.lost = False  # the Lease was lost (not a clean exit)
        lock = LeaseLock(settings.lease_name, self.namespace, self.holder)  # type: ignore[no-untyped-call]
        config = electionconfig.Config(  # type: ignore[no-untyped-call]
            lock,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
            onstarted_leading=lambda: None,
            onstopped_leading=lambda: None,  # renew_loop returning says the same (see _renew)
        )
        self.election = leaderelection.LeaderElection(config)  # type: ignore[no-untyped-call]
        logging.getLogger("leaderelection").setLevel(logging.WARNING)  # a line per retry otherwise

    def acquire(self, standing_by: Callable[[], None]) -> None:
        """Block until this replica holds the Lease, then keep renewing it in the background. `standing_by` runs
        once another replica is found to lead."""
        if not self.election.try_acquire_or_renew():  # type: ignore[no-untyped-call]
            log.info("standing by for Lease %s/%s as %s", self.namespace, self.settings.lease_name, self.holder)
            standing_by()
            self.election.acquire()  # type: ignore[no-untyped-call]
        log.info("leading: holds Lease %s/%s as %s", self.namespace, self.settings.lease_name, self.holder)
        threading.Thread(target=self._renew, name="lease-renewal", daemon=True).start()

    def _renew(self) -> None:
        self.election.renew_loop()  # type: ignore[no-untyped-call]
        log.error("lost Lease %s/%s: no renewal within the deadline", self.namespace, self.settings.lease_name)
        self.lost = True
        self.loop.call_soon_threadsafe(self.stop.set)

    def release(self) -> None:
        """Hand the Lease over now (a clean exit): the next candidate takes it without waiting."""
        api = client.CoordinationV1Api()
        try:
            lease = api.read_namespaced_lease(self.settings.lease_name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.holder:
                return
            lease.spec.holder_identity = None
            lease.spec.renew_time = datetime.now(UTC)
            api.replace_namespaced_lease(self.settings.lease_name, self.namespace, lease)
        except ApiException as err:  # conflict: someone else holds it now; gone: nothing to hand over
            log.info("Lease not handed over: %s", err.reason)
