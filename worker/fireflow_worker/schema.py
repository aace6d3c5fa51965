"""The project's own database objects beside DBOS's schema: the stored-flows table, the trigger that
announces a run's end on `ff_workflow_terminal` (DBOS itself sends no notification when a workflow ends), the
trigger that keeps a run's result and error where every DBOS SDK reads them (below), and the triggers that
wake idle workers when a run is enqueued or a queue's row changes (see dispatcher.py; PostgreSQL delivers one
notification per distinct payload per transaction, so a bulk enqueue notifies once per queue).

DBOS-py 3.4 (schema 109 on) writes a workflow's output and error to `dbos.workflow_output` and reads them
from there first (`coalesce(workflow_output.x, workflow_status.x)`); `@dbos-inc/dbos-sdk` 4.x reads only
`workflow_status.output`/`error`, so its `getResult()` resolved null for every run, failed ones included. The
trigger `fireflow_workflow_output` copies them into `workflow_status` in the statement that writes them (one
row version more per run end, no round trip; docs/run-contract.md has the choice and its measurement).

Installing is idempotent and cheap when already done: the worker checks the catalogue first, so a worker
whose role may not run DDL starts fine once `fireflow-worker migrate` has installed them.
"""

from __future__ import annotations

from typing import Any

import psycopg
import sqlalchemy as sa

from fireflow_contract.dburl import libpq_url
from fireflow_contract.run_request import TERMINAL_CHANNEL, TERMINAL_STATUSES

# Workers are woken on DBOS's own notification channel, which DBOS's LISTEN connection already reads: a
# second listening connection per worker would cost one more connection and, since PostgreSQL wakes every
# listening backend of a database for every notification, one more short transaction per run end.
WAKE_CHANNEL = "dbos_notifications_channel"
ENQUEUED_PREFIX = "ff-enqueued::"
QUEUE_CHANGED_PREFIX = "ff-queue::"
RUN_ENDED = "ff-run-ended"
# Bumped whenever the objects below change, so an older installation is replaced.
OBJECTS_VERSION = "fireflow-objects-5"
# Serialises concurrent installers (replicas starting together).
_INSTALL_LOCK_KEY = 0x0F1F_E0F1

_STATEMENTS = (
    "CREATE SCHEMA IF NOT EXISTS fireflow",
    """
    CREATE TABLE IF NOT EXISTS fireflow.flows (
        name text PRIMARY KEY,
        definition json NOT NULL,  -- json, not jsonb: node order is meaningful and jsonb drops it
        updated_at timestamptz NOT NULL DEFAULT now()
    )
    """,
    f"""
    CREATE OR REPLACE FUNCTION fireflow.notify_workflow_terminal() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.status IN ({", ".join(f"'{s}'" for s in TERMINAL_STATUSES)})
           AND NEW.status IS DISTINCT FROM OLD.status THEN
            PERFORM pg_notify('{TERMINAL_CHANNEL}',
                json_build_object('workflow_id', NEW.workflow_uuid, 'status', NEW.status)::text);
            -- For workers' claimers under a global cap (read by DBOS's own listener, see dispatcher.py).
            -- Only such a queue's runs: every notification wakes every worker's listener thread, which
            -- then competes for its interpreter's lock with the runs executing there.
            IF NEW.queue_name IS NOT NULL AND EXISTS (
                SELECT 1 FROM dbos.queues q WHERE q.name = NEW.queue_name AND q.concurrency IS NOT NULL
            ) THEN
                PERFORM pg_notify('{WAKE_CHANNEL}', '{RUN_ENDED}');
            END IF;
        END IF;
        RETURN NEW;
    END
    $$
    """,  # noqa: S608 - the interpolated names are this module's constants
    """
    CREATE OR REPLACE TRIGGER fireflow_workflow_terminal
        AFTER UPDATE OF status ON dbos.workflow_status
        FOR EACH ROW EXECUTE FUNCTION fireflow.notify_workflow_terminal()
    """,
    f"""
    CREATE OR REPLACE FUNCTION fireflow.notify_enqueued() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('{WAKE_CHANNEL}', '{ENQUEUED_PREFIX}' || NEW.queue_name);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE OR REPLACE TRIGGER fireflow_enqueued
        AFTER INSERT ON dbos.workflow_status
        FOR EACH ROW WHEN (NEW.status = 'ENQUEUED' AND NEW.queue_name IS NOT NULL)
        EXECUTE FUNCTION fireflow.notify_enqueued()
    """,
    """
    CREATE OR REPLACE TRIGGER fireflow_reenqueued
        AFTER UPDATE OF status, queue_name ON dbos.workflow_status
        FOR EACH ROW WHEN (NEW.status = 'ENQUEUED' AND NEW.queue_name IS NOT NULL
            AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.queue_name IS DISTINCT FROM NEW.queue_name))
        EXECUTE FUNCTION fireflow.notify_enqueued()
    """,
    f"""
    CREATE OR REPLACE FUNCTION fireflow.notify_queue_changed() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('{WAKE_CHANNEL}', '{QUEUE_CHANGED_PREFIX}' || NEW.name);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE OR REPLACE TRIGGER fireflow_queue_changed
        AFTER INSERT OR UPDATE ON dbos.queues
        FOR EACH ROW EXECUTE FUNCTION fireflow.notify_queue_changed()
    """,
    """
    CREATE OR REPLACE FUNCTION fireflow.copy_workflow_output() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE dbos.workflow_status SET output = NEW.output, error = NEW.error
        WHERE workflow_uuid = NEW.workflow_uuid
          AND (output IS DISTINCT FROM NEW.output OR error IS DISTINCT FROM NEW.error);
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE OR REPLACE TRIGGER fireflow_workflow_output
        AFTER INSERT OR UPDATE OF output, error ON dbos.workflow_output
        FOR EACH ROW EXECUTE FUNCTION fireflow.copy_workflow_output()
    """,
    f"COMMENT ON TRIGGER fireflow_workflow_terminal ON dbos.workflow_status IS '{OBJECTS_VERSION}'",
)


def installed_version(conn: psycopg.Connection[Any]) -> str | None:
    row = conn.execute(
        """
        SELECT obj_description(t.oid, 'pg_trigger')
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'dbos' AND c.relname = 'workflow_status' AND t.tgname = 'fireflow_workflow_terminal'
        """
    ).fetchone()
    return None if row is None else str(row[0])


def install(database_url: str) -> bool:
    """Install the project's objects unless the current version is there; True when it installed them.

    Needs DBOS's schema to exist (the trigger is on `dbos.workflow_status`).
    """
    with psycopg.connect(libpq_url(database_url), connect_timeout=10) as conn:
        return _install_on(conn)


def install_pooled(engine: sa.Engine) -> bool:
    """`install` on a connection of a worker's pool (a worker opens no connection outside DBOS's pool)."""
    pooled = engine.raw_connection()
    try:
        conn: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
        return _install_on(conn)
    finally:
        pooled.close()


def _install_on(conn: psycopg.Connection[Any]) -> bool:
    found = installed_version(conn)
    conn.commit()  # end the read's implicit transaction, so that the one below is real, not a savepoint
    if found == OBJECTS_VERSION:
        return False
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_INSTALL_LOCK_KEY,))
        if installed_version(conn) == OBJECTS_VERSION:
            return False
        for statement in _STATEMENTS:
            conn.execute(statement)
    return True
