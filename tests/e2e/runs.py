"""Flows the scenarios enqueue, and what the database says of their runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from fireflow_worker.client import FireflowClient
from tests.e2e.tracer import TraceServer
from tests.support.pools import wait_until

Json = dict[str, Any]
WAIT = 300.0  # generous: two cores run the control plane, the operator, the workers and PostgreSQL at once


def greet_flow() -> Json:
    return {
        "name": "greet",
        "inputs": {"who": {"type": "string"}},
        "nodes": {
            "hello": {"type": "template", "params": {"template": "Hello, ${inputs.who}!"}},
            "card": {"type": "transform", "params": {"value": {"greeting": "${nodes.hello}", "to": "${inputs.who}"}}},
        },
        "outputs": ["card"],
    }


def greeting(who: str) -> Json:
    """What greet_flow returns for `who`."""
    return {"card": {"greeting": f"Hello, {who}!", "to": who}}


def sleep_flow(seconds: float) -> Json:
    return {"name": "nap", "nodes": {"nap": {"type": "sleep", "params": {"seconds": seconds}}}}


def trace_flow(tracer: TraceServer, key: str, seconds: float) -> Json:
    """first -> nap -> last: a recorded side effect before and after a durable sleep."""
    return {
        "name": "traced",
        "nodes": {
            "first": tracer.node(key, "first", []),
            "nap": {"type": "sleep", "params": {"seconds": seconds}, "after": ["first"]},
            "last": tracer.node(key, "last", ["nap"]),
        },
        "outputs": ["first", "nap", "last"],
    }


@dataclass(frozen=True)
class Run:
    status: str
    executor: str
    recovery_attempts: int


def runs(url: str, run_ids: list[str] | None = None) -> dict[str, Run]:
    """Every run's row in DBOS's workflow_status (or just `run_ids`')."""
    with psycopg.connect(url, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT workflow_uuid, status, coalesce(executor_id, ''), coalesce(recovery_attempts, 0)"
            " FROM dbos.workflow_status"
        ).fetchall()
    found = {str(r[0]): Run(str(r[1]), str(r[2]), int(r[3])) for r in rows}
    return found if run_ids is None else {k: v for k, v in found.items() if k in set(run_ids)}


def wait_finished(url: str, run_ids: list[str], timeout: float = WAIT) -> dict[str, Run]:
    """Until every run has ended (no ENQUEUED or PENDING among them); the database may be away meanwhile."""

    def finished() -> dict[str, Run] | None:
        try:
            found = runs(url, run_ids)
        except psycopg.OperationalError:
            return None
        ended = len(found) == len(run_ids) and all(r.status not in ("ENQUEUED", "PENDING") for r in found.values())
        return found if ended else None

    result: dict[str, Run] = wait_until(f"{len(run_ids)} runs to end", finished, timeout)
    return result


def results(url: str, run_ids: list[str]) -> dict[str, Any]:
    """The results of ended runs (raises a run's error)."""
    with FireflowClient(url) as client:
        return {run_id: client.result(run_id) for run_id in run_ids}


def set_schema_behind(url: str) -> None:
    """Make the database need a migration again: the last three DBOS migrations are idempotent."""
    with psycopg.connect(url) as conn:
        conn.execute("UPDATE dbos.dbos_migrations SET version = version - 3")


@contextlib.contextmanager
def table_lock(url: str) -> Iterator[psycopg.Connection[Any]]:
    """A session holding ACCESS SHARE on dbos.workflow_status in an open transaction (a long reader): every
    ALTER of that table waits for it."""
    holder = psycopg.connect(url)
    try:
        holder.execute("LOCK TABLE dbos.workflow_status IN ACCESS SHARE MODE")
        yield holder
    finally:
        holder.close()
