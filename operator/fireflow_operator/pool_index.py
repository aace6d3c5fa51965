"""Objects kept from kopf's watch events instead of read per reconcile (in-memory state; the caller passes the
LIST that fills it): a reconcile's cost must not grow with the fleet (a LIST of every pool per reconcile is
quadratic in it), and an idle pool must cost the API server nothing.

An index is filled by a LIST on first use (so a reconcile never decides from a partial fleet), then by each
watch event, and listed again every `relist_seconds`: a watch that kopf had to restart from a new LIST tells
nobody about the deletions it missed, and the LIST drops them. An object's resourceVersion orders what the
LISTs and the events say; a deleted object leaves a tombstone, so a LIST that started before its deletion
cannot bring it back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

Key = tuple[str, str]  # (namespace, name)
RELIST_SECONDS = 600.0
T = TypeVar("T")


def object_key(body: dict[str, Any]) -> Key:
    meta = body["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def resource_version(body: dict[str, Any]) -> int:
    value = str(body["metadata"].get("resourceVersion") or "0")
    return int(value) if value.isdigit() else 0


class ObjectIndex:
    """One kind's objects by (namespace, name), as the watch and the LISTs report them."""

    def __init__(self, relist_seconds: float = RELIST_SECONDS) -> None:
        self.relist_seconds = relist_seconds
        self._lock = threading.Lock()
        self._filling = threading.Lock()
        self._objects: dict[Key, dict[str, Any]] = {}
        self._deleted: dict[Key, int] = {}
        self._listed_at: float | None = None  # monotonic seconds of the last LIST
        self.changes = 0  # how often what the index holds changed

    def observe(self, body: dict[str, Any], *, deleted: bool = False) -> bool:
        """One watch event's object (or one LIST item or write response): kept unless the index holds
        something as new. True when it changed what the index holds (a watch re-list repeats what it has)."""
        key, version = object_key(body), resource_version(body)
        with self._lock:
            known = self._known_version(key)
            if version and version <= known:
                return False
            if deleted:
                self._deleted[key] = version
                gone = self._objects.pop(key, None) is not None
                self.changes += gone
                return gone
            self._objects[key] = body
            self._deleted.pop(key, None)
            self.changes += 1
            return True

    def forget(self, key: Key) -> None:
        """The operator deleted the object: gone now, whatever an older event says later."""
        with self._lock:
            known = self._known_version(key)
            self.changes += self._objects.pop(key, None) is not None
            self._deleted[key] = known

    def _known_version(self, key: Key) -> int:
        held = self._objects.get(key)
        return max(resource_version(held) if held is not None else -1, self._deleted.get(key, -1))

    def fill(self, list_all: Callable[[], list[dict[str, Any]]]) -> bool:
        """LIST once on first use, and again every `relist_seconds` (by one caller; the others go on with
        what the index holds); True when this call listed."""
        if not self._due():
            return False
        if self._listed_at is None:
            self._filling.acquire()  # nothing to go on yet: wait for whoever lists
        elif not self._filling.acquire(blocking=False):
            return False
        try:
            if not self._due():
                return False
            started = time.monotonic()
            self._replace(list_all())
            self._listed_at = started
            return True
        finally:
            self._filling.release()

    def _due(self) -> bool:
        return self._listed_at is None or time.monotonic() - self._listed_at >= self.relist_seconds

    def _replace(self, listed: list[dict[str, Any]]) -> None:
        """Take a LIST's items, and drop what it no longer has: an object the LIST would have shown (its
        version is at most the LIST's newest) was deleted unseen. Newer ones may have come after the LIST."""
        newest = max((resource_version(body) for body in listed), default=0)
        self.listed(listed, "", newest + 1)
        with self._lock:
            # A tombstone guards against a LIST that started before the deletion; later LISTs start after it.
            self._deleted = {k: v for k, v in self._deleted.items() if v > newest}

    def listed(self, bodies: list[dict[str, Any]], namespace: str, version: int) -> None:
        """A LIST of `namespace` ("": every namespace) at resourceVersion `version`: an object the index had from
        before it and the LIST lacks was deleted meanwhile (its watch event missed)."""
        present = {object_key(body) for body in bodies}
        with self._lock:
            for key in [k for k in self._objects if (not namespace or k[0] == namespace) and k not in present]:
                if resource_version(self._objects[key]) < version:
                    del self._objects[key]
                    self._deleted[key] = version
                    self.changes += 1
        for body in bodies:
            self.observe(body)

    @property
    def filled(self) -> bool:
        return self._listed_at is not None

    def mark_filled(self) -> None:
        """Every object was listed (by a standby replica's watch): no LIST on first use."""
        self._listed_at = time.monotonic()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object's latest version seen, if the index has it."""
        with self._lock:
            return self._objects.get((namespace, name))

    def gone(self, namespace: str, name: str) -> bool:
        """Whether the object was deleted (and not created again since)."""
        with self._lock:
            return (namespace, name) in self._deleted

    def values(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._objects.values())


class PoolIndex(ObjectIndex):
    """Every pool the operator watches, other shards' too (the connection budget sees the whole fleet), and what
    reconciles derive from all of them, derived again only once a pool changed: an idle fleet's reconciles
    share one view instead of each walking every pool."""

    def __init__(self, relist_seconds: float = RELIST_SECONDS) -> None:
        super().__init__(relist_seconds)
        self._derived: dict[str, tuple[int, Any]] = {}

    def derived(self, name: str, build: Callable[[list[dict[str, Any]]], T]) -> T:
        """`build(every pool)`, kept under `name` until the index changes. The pools must be filled."""
        with self._lock:
            changes, pools = self.changes, list(self._objects.values())
            kept = self._derived.get(name)
        if kept is not None and kept[0] == changes:
            value: T = kept[1]
            return value
        value = build(pools)
        with self._lock:
            self._derived[name] = (changes, value)
        return value

    def pools(self, list_all: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every pool; `list_all` is called on first use and every `relist_seconds`."""
        self.fill(list_all)
        return self.values()

    def pool(self, namespace: str, name: str, list_all: Callable[[], list[dict[str, Any]]]) -> dict[str, Any] | None:
        """One pool as last seen (its own status writes included: write_status feeds their answers here)."""
        self.fill(list_all)
        return self.get(namespace, name)
