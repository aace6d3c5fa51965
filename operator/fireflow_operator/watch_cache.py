"""The pools' children as kopf's watches report them (in-memory state; the caller passes the LIST that fills
it): StatefulSets, Jobs, Pods, PodDisruptionBudgets and Services labelled as the operator's. A reconcile reads
them here instead of from the API server, so an idle pool costs no read of its children.

Each kind is an ObjectIndex (pool_index.py: filled by a LIST on first use, then by the watch, listed again now
and then), with the objects of each pool side by side so that a pool's lookup does not scan the fleet. The
operator's own writes are observed too as soon as the API server answers them, so the next reconcile never
acts on an older version than the one it wrote. Lookups return the Kubernetes client's models, as the API
calls they replace did (built once per resourceVersion); they are shared, so callers must not change them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from fireflow_operator.api import names
from fireflow_operator.pool_index import Key, ObjectIndex, object_key, resource_version

STATEFULSETS, JOBS, PODS, PDBS, SERVICES = "statefulsets", "jobs", "pods", "poddisruptionbudgets", "services"
# Each cached kind: (API group, version, plural) as kopf names it, and the client's model.
KINDS: dict[str, tuple[str, str, str]] = {
    STATEFULSETS: ("apps", "v1", "V1StatefulSet"),
    JOBS: ("batch", "v1", "V1Job"),
    PODS: ("", "v1", "V1Pod"),
    PDBS: ("policy", "v1", "V1PodDisruptionBudget"),
    SERVICES: ("", "v1", "V1Service"),
}
KIND_OF = {"StatefulSet": STATEFULSETS, "Job": JOBS, "Pod": PODS, "PodDisruptionBudget": PDBS, "Service": SERVICES}
# Every child carries it (children.builders); kopf's watches ask the API server for these objects only.
OWNED_SELECTOR = names.label_selector({names.LABEL_MANAGED_BY: names.MANAGER})

_MODELS = client.ApiClient()  # only its (de)serialisation: no configuration, no connection


def as_model(kind: str, body: dict[str, Any]) -> Any:
    """A watch event's object as the client's model of its kind."""
    return _MODELS.deserialize(json.dumps(body), KINDS[kind][2], "application/json")


def as_body(model: Any) -> dict[str, Any]:
    """A model the API answered with, as the JSON object a watch event carries."""
    body: dict[str, Any] = _MODELS.sanitize_for_serialization(model)  # type: ignore[no-untyped-call]
    return body


def _pool_of(body: dict[str, Any]) -> Key:
    meta = body["metadata"]
    labels = meta.get("labels") or {}
    return str(meta.get("namespace") or ""), str(labels.get(names.LABEL_INSTANCE) or labels.get(names.LABEL_POOL) or "")


class KindCache:
    """One kind: the index, each pool's objects, and the models built from them."""

    def __init__(self, kind: str, list_all: Callable[[], list[dict[str, Any]]]) -> None:
        self.kind = kind
        self.list_all = list_all
        self.index = ObjectIndex()
        self._lock = threading.Lock()
        self._by_pool: dict[Key, set[Key]] = {}
        self._pool_of: dict[Key, Key] = {}
        self._models: dict[Key, tuple[int, Any]] = {}

    def observe(self, body: dict[str, Any], *, deleted: bool = False) -> bool:
        changed = self.index.observe(body, deleted=deleted)
        if changed:
            self._place(object_key(body), None if deleted else body)
        return changed

    def forget(self, key: Key) -> None:
        self.index.forget(key)
        self._place(key, None)

    def _place(self, key: Key, body: dict[str, Any] | None) -> None:
        """File the object under its pool (None: gone)."""
        with self._lock:
            before = self._pool_of.pop(key, None)
            if before is not None:
                self._by_pool.get(before, set()).discard(key)
            if body is None:
                self._models.pop(key, None)
                return
            pool = _pool_of(body)
            self._pool_of[key] = pool
            self._by_pool.setdefault(pool, set()).add(key)

    def _filled(self) -> None:
        """The index filled (LISTed on first use and now and then); after a LIST, every object filed anew."""
        if not self.index.fill(self.list_all):
            return
        bodies = self.index.values()
        with self._lock:
            self._by_pool, self._pool_of = {}, {}
            present = set()
            for body in bodies:
                key, pool = object_key(body), _pool_of(body)
                present.add(key)
                self._pool_of[key] = pool
                self._by_pool.setdefault(pool, set()).add(key)
            self._models = {key: built for key, built in self._models.items() if key in present}

    def get(self, namespace: str, name: str) -> Any | None:
        self._filled()
        body = self.index.get(namespace, name)
        return None if body is None else self._model((namespace, name), body)

    def of_pool(self, namespace: str, pool: str, labels: Mapping[str, str] | None = None) -> list[Any]:
        """The pool's objects whose labels include `labels`, by name."""
        self._filled()
        with self._lock:
            keys = sorted(self._by_pool.get((namespace, pool), ()))
        found = []
        for key in keys:
            body = self.index.get(*key)
            if body is not None and _matches(body, labels or {}):
                found.append(self._model(key, body))
        return found

    def matching(self, labels: Mapping[str, str], namespaces: list[str] | None = None) -> list[Any]:
        """Every object with these labels (in `namespaces`, or anywhere when empty)."""
        self._filled()
        return [
            self._model(object_key(body), body)
            for body in self.index.values()
            if _matches(body, labels) and (not namespaces or object_key(body)[0] in namespaces)
        ]

    def _model(self, key: Key, body: dict[str, Any]) -> Any:
        version = resource_version(body)
        with self._lock:
            built = self._models.get(key)
        if built is not None and built[0] == version and version:
            return built[1]
        model = as_model(self.kind, body)
        with self._lock:
            self._models[key] = (version, model)
        return model


def _matches(body: dict[str, Any], labels: Mapping[str, str]) -> bool:
    have = body["metadata"].get("labels") or {}
    return all(have.get(key) == value for key, value in labels.items())


class WatchCache:
    """The children of every pool, one KindCache per kind; `list_kind` LISTs one kind's owned objects."""

    def __init__(self, list_kind: Callable[[str], list[dict[str, Any]]]) -> None:
        self.kinds = {kind: KindCache(kind, _bound(list_kind, kind)) for kind in KINDS}

    def observe(self, kind: str, body: dict[str, Any], *, deleted: bool = False) -> bool:
        """A watch event's object; True when it told the cache something new (not a re-list's repeat)."""
        return self.kinds[kind].observe(body, deleted=deleted)

    def written(self, model: Any) -> None:
        """What the API server answered to one of the operator's own writes."""
        body = as_body(model)
        kind = KIND_OF.get(str(body.get("kind") or type(model).__name__.removeprefix("V1")))
        if kind is not None and body.get("metadata", {}).get("name"):
            self.kinds[kind].observe(body)

    def forget(self, kind: str, namespace: str, name: str) -> None:
        self.kinds[kind].forget((namespace, name))

    def __getitem__(self, kind: str) -> KindCache:
        return self.kinds[kind]


def _bound(list_kind: Callable[[str], list[dict[str, Any]]], kind: str) -> Callable[[], list[dict[str, Any]]]:
    return lambda: list_kind(kind)
