"""Operators sharded by label selector must not share a database (pure).

Each operator decides the connection budget of its pools one pool at a time under its own lock; two operators
deciding for one database at once could both hand out the same free connections. So every pool of a database
belongs to one shard, and a pool whose database also serves a pool of another shard is refused until they
are moved together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fireflow_operator.admission.policy import Refusal
from fireflow_operator.api import conditions

SELECTOR_SETTING = "FIREFLOW_OPERATOR_POOL_SELECTOR"


def shard_conflict(
    server: str,
    database: str,
    pools: list[dict[str, Any]],
    selects: Callable[[Mapping[str, str] | None], bool],
    selector: Mapping[str, str],
) -> Refusal | None:
    """The refusal when a pool outside this operator's selector reports the same database in its status."""
    for other in pools:
        meta = other["metadata"]
        budget = (other.get("status") or {}).get("connectionBudget") or {}
        if (budget.get("server"), budget.get("database")) != (server, database) or selects(meta.get("labels")):
            continue
        wanted = ",".join(f"{key}={value}" for key, value in selector.items())
        return Refusal(
            conditions.REASON_SHARD_CONFLICT,
            f"pool {meta['namespace']}/{meta['name']} on this database is reconciled by another operator (its "
            f"labels do not match {SELECTOR_SETTING}={wanted}), and two operators cannot share one database's "
            f"connection budget: label every pool of this database for the same operator. Nothing was rolled out.",
        )
    return None
