"""Operators sharding a fleet (by label selector or by namespace) must not share a PostgreSQL server, and no pool
may be selected by two of them (pure).

Each operator decides the connection budget of its pools one pool at a time under its own lock, against the
server's `max_connections`, the database's and the role's limits (a role's limit counts across every database of
its server). Two operators deciding for one server at once, each from the other's lagging status, could both
hand out the same free connections. So every pool of a server belongs to one shard: a pool on a server that an
older pool of another shard already uses is refused until they are moved together; the older pool stands.

Each reconcile also records the operator that did it (`status.reconciledBy`): one that finds another operator's
record, from one whose selection still includes the pool, reports that two operators select it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fireflow_operator.admission.policy import Refusal
from fireflow_operator.api import conditions, names
from fireflow_operator.settings import OperatorSettings

SELECTOR_SETTING = "FIREFLOW_OPERATOR_POOL_SELECTOR"


def _age(meta: Mapping[str, Any]) -> tuple[str, str, str]:
    """Older first; pools created in the same second by namespace and name, the same order for every operator."""
    return str(meta.get("creationTimestamp") or ""), str(meta.get("namespace")), str(meta.get("name"))


def shard_conflict(
    pool: Mapping[str, Any],
    server: str,
    pools: list[dict[str, Any]],
    selects: Callable[[Mapping[str, str] | None], bool],
    selector: Mapping[str, str],
) -> Refusal | None:
    """The refusal when an older pool outside this operator's selector reports the same server in its status."""
    mine = _age(pool)
    for other in pools:
        meta = other["metadata"]
        budget = (other.get("status") or {}).get("connectionBudget") or {}
        if budget.get("server") != server or selects(meta.get("labels")) or _age(meta) >= mine:
            continue
        return Refusal(
            conditions.REASON_SHARD_CONFLICT,
            f"pool {meta['namespace']}/{meta['name']}, older than this one and on the same PostgreSQL server, is "
            f"reconciled by another operator (its labels do not match {SELECTOR_SETTING}="
            f"{names.canonical_selector(selector)}), and two operators cannot share one server's connection "
            f"budget: label every pool of this server for the same operator. Nothing was rolled out.",
        )
    return None


def claim(settings: OperatorSettings) -> dict[str, Any]:
    """What this operator records on the pools it reconciles (status.reconciledBy)."""
    namespace = settings.leader_election_namespace
    return {
        "lease": f"{namespace}/{settings.lease_name}" if namespace else "",
        "poolSelector": names.canonical_selector(settings.pool_selector),
        "namespaces": sorted(settings.namespaces),
    }


def _selects(claimant: Mapping[str, Any], namespace: str, labels: Mapping[str, str]) -> bool:
    watched = claimant.get("namespaces") or []
    wanted = (part.partition("=") for part in str(claimant.get("poolSelector") or "").split(",") if part)
    return (not watched or namespace in watched) and all(labels.get(key) == value for key, _, value in wanted)


def other_claimant(
    recorded: Mapping[str, Any] | None, mine: Mapping[str, Any], namespace: str, labels: Mapping[str, str] | None
) -> Mapping[str, Any] | None:
    """The other operator that reconciled this pool last and still selects it, if one did (then two do)."""
    if not recorded or dict(recorded) == dict(mine):
        return None
    if recorded.get("lease") and recorded.get("lease") == mine.get("lease"):
        return None  # this release itself, before its settings changed
    return recorded if _selects(recorded, namespace, labels or {}) else None


def _describe(claimant: Mapping[str, Any]) -> str:
    lease = claimant.get("lease") or "no leader election"
    selection = claimant.get("poolSelector") or "every pool"
    where = ",".join(claimant.get("namespaces") or []) or "every namespace"
    return f"the operator of Lease {lease} ({SELECTOR_SETTING}: {selection}; namespaces: {where})"


def overlap_message(other: Mapping[str, Any], mine: Mapping[str, Any]) -> str:
    return (
        f"this pool is reconciled by two operators: {_describe(mine)}, and {_describe(other)}, which did it "
        f"last. Each writes it and decides its connection budget without the other: give the releases disjoint "
        f"poolSelector (or watchNamespaces) values. If that operator is gone, nothing is to be done: this one "
        f"reconciles the pool from now on."
    )
