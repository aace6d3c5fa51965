"""Stored flows (`fireflow.flows`) and the worker's provision cache.

A run may name a stored flow instead of carrying it. The worker resolves the name through a per-process
TTL cache (the TypeScript worker's FIREFLOW_PROVISION_CACHE_TTL_MS): a run inside the window makes no database call
before its flow starts; a changed flow reaches new runs once the cached entry expires. 0 turns it off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Json

from fireflow_contract.dburl import libpq_url
from fireflow_worker import metrics


class FlowNotFoundError(LookupError):
    pass


def save_flow(database_url: str, name: str, definition: dict[str, Any]) -> None:
    """Store (or replace) a flow under `name`."""
    with psycopg.connect(libpq_url(database_url), connect_timeout=10) as conn:
        conn.execute(
            """
            INSERT INTO fireflow.flows (name, definition) VALUES (%s, %s)
            ON CONFLICT (name) DO UPDATE SET definition = EXCLUDED.definition, updated_at = now()
            """,
            (name, Json(definition)),
        )


def load_flow_definition(database_url: str, name: str) -> dict[str, Any]:
    with psycopg.connect(libpq_url(database_url), connect_timeout=10) as conn:
        row = conn.execute("SELECT definition FROM fireflow.flows WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise FlowNotFoundError(f"no stored flow named {name!r}")
    definition: dict[str, Any] = row[0]
    return definition


class ProvisionCache:
    """A thread-safe TTL cache in front of a loader; `ttl_seconds == 0` disables it."""

    def __init__(
        self,
        loader: Callable[[str], dict[str, Any]],
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loader = loader
        self._ttl = ttl_seconds
        self._clock = clock
        self._entries: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> dict[str, Any]:
        now = self._clock()
        if self._ttl > 0:
            with self._lock:
                entry = self._entries.get(name)
            if entry is not None and now - entry[0] < self._ttl:
                metrics.PROVISION_CACHE.labels("hit").inc()
                return entry[1]
        metrics.PROVISION_CACHE.labels("miss").inc()
        definition = self._loader(name)
        if self._ttl > 0:
            with self._lock:
                self._entries[name] = (now, definition)
        return definition
