"""The worker's own reads of the executions database, all through DBOS's pooled SQLAlchemy engine.

Every connection a worker holds is one of DBOS's pool (`DBOS_SYSTEM_DATABASE_POOL_SIZE`, named
`fireflow-worker:<executor id>` in `pg_stat_activity`) or its LISTEN connection: these helpers open none of
their own, except the refund at shutdown, once the pool is closed. DBOS keeps the engine private: it is
reached through `dbos_internals.system_engine`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import sqlalchemy as sa

from fireflow_contract.dburl import libpq_url
from fireflow_worker.flow_store import FlowNotFoundError


def _workflow_status_table(engine: sa.Engine) -> str:
    return "dbos.workflow_status" if engine.dialect.name == "postgresql" else "workflow_status"


def _dbos_table(engine: sa.Engine, name: str) -> str:
    return f"dbos.{name}" if engine.dialect.name == "postgresql" else name


def reencode_claimed_run(engine: sa.Engine, run_id: str, owner_xid: str, encoding: str, inputs: str | None) -> bool:
    """Store a run this worker just claimed under another encoding (`inputs` None keeps the stored input);
    False when the run is no longer this claim's (cancelled meanwhile, claimed again elsewhere)."""
    status_table, input_table = _workflow_status_table(engine), _dbos_table(engine, "workflow_input")
    with engine.begin() as conn:
        updated = conn.execute(
            sa.text(
                f"UPDATE {status_table} SET serialization = :encoding, "  # noqa: S608 - constant table names
                "inputs = CASE WHEN inputs IS NULL OR CAST(:inputs AS text) IS NULL THEN inputs "
                "ELSE CAST(:inputs AS text) END "
                "WHERE workflow_uuid = :id AND status = 'PENDING' AND owner_xid = :owner"
            ),
            {"encoding": encoding, "inputs": inputs, "id": run_id, "owner": owner_xid},
        ).rowcount
        if updated and inputs is not None:  # newer SDKs keep the input in a table of its own
            conn.execute(
                sa.text(f"UPDATE {input_table} SET inputs = :inputs WHERE workflow_uuid = :id"),  # noqa: S608
                {"inputs": inputs, "id": run_id},
            )
    return bool(updated)


def cancelled_among(engine: sa.Engine, run_ids: Sequence[str]) -> set[str]:
    """The runs among `run_ids` whose status is CANCELLED."""
    query = sa.text(
        f"SELECT workflow_uuid FROM {_workflow_status_table(engine)} "  # noqa: S608 - constant table name
        "WHERE workflow_uuid IN :ids AND status = 'CANCELLED'"
    ).bindparams(sa.bindparam("ids", expanding=True))
    with engine.connect() as conn:
        return {str(row[0]) for row in conn.execute(query, {"ids": list(run_ids)})}


def queue_depths(engine: sa.Engine) -> dict[tuple[str, str], tuple[int, int]]:
    """(queue, status) -> (number of runs, the oldest one's created_at in epoch ms), for ENQUEUED and PENDING
    runs; one query, the same scan as the count alone."""
    query = sa.text(
        f"SELECT queue_name, status, count(*), min(created_at) FROM {_workflow_status_table(engine)} "  # noqa: S608
        "WHERE queue_name IS NOT NULL AND status IN ('ENQUEUED', 'PENDING') GROUP BY queue_name, status"
    )
    with engine.connect() as conn:
        return {(str(row[0]), str(row[1])): (int(row[2]), int(row[3] or 0)) for row in conn.execute(query)}


def load_flow_definition(engine: sa.Engine, name: str) -> dict[str, Any]:
    """A stored flow (`fireflow.flows`), by name; FlowNotFoundError when there is none."""
    query = sa.text("SELECT definition FROM fireflow.flows WHERE name = :name")
    with engine.connect() as conn:
        row = conn.execute(query, {"name": name}).fetchone()
    if row is None:
        raise FlowNotFoundError(f"no stored flow named {name!r}")
    definition: dict[str, Any] = row[0]
    return definition


def refund_drained_dispatches(database_url: str, application_name: str, executor_id: str, run_ids: list[str]) -> int:
    """Give back the recovery attempt of each run a graceful drain left PENDING here; returns how many.

    DBOS counts every dispatch of a run against its max_recovery_attempts, so without this a long run
    would be abandoned after as many rolling updates as the limit allows. Only crashes (the worker gone
    without draining) should count. Called once DBOS's pool is closed, on one short connection of its own.
    """
    if not run_ids:
        return 0
    with psycopg.connect(libpq_url(database_url), connect_timeout=5, application_name=application_name) as conn:
        cursor = conn.execute(
            "UPDATE dbos.workflow_status SET recovery_attempts = recovery_attempts - 1 "
            "WHERE workflow_uuid = ANY(%s) AND status = 'PENDING' AND executor_id = %s AND recovery_attempts > 0",
            (run_ids, executor_id),
        )
        return cursor.rowcount


def claim_latencies(engine: sa.Engine, run_ids: Sequence[str]) -> list[tuple[str, float]]:
    """(queue, seconds from enqueue to claim) of the given runs, database clock; one primary-key lookup each."""
    query = sa.text(
        f"SELECT coalesce(queue_name, 'none'), started_at_epoch_ms - created_at "  # noqa: S608 - constant
        f"FROM {_workflow_status_table(engine)} WHERE workflow_uuid IN :ids AND started_at_epoch_ms IS NOT NULL"
    ).bindparams(sa.bindparam("ids", expanding=True))
    with engine.connect() as conn:
        return [(str(row[0]), max(0.0, int(row[1]) / 1000)) for row in conn.execute(query, {"ids": list(run_ids)})]
