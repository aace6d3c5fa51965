"""The connection budget: what every pool on one server needs, against every limit the server enforces (pure).

PostgreSQL refuses a connection when any of three counts is full: the server's `max_connections` (less
the slots reserved for superusers and `pg_use_reserved_connections`), the database's `CONNECTION LIMIT`
and the role's `CONNECTION LIMIT` (the last two do not apply to superusers). A pool fits when each of
those scopes has room for its workers after everything else in that scope: connections in use by anything
that is not a known pool, what the other pools on the same scope need, the migration Job, the operator's own
connections to the database, and (server-wide) the pool's headroom. Pools on different databases of one server
share its `max_connections`.

A worker holds at most `systemDatabasePoolSize` pooled connections plus one LISTEN connection; a migration
Job holds up to three (DBOS's migrate pool of two plus the version check).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from fireflow_operator.database.facts import DatabaseFacts, Usage
from fireflow_operator.database.kept_connections import CONNECTIONS_PER_DATABASE

MIGRATION_JOB_CONNECTIONS = 3
# The operator's own connections to the pool's database, kept between reconciles and shared by all its pools and
# by the DBOS client that hands stranded runs back (database/kept_connections.py).
OPERATOR_CONNECTION = CONNECTIONS_PER_DATABASE
SERVER, DATABASE, ROLE = "server", "database", "role"


class PoolNeed(NamedTuple):
    """What one pool's workers may hold, and where: read from its status.connectionBudget (a tuple: every
    reconcile reads one per pool of the fleet)."""

    server: str
    database: str
    role: str
    needed: int


@dataclass(frozen=True)
class Scope:
    name: str  # SERVER, DATABASE or ROLE
    limit: int
    reserved: int  # server: reserved slots + headroom; else 0
    others_in_use: int
    other_pools: int

    @property
    def free(self) -> int:
        taken = self.others_in_use + self.other_pools + MIGRATION_JOB_CONNECTIONS + OPERATOR_CONNECTION
        return self.limit - self.reserved - taken

    def describe(self, facts: DatabaseFacts, headroom: int) -> str:
        if self.name == SERVER:
            head = f"max_connections {self.limit} - reserved {self.reserved - headroom} - headroom {headroom}"
        elif self.name == DATABASE:
            head = f"database {facts.database!r} CONNECTION LIMIT {self.limit}"
        else:
            head = f"role {facts.role!r} CONNECTION LIMIT {self.limit}"
        return (
            f"{head} - others in use {self.others_in_use} - other pools {self.other_pools} "
            f"- migration Job {MIGRATION_JOB_CONNECTIONS} - operator {OPERATOR_CONNECTION}"
        )


@dataclass(frozen=True)
class Budget:
    facts: DatabaseFacts
    headroom: int
    per_replica: int
    scopes: tuple[Scope, ...]

    @property
    def limiting(self) -> Scope:
        return min(self.scopes, key=lambda s: s.free)

    @property
    def max_replicas(self) -> int:
        return max(0, self.limiting.free // self.per_replica)

    def needs(self, replicas: int) -> int:
        return replicas * self.per_replica

    def explain(self, desired: int) -> str:
        scope = self.limiting
        return (
            f"{desired} replicas need {self.needs(desired)} connections ({self.per_replica} each) but only "
            f"{self.max_replicas * self.per_replica} fit: {scope.describe(self.facts, self.headroom)}; "
            f"holding at {self.max_replicas}"
        )

    def as_status(self, desired: int, allowed: int, retiring: int = 0) -> dict[str, int | str]:
        """`allowed` replicas of the current version, beside `retiring` ones of older versions."""
        server = next(s for s in self.scopes if s.name == SERVER)
        return {
            "server": self.facts.server,
            "database": self.facts.database,
            "role": self.facts.role,
            "maxConnections": self.facts.max_connections,
            "reservedByServer": server.reserved - self.headroom,
            "headroom": self.headroom,
            "othersInUse": server.others_in_use,
            "otherPools": server.other_pools,
            "migrationJob": MIGRATION_JOB_CONNECTIONS,
            "operatorConnection": OPERATOR_CONNECTION,
            "databaseLimit": self.facts.database_limit,
            "roleLimit": self.facts.role_limit,
            "limitedBy": self.limiting.name,
            "perReplica": self.per_replica,
            "maxReplicas": self.max_replicas,
            "desiredReplicas": desired,
            "allowedReplicas": allowed,
            "retiringReplicas": retiring,
            "needed": self.needs(allowed + retiring),
        }


def compute_budget(
    facts: DatabaseFacts, *, per_replica: int, headroom: int, other_pools: list[PoolNeed], others: Usage
) -> Budget:
    """The budget with `others` as the usage of everything else (the caller chooses how it is smoothed)."""
    same_server = [p for p in other_pools if p.server == facts.server]
    scopes = [
        Scope(
            SERVER,
            facts.max_connections,
            facts.superuser_reserved + facts.reserved + headroom,
            others.server,
            sum(p.needed for p in same_server),
        )
    ]
    if facts.database_limit >= 0 and not facts.superuser:
        on_database = sum(p.needed for p in same_server if p.database == facts.database)
        scopes.append(Scope(DATABASE, facts.database_limit, 0, others.database, on_database))
    if facts.role_limit >= 0 and not facts.superuser:
        of_role = sum(p.needed for p in same_server if p.role == facts.role)
        scopes.append(Scope(ROLE, facts.role_limit, 0, others.role, of_role))
    return Budget(facts, headroom, per_replica, tuple(scopes))


# What a budget decided and why, without the usage counts that move while nothing is decided differently:
# a status (and an event) changes only when one of these does, so an idle pool causes no writes.
DECISION_KEYS = (
    "server", "database", "role", "maxConnections", "databaseLimit", "roleLimit", "headroom", "limitedBy",
    "perReplica", "desiredReplicas", "allowedReplicas", "retiringReplicas", "needed",
)  # fmt: skip


def same_decision(old: Mapping[str, object], new: Mapping[str, object]) -> bool:
    """Whether nothing was decided differently. How many replicas would fit moves with every other client's
    connection; it is a decision only while it holds the pool back (below that, a 200-pool fleet's statuses were
    rewritten each time a client came or went on the server)."""
    held_back = int(str(new.get("allowedReplicas", 0))) < int(str(new.get("desiredReplicas", 0)))
    keys = (*DECISION_KEYS, "maxReplicas") if held_back else DECISION_KEYS
    return all(old.get(key) == new.get(key) for key in keys)


def pool_need(status: dict[str, object]) -> PoolNeed | None:
    """A pool's need from its status.connectionBudget (None when it has none in this format)."""
    budget = status.get("connectionBudget")
    if not isinstance(budget, dict) or "server" not in budget:
        return None
    return PoolNeed(
        str(budget["server"]),
        str(budget.get("database", "")),
        str(budget.get("role", "")),
        int(budget.get("needed", 0)),
    )
