"""The connection budget: what every pool on one database needs, against what the server allows.

A worker holds at most `systemDatabasePoolSize` pooled connections plus one LISTEN connection; a migration
Job holds up to three (DBOS's migrate pool of two plus the version check). Everything that is not a worker
pool is counted from `pg_stat_activity` as it is now, plus the headroom the pool keeps for others.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass

import psycopg

WORKER_CONNECTION_PREFIX = "fireflow-worker:"  # the worker's connection application_name (runtime.py)
OPERATOR_APPLICATION_NAME = "fireflow-operator"
MIGRATION_JOB_CONNECTIONS = 3


@dataclass(frozen=True)
class DatabaseFacts:
    """What the operator read from the server."""

    max_connections: int
    superuser_reserved: int
    reserved: int
    others_in_use: int
    schema_version: int
    foreign_applications: tuple[str, ...]


@dataclass(frozen=True)
class Budget:
    max_connections: int
    reserved_by_server: int
    headroom: int
    others_in_use: int
    other_pools: int
    migration: int
    per_replica: int
    max_replicas: int

    def needs(self, replicas: int) -> int:
        return replicas * self.per_replica

    def as_status(self, database: str, desired: int, allowed: int) -> dict[str, int | str]:
        return {
            "database": database,
            "maxConnections": self.max_connections,
            "reservedByServer": self.reserved_by_server,
            "headroom": self.headroom,
            "othersInUse": self.others_in_use,
            "otherPools": self.other_pools,
            "migrationJob": self.migration,
            "perReplica": self.per_replica,
            "maxReplicas": self.max_replicas,
            "desiredReplicas": desired,
            "allowedReplicas": allowed,
            "needed": self.needs(allowed),
        }

    def explain(self, desired: int) -> str:
        return (
            f"{desired} replicas need {self.needs(desired)} connections ({self.per_replica} each) but only "
            f"{self.max_replicas * self.per_replica} fit: max_connections {self.max_connections} - reserved "
            f"{self.reserved_by_server} - headroom {self.headroom} - others in use {self.others_in_use} - other pools "
            f"{self.other_pools} - migration Job {self.migration}; holding at {self.max_replicas}"
        )


def compute_budget(facts: DatabaseFacts, *, pool_size: int, headroom: int, other_pools: int) -> Budget:
    per_replica = pool_size + 1
    reserved = facts.superuser_reserved + facts.reserved
    free = facts.max_connections - reserved - headroom - facts.others_in_use - other_pools - MIGRATION_JOB_CONNECTIONS
    return Budget(
        max_connections=facts.max_connections,
        reserved_by_server=reserved,
        headroom=headroom,
        others_in_use=facts.others_in_use,
        other_pools=other_pools,
        migration=MIGRATION_JOB_CONNECTIONS,
        per_replica=per_replica,
        max_replicas=max(0, free // per_replica),
    )


def database_identity(url: str) -> str:
    """host:port/dbname, without credentials: which pools share one server's budget."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "localhost"
    return f"{host}:{parts.port or 5432}{parts.path or '/'}"


def probe_database(url: str, application_name: str, *, timeout_seconds: int) -> DatabaseFacts:
    """Read the server's limits and usage with short timeouts (raises psycopg.Error when unreachable)."""
    with psycopg.connect(
        url,
        connect_timeout=timeout_seconds,
        application_name=OPERATOR_APPLICATION_NAME,
        options=f"-c statement_timeout={timeout_seconds * 1000}",
        autocommit=True,
    ) as conn:
        row = conn.execute(
            """
            SELECT current_setting('max_connections')::int,
                   current_setting('superuser_reserved_connections')::int,
                   coalesce(current_setting('reserved_connections', true), '0')::int,
                   (SELECT count(*) FROM pg_stat_activity
                     WHERE backend_type = 'client backend'
                       AND coalesce(application_name, '') NOT LIKE %s
                       AND coalesce(application_name, '') <> %s)::int
            """,
            (WORKER_CONNECTION_PREFIX + "%", OPERATOR_APPLICATION_NAME),
        ).fetchone()
        assert row is not None
        version = 0
        foreign: tuple[str, ...] = ()
        if conn.execute("SELECT to_regclass('dbos.dbos_migrations') IS NOT NULL").fetchone() == (True,):
            version_row = conn.execute("SELECT version FROM dbos.dbos_migrations").fetchone()
            version = int(version_row[0]) if version_row else 0
            owners = conn.execute(
                "SELECT DISTINCT application_name FROM dbos.queues WHERE application_name IS NOT NULL "
                "AND application_name <> %s AND name LIKE 'fireflow-%%'",
                (application_name,),
            ).fetchall()
            foreign = tuple(sorted(str(r[0]) for r in owners))
        return DatabaseFacts(
            max_connections=row[0],
            superuser_reserved=row[1],
            reserved=row[2],
            others_in_use=row[3],
            schema_version=version,
            foreign_applications=foreign,
        )
