"""Pools that share a database share its queue settings: DBOS keeps one row per queue and database, and
every worker reloads it on each poll, so the last writer silently wins for everyone (pure; other pools' specs are
parsed once per change and kept).

A pool whose settings for a queue it shares with an older pool on the same database differ is refused,
with both values in the message, rather than merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fireflow_operator.admission.policy import Refusal
from fireflow_operator.api import conditions
from fireflow_operator.api.model import QUEUES, PoolSpec, parse_spec

EXECUTIONS, BACKGROUND, SANDBOX, TERMINAL = QUEUES


def queue_settings(spec: PoolSpec) -> dict[str, dict[str, int]]:
    """What the pool's workers register for each queue they serve (the worker's queues.py)."""
    dbos = spec.dbos
    polling = {"pollingIntervalMs": dbos.polling_interval_ms}
    every = {
        EXECUTIONS: {"workerConcurrency": dbos.worker_concurrency, "queueConcurrency": dbos.queue_concurrency},
        BACKGROUND: {
            "workerConcurrency": max(1, dbos.worker_concurrency // 2),
            "queueConcurrency": dbos.queue_concurrency,
        },
        SANDBOX: {"sandboxQueueConcurrency": dbos.sandbox_queue_concurrency},
        TERMINAL: {"terminalQueueConcurrency": dbos.terminal_queue_concurrency},
    }
    return {queue: {**every[queue], **polling} for queue in spec.queues}


@dataclass(frozen=True)
class PoolOnDatabase:
    namespace: str
    name: str
    created: str  # creationTimestamp: the older pool's settings stand
    spec: PoolSpec

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.created, self.namespace, self.name)


def conflict(pool: PoolOnDatabase, others: list[PoolOnDatabase]) -> Refusal | None:
    mine = queue_settings(pool.spec)
    for other in sorted((o for o in others if o.key < pool.key), key=lambda o: o.key):
        theirs = queue_settings(other.spec)
        for queue in sorted(set(mine) & set(theirs)):
            for setting, value in mine[queue].items():
                if theirs[queue].get(setting) != value:
                    return Refusal(
                        conditions.REASON_QUEUE_SETTINGS_CONFLICT,
                        f"pool {other.namespace}/{other.name} on this database sets {setting} "
                        f"{theirs[queue][setting]} for {queue}, this pool {value}: DBOS keeps one setting per queue "
                        f"and database, so one of them would silently not apply. Use the same spec.dbos settings "
                        f"for the queues both serve, or another database. Nothing was rolled out.",
                    )
    return None


def on_database(body: dict[str, Any], spec: PoolSpec) -> PoolOnDatabase:
    meta = body["metadata"]
    return PoolOnDatabase(meta["namespace"], meta["name"], str(meta.get("creationTimestamp", "")), spec)


# Other pools' specs, parsed once per change ((uid, generation): the API server counts spec changes): every
# reconcile looks at the specs of all the pools on its database, and parsing them each time grew with the fleet.
_PARSED: dict[tuple[str, int], PoolSpec] = {}
_PARSED_MAX = 10_000


def _spec_of(body: dict[str, Any]) -> PoolSpec:
    meta = body["metadata"]
    key = (str(meta.get("uid") or ""), int(meta.get("generation") or 0))
    spec = _PARSED.get(key) if key[0] else None
    if spec is None:
        spec = parse_spec(body.get("spec") or {})
        if key[0]:
            if len(_PARSED) >= _PARSED_MAX:
                _PARSED.clear()
            _PARSED[key] = spec
    return spec


def pools_by_database(pools: list[dict[str, Any]]) -> dict[tuple[str, str], list[PoolOnDatabase]]:
    """Every pool with a valid spec under the (server, database) its status says it uses."""
    grouped: dict[tuple[str, str], list[PoolOnDatabase]] = {}
    for body in pools:
        budget = (body.get("status") or {}).get("connectionBudget") or {}
        if "server" not in budget:
            continue
        try:
            found = on_database(body, _spec_of(body))
        except ValidationError:
            continue
        grouped.setdefault((str(budget["server"]), str(budget.get("database"))), []).append(found)
    return grouped


def pools_on(
    server: str, database: str, grouped: dict[tuple[str, str], list[PoolOnDatabase]], mine: PoolOnDatabase
) -> list[PoolOnDatabase]:
    """The other pools whose status says they use the same database (valid specs only; `grouped`: as
    pools_by_database grouped them)."""
    return [p for p in grouped.get((server, database), []) if (p.namespace, p.name) != (mine.namespace, mine.name)]
