"""What the operator reads from a pool's database server: its limits, the connections others use, its schema
version and who else serves queues on it (pure data; dbprobe.py reads them, the budget and the gate decide on them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Usage:
    """Connections in use by others (not a known pool, not the operator) in each scope."""

    server: int
    database: int
    role: int


@dataclass(frozen=True)
class DatabaseFacts:
    """What the operator read from the server."""

    server: str  # the server's identity: its system identifier, else host:port
    database: str
    role: str
    superuser: bool
    max_connections: int
    superuser_reserved: int
    reserved: int
    database_limit: int  # -1: none
    role_limit: int  # -1: none
    others: Usage
    schema_version: int
    foreign_applications: tuple[str, ...]
    pending_executors: tuple[str, ...] = ()  # every executor id with PENDING runs on the database

    @property
    def database_key(self) -> str:
        return f"{self.server}/{self.database}"
