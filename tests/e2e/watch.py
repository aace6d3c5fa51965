"""Kubernetes watch events of a namespace in resourceVersion order: what the scenarios order milestones by
(one etcd, so resourceVersion is a total order), never wall-clock time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes.client import AppsV1Api, BatchV1Api, CoreV1Api
from kubernetes.client.exceptions import ApiException

from tests.e2e.runs import WAIT
from tests.kube import rawapi
from tests.kube.cluster import Cluster
from tests.support.pools import wait_until

Json = dict[str, Any]


@dataclass(frozen=True, order=True)
class Observed:
    """One watch event, reduced to what the scenarios order: one etcd, so resourceVersion is a total order."""

    rv: int
    kind: str
    type: str  # ADDED, MODIFIED, DELETED
    name: str
    image: str = ""
    replicas: int | None = None  # a StatefulSet's spec.replicas
    done: str = ""  # a Job's Complete/Failed condition that is True


def _observe(kind: str, event_type: str, obj: Json) -> Observed:
    meta, spec, status = obj["metadata"], obj.get("spec", {}), obj.get("status", {})
    pod_spec = spec.get("template", {}).get("spec", {}) if kind != "Pod" else spec
    containers = pod_spec.get("containers") or [{}]
    done = ",".join(c["type"] for c in status.get("conditions") or [] if c["status"] == "True"
                    and c["type"] in ("Complete", "Failed")) if kind == "Job" else ""  # fmt: skip
    return Observed(
        rv=int(meta["resourceVersion"]),
        kind=kind,
        type=event_type,
        name=meta["name"],
        image=str(containers[0].get("image", "")),
        replicas=spec.get("replicas") if kind == "StatefulSet" else None,
        done=done,
    )


class Recorder:
    """Pods, Jobs and StatefulSets of a namespace as watch events, from a list onwards (nothing missed
    unless the watch window expires, which `gaps` counts)."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self._events: list[Observed] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.gaps = 0
        listers: dict[str, Callable[..., Any]] = {
            "Pod": CoreV1Api(cluster.api).list_namespaced_pod,
            "Job": BatchV1Api(cluster.api).list_namespaced_job,
            "StatefulSet": AppsV1Api(cluster.api).list_namespaced_stateful_set,
        }
        self._threads = []
        for kind, lister in listers.items():
            start = self._list(kind, lister, namespace)
            thread = threading.Thread(target=self._watch, args=(kind, lister, namespace, start), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _list(self, kind: str, lister: Callable[..., Any], namespace: str) -> str:
        listing = rawapi.call(lister, namespace)
        with self._lock:
            self._events.extend(_observe(kind, "ADDED", item) for item in listing["items"])
        return str(listing["metadata"]["resourceVersion"])

    def _watch(self, kind: str, lister: Callable[..., Any], namespace: str, resource_version: str) -> None:
        while not self._stop.is_set():
            try:
                for event in rawapi.watch(lister, namespace, resource_version=resource_version, timeout_seconds=5,
                                          allow_watch_bookmarks=True, _request_timeout=30):  # fmt: skip
                    resource_version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        with self._lock:
                            self._events.append(_observe(kind, event["type"], event["object"]))
            except ApiException as error:
                if error.status == 410:
                    self.gaps += 1
                    resource_version = self._list(kind, lister, namespace)
                else:
                    self._stop.wait(0.5)
            except (urllib3.exceptions.HTTPError, OSError):
                self._stop.wait(0.5)

    def ordered(self) -> list[Observed]:
        with self._lock:
            return sorted(set(self._events))

    def first(self, what: str, predicate: Callable[[Observed], bool]) -> Observed:
        found = next((e for e in self.ordered() if predicate(e)), None)
        assert found is not None, f"no watch event shows {what}"
        return found

    def wait_for(self, what: str, predicate: Callable[[Observed], bool]) -> Observed:
        found: Observed = wait_until(what, lambda: next((e for e in self.ordered() if predicate(e)), None), WAIT)
        return found

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)
