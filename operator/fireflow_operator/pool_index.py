"""Every pool the operator watches, kept from kopf's watch events instead of listed per reconcile: a
reconcile's cost must not grow with the fleet (a LIST of every pool per reconcile is quadratic in it).

Filled once by a LIST on first use (so a reconcile never decides a connection budget from a partial fleet),
then by each watch event. An object's resourceVersion orders what the LIST and the events say; a deleted pool
leaves a tombstone, so a LIST that started before its deletion cannot bring it back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Key = tuple[str, str]  # (namespace, name)


def _key(body: dict[str, Any]) -> Key:
    meta = body["metadata"]
    return str(meta["namespace"]), str(meta["name"])


def _version(body: dict[str, Any]) -> int:
    value = str(body["metadata"].get("resourceVersion") or "0")
    return int(value) if value.isdigit() else 0


class PoolIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[Key, dict[str, Any]] = {}
        self._deleted: dict[Key, int] = {}
        self._filled = False

    def observe(self, body: dict[str, Any], *, deleted: bool = False) -> None:
        """One watch event's object (or one LIST item): kept unless the index holds something newer."""
        key, version = _key(body), _version(body)
        with self._lock:
            known = max(_version(self._pools[key]) if key in self._pools else -1, self._deleted.get(key, -1))
            if version and version < known:
                return
            if deleted:
                self._pools.pop(key, None)
                self._deleted[key] = version
            else:
                self._pools[key] = body
                self._deleted.pop(key, None)

    def listed(self, bodies: list[dict[str, Any]], namespace: str, version: int) -> None:
        """A LIST of `namespace` ("": every namespace) at resourceVersion `version`: a pool the index had from
        before it and the LIST lacks was deleted meanwhile (its watch event missed)."""
        present = {_key(body) for body in bodies}
        with self._lock:
            for key, body in list(self._pools.items()):
                if (not namespace or key[0] == namespace) and key not in present and _version(body) < version:
                    del self._pools[key]
                    self._deleted[key] = version
        for body in bodies:
            self.observe(body)

    @property
    def filled(self) -> bool:
        return self._filled

    def mark_filled(self) -> None:
        """Every pool the operator may see was listed (by a standby replica's watch): no LIST on first use."""
        self._filled = True

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pool's latest version seen, if the index has it."""
        with self._lock:
            return self._pools.get((namespace, name))

    def gone(self, namespace: str, name: str) -> bool:
        """Whether the pool was deleted (and not created again since)."""
        with self._lock:
            return (namespace, name) in self._deleted

    def pools(self, list_all: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every pool; `list_all` is called once, on first use."""
        if not self._filled:
            listed = list_all()
            for body in listed:
                self.observe(body)
            self._filled = True
        with self._lock:
            return list(self._pools.values())
