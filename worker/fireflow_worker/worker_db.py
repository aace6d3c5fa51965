"""The worker's own reads of the executions database, all through DBOS's pooled SQLAlchemy engine.

Every connection a worker holds is one of DBOS's pool (`DBOS_SYSTEM_DATABASE_POOL_SIZE`, named
`fireflow-worker:<executor id>` in `pg_stat_activity`) or its LISTEN connection: these helpers open none of
their own. DBOS keeps the engine in a private attribute of the pinned version (`DBOS._sys_db.engine`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from fireflow_worker.flow_store import FlowNotFoundError


def _workflow_status_table(engine: sa.Engine) -> str:
    return "dbos.workflow_status" if engine.dialect.name == "postgresql" else "workflow_status"


def cancelled_among(engine: sa.Engine, run_ids: Sequence[str]) -> set[str]:
    """The runs among `run_ids` whose status is CANCELLED."""
    query = sa.text(
        f"SELECT workflow_uuid FROM {_workflow_status_table(engine)} "  # noqa: S608 - constant table name
        "WHERE workflow_uuid IN :ids AND status = 'CANCELLED'"
    ).bindparams(sa.bindparam("ids", expanding=True))
    with engine.connect() as conn:
        return {str(row[0]) for row in conn.execute(query, {"ids": list(run_ids)})}


def queue_depths(engine: sa.Engine) -> dict[tuple[str, str], int]:
    """(queue, status) -> number of runs, for ENQUEUED and PENDING runs."""
    query = sa.text(
        f"SELECT queue_name, status, count(*) FROM {_workflow_status_table(engine)} "  # noqa: S608 - constant
        "WHERE queue_name IS NOT NULL AND status IN ('ENQUEUED', 'PENDING') GROUP BY queue_name, status"
    )
    with engine.connect() as conn:
        return {(str(row[0]), str(row[1])): int(row[2]) for row in conn.execute(query)}


def load_flow_definition(engine: sa.Engine, name: str) -> dict[str, Any]:
    """A stored flow (`fireflow.flows`), by name; FlowNotFoundError when there is none."""
    query = sa.text("SELECT definition FROM fireflow.flows WHERE name = :name")
    with engine.connect() as conn:
        row = conn.execute(query, {"name": name}).fetchone()
    if row is None:
        raise FlowNotFoundError(f"no stored flow named {name!r}")
    definition: dict[str, Any] = row[0]
    return definition
