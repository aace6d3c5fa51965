"""Which DBOS schema steps can be applied while older workers keep serving (pure, against the pinned DBOS)."""

from __future__ import annotations

import pytest

from fireflow_worker import migrate
from fireflow_worker.migration_safety import statements, step_verdicts, unsafe_statements


def test_should_find_every_step_of_the_pinned_dbos_from_schema_50_online_safe() -> None:
    migrations = migrate.dbos_migrations()
    for start in range(50, len(migrations)):
        assert step_verdicts(migrations, start, len(migrations)) == [], f"from schema {start}"


def test_should_find_the_early_blocking_steps_of_the_pinned_dbos() -> None:
    verdicts = step_verdicts(migrate.dbos_migrations(), 0, 50)
    reasons = {v.version: v.reason for v in verdicts}
    assert reasons[3] == "builds an index on workflow_status while blocking its writes"
    assert reasons[43] == "drops a function an older release may call"


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ('ALTER TABLE "dbos"."workflow_status" DROP COLUMN "x"', "not known to be safe"),
        ('ALTER TABLE "dbos"."workflow_status" RENAME COLUMN "a" TO "b"', "not known to be safe"),
        ('ALTER TABLE "dbos"."workflow_status" ALTER COLUMN "a" TYPE BIGINT', "not known to be safe"),
        ('ALTER TABLE "dbos"."operation_outputs" ADD COLUMN "n" INT NOT NULL', "NOT NULL column without a default"),
        ('ALTER TABLE "dbos"."operation_outputs" ADD COLUMN "u" TEXT DEFAULT gen_random_uuid()', "volatile default"),
        ('CREATE INDEX "i" ON "dbos"."workflow_status" ("a")', "builds an index on workflow_status"),
        ('DROP FUNCTION "dbos".enqueue_workflow(TEXT)', "drops a function"),
        ('DROP TABLE "dbos"."notifications"', "not known to be safe"),
    ],
)
def test_should_call_unsafe_what_blocks_or_breaks_older_workers(sql: str, reason: str) -> None:
    (verdict,) = unsafe_statements(7, sql)
    assert verdict.version == 7 and reason in verdict.reason


@pytest.mark.parametrize(
    "sql",
    [
        'ALTER TABLE "dbos"."queues" ADD COLUMN IF NOT EXISTS "x" INT4 DEFAULT NULL',
        'ALTER TABLE "dbos"."operation_outputs" ADD COLUMN "t" BIGINT NOT NULL DEFAULT (EXTRACT(epoch FROM now()))',
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS "i" ON "dbos"."workflow_status" ("a")',
        'CREATE INDEX "i" ON "dbos"."application_versions" ("a")',  # a small table
        'CREATE TABLE "dbos"."t" (a INT); CREATE INDEX "i" ON "dbos"."t" (a)',  # a table this step made
        'DROP FUNCTION IF EXISTS "dbos".f(INT); CREATE OR REPLACE FUNCTION "dbos".f(a INT, b INT DEFAULT 0) '
        "RETURNS INT AS $$ BEGIN DROP TABLE x; RETURN a; END; $$ LANGUAGE plpgsql",  # a body is not a statement
        'ALTER TABLE "dbos"."operation_outputs" DROP CONSTRAINT IF EXISTS "fk"',
    ],
)
def test_should_call_safe_what_older_workers_do_not_notice(sql: str) -> None:
    assert unsafe_statements(1, sql) == []


def test_should_split_statements_outside_function_bodies_and_comments() -> None:
    sql = "-- a comment; with a semicolon\nCREATE FUNCTION f() AS $$ SELECT 1; SELECT 2; $$;\nSELECT 3;"
    assert statements(sql) == ["CREATE FUNCTION f() AS $$body$$", "SELECT 3"]
