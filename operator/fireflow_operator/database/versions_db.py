"""What the database says about a pool's application versions, and the two acts on them (I/O).

Runs left per version decide when a version retires (the operator counts them; no timer does). The current
version is made DBOS's latest, or version-less runs would wait for a version that no longer serves. What a
version still holds after `retireAfterSeconds` is forked onto the current version.
"""

from __future__ import annotations

from typing import Any

import psycopg

from fireflow_contract import executor_ids
from fireflow_operator.database.kept_connections import DatabaseQueryError, database_connection, dbos_engine


def runs_left(
    url: str, *, namespace: str, statefulsets: list[str], queues: list[str], versions: list[str], timeout_seconds: int
) -> dict[str, tuple[int, int]]:
    """(PENDING, ENQUEUED) runs per application version: PENDING ones held by these StatefulSets' pods,
    ENQUEUED ones waiting on this pool's queues for that version."""
    prefixes = [executor_ids.statefulset_prefix(namespace, name) for name in statefulsets]
    with database_connection(url, timeout_seconds) as conn:
        try:
            if conn.execute("SELECT to_regclass('dbos.workflow_status') IS NULL").fetchone() == (True,):
                return {}
            rows = conn.execute(
                """
                SELECT application_version, status, count(*) FROM dbos.workflow_status
                 WHERE application_version = ANY(%s)
                   AND ((status = 'PENDING' AND EXISTS (SELECT 1 FROM unnest(%s::text[]) p
                                                         WHERE starts_with(executor_id, p)))
                        OR (status = 'ENQUEUED' AND queue_name = ANY(%s)))
                 GROUP BY application_version, status
                """,
                (versions, prefixes, queues),
            ).fetchall()
        except psycopg.Error as err:
            raise DatabaseQueryError(" ".join(str(err).split())) from None
    counts: dict[str, tuple[int, int]] = {}
    for version, status, count in rows:
        pending, enqueued = counts.get(str(version), (0, 0))
        number = int(str(count))
        counts[str(version)] = (pending + number, enqueued) if status == "PENDING" else (pending, enqueued + number)
    return counts


def _client(url: str, application_name: str) -> Any:
    from dbos import DBOSClient  # noqa: PLC0415 - heavy; only needed for a version change

    # On the operator's own pool of this database's connections (the probe made it): nothing opened beside it.
    return DBOSClient(system_database_engine=dbos_engine(url), application_name=application_name)


def make_latest(url: str, application_name: str, version: str) -> bool:
    """Make `version` DBOS's latest for the application (True when it was not)."""
    client = _client(url, application_name)
    try:
        versions = {v["version_name"] for v in client.list_application_versions()}
        if version not in versions:
            return False  # registered by its first worker at launch, as the latest
        if client.get_latest_application_version()["version_name"] == version:
            return False
        client.set_latest_application_version(version)
        return True
    except Exception as err:  # DBOS raises SQLAlchemy's and its own errors
        detail = " ".join(str(err).split())[:300]
        raise DatabaseQueryError(f"cannot make version {version!r} the latest: {detail}") from None
    finally:
        client.destroy()


def _first_unfinished_step(client: Any, run_id: str) -> int:
    """The step a fork starts from: every step before it finished (a crash would resume there too)."""
    done = {int(step["function_id"]) for step in client.list_workflow_steps(run_id)}
    start = 1
    while start in done:
        start += 1
    return start


def fork_runs(url: str, application_name: str, *, run_ids: list[str], to_version: str) -> list[str]:
    """Cancel each run and fork it onto `to_version` from its first unfinished step; the new run ids."""
    client = _client(url, application_name)
    forked = []
    try:
        for run_id in run_ids:
            client.cancel_workflow(run_id)
            start = _first_unfinished_step(client, run_id)
            handle = client.fork_workflow(run_id, start, application_version=to_version)
            forked.append(str(handle.get_workflow_id()))
    except Exception as err:
        raise DatabaseQueryError(f"forking runs failed: {' '.join(str(err).split())[:300]}") from None
    finally:
        client.destroy()
    return forked


def runs_of_version(
    url: str, *, namespace: str, statefulsets: list[str], queues: list[str], version: str, timeout_seconds: int
) -> list[str]:
    """The ids of a version's runs left (the same selection as runs_left)."""
    prefixes = [executor_ids.statefulset_prefix(namespace, name) for name in statefulsets]
    with database_connection(url, timeout_seconds) as conn:
        try:
            rows = conn.execute(
                """
                SELECT workflow_uuid FROM dbos.workflow_status
                 WHERE application_version = %s
                   AND ((status = 'PENDING' AND EXISTS (SELECT 1 FROM unnest(%s::text[]) p
                                                         WHERE starts_with(executor_id, p)))
                        OR (status = 'ENQUEUED' AND queue_name = ANY(%s)))
                """,
                (version, prefixes, queues),
            ).fetchall()
        except psycopg.Error as err:
            raise DatabaseQueryError(" ".join(str(err).split())) from None
    return [str(r[0]) for r in rows]
