"""No stranded runs: a departed worker's PENDING runs are handed back to the queue.

DBOS recovers a PENDING run only in a process launched with the run's executor id. A StatefulSet pod whose
ordinal is at or above the replica count will not come back, so nothing would ever finish its runs. Once
such a pod is certainly gone (its Pod object no longer exists: the process has exited), its PENDING runs
are resumed through DBOS, which re-enqueues them for any remaining worker. Never earlier: two live
processes on one run would run its current step twice.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from fireflow_contract import executor_ids
from fireflow_operator.database.kept_connections import DatabaseQueryError, database_connection, dbos_engine


def stranded_executors(
    pending_executors: Iterable[str],
    *,
    namespace: str,
    statefulset: str,
    replicas: int,
    live_pods: dict[str, int],
) -> list[str]:
    """Executor ids of this StatefulSet that nothing will run again: pods that will not return (ordinal >=
    replicas) and are gone, and processes a live pod no longer has (`live_pods`: name -> its processes).

    An id is `<namespace>.<statefulset>-<ordinal>`, or `...-<ordinal>-p<k>` for the k-th worker process of a
    pod; another version's StatefulSet (`<statefulset>-v<N>-...`) never matches.
    """
    prefix = executor_ids.statefulset_prefix(namespace, statefulset)
    stranded = []
    for executor in pending_executors:
        match = (
            executor_ids.ORDINAL_AND_PROCESS.fullmatch(executor.removeprefix(prefix))
            if executor.startswith(prefix)
            else None
        )
        if match is None:
            continue
        ordinal, process = int(match.group(1)), int(match.group(2) or 0)
        pod = f"{statefulset}-{ordinal}"
        if pod in live_pods:
            if process >= live_pods[pod]:  # fewer processes per pod now: no process of this pod has the id
                stranded.append(executor)
        elif ordinal >= replicas:
            stranded.append(executor)
    return sorted(stranded)


def pending_executors(url: str, namespace: str, statefulset: str, *, timeout_seconds: int) -> list[str]:
    """Executor ids of this StatefulSet's pods that own PENDING runs (raises the dbprobe errors); the operator's
    reconciles take them from the database's shared probe instead (dbprobe.py), `kubectl fireflow` asks here."""
    return _pending_with_prefix(url, executor_ids.statefulset_prefix(namespace, statefulset), timeout_seconds)


def pool_pending_executors(url: str, namespace: str, pool_name: str, *, timeout_seconds: int) -> list[str]:
    """Executor ids of every version's pods of the pool that own PENDING runs, and no other pool's."""
    pattern = executor_ids.pool_executor_pattern(namespace, pool_name)
    found = _pending_with_prefix(url, executor_ids.statefulset_prefix(namespace, pool_name), timeout_seconds)
    return [executor for executor in found if pattern.fullmatch(executor)]


def _pending_with_prefix(url: str, prefix: str, timeout_seconds: int) -> list[str]:
    with database_connection(url, timeout_seconds) as conn:
        try:
            if conn.execute("SELECT to_regclass('dbos.workflow_status') IS NULL").fetchone() == (True,):
                return []  # never migrated: no worker ever ran, so nothing can be stranded
            rows = conn.execute(
                "SELECT DISTINCT executor_id FROM dbos.workflow_status "
                "WHERE status = 'PENDING' AND starts_with(executor_id, %s)",
                (prefix,),
            ).fetchall()
        except psycopg.Error as err:
            raise DatabaseQueryError(" ".join(str(err).split())) from None
    return [str(row[0]) for row in rows]


def resume_runs_of(url: str, application_name: str, executors: list[str], *, timeout_seconds: int) -> int:
    """Re-enqueue the PENDING runs of `executors`; returns how many were handed back."""
    if not executors:
        return 0
    with database_connection(url, timeout_seconds) as conn:
        try:
            rows = conn.execute(
                "SELECT workflow_uuid, queue_name FROM dbos.workflow_status "
                "WHERE status = 'PENDING' AND executor_id = ANY(%s)",
                (executors,),
            ).fetchall()
        except psycopg.Error as err:
            raise DatabaseQueryError(" ".join(str(err).split())) from None
    runs = [(str(row[0]), None if row[1] is None else str(row[1])) for row in rows]
    if not runs:
        return 0
    from dbos import DBOSClient  # noqa: PLC0415 - heavy; only needed when something is stranded

    try:
        # On the operator's own pool of this database's connections: nothing opened beside the budgeted ones.
        client = DBOSClient(system_database_engine=dbos_engine(url, timeout_seconds), application_name=application_name)
        try:
            for run_id, queue in runs:
                # Back onto its own queue, so the pool's workers claim it under the queue's concurrency limits.
                client.resume_workflow(run_id, queue_name=queue)
        finally:
            client.destroy()
    except Exception as err:  # DBOS raises SQLAlchemy's and its own errors
        raise DatabaseQueryError(f"resuming runs failed: {' '.join(str(err).split())[:500]}") from None
    return len(runs)
