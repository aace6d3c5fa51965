"""Whether a DBOS schema step can be applied while the previous version keeps serving (pure).

DBOS promises that a library runs on a schema newer than the one it ships, and its migrations are meant to
be additive; this checks each statement of every migration in the step rather than trusting it. A
statement is online-safe when it neither removes or changes what an older release uses (columns, tables,
constraints it writes) nor holds a lock that blocks the workers' writes for longer than a catalog change
(a plain CREATE INDEX on a large table builds under a lock that stops every writer).

The checks read SQL text, so they are conservative: anything not recognised as safe is unsafe, and the
plan Job then says so (the operator falls back to draining the pool for that step).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Tables that stay small (a row per queue, version or schedule): a short lock on them costs nothing.
SMALL_TABLES = {"queues", "application_versions", "workflow_schedules", "event_dispatch_kv", "dbos_migrations"}

_DOLLAR_BODY = re.compile(r"\$\$.*?\$\$", re.DOTALL)
_COMMENT = re.compile(r"--[^\n]*")
_TABLE = r'(?:"?(?:\w+)"?\.)?"?(\w+)"?'

# (pattern, why it is safe); every statement must match one of these, else it is unsafe.
_CREATE_TABLE = re.compile(rf"^CREATE TABLE (IF NOT EXISTS )?{_TABLE}", re.I)
_SAFE: list[tuple[re.Pattern[str], str]] = [
    (_CREATE_TABLE, "a new table"),
    (re.compile(r"^CREATE (UNIQUE )?INDEX CONCURRENTLY ", re.I), "an index built without blocking writes"),
    (re.compile(r"^DROP INDEX CONCURRENTLY ", re.I), "an index dropped without blocking writes"),
    (re.compile(r"^CREATE (OR REPLACE )?FUNCTION ", re.I), "a function (re)defined"),
    (re.compile(r"^(CREATE|DROP) TRIGGER ", re.I), "a trigger: a short lock"),
    (re.compile(r"^ALTER FUNCTION ", re.I), "a function's properties"),
    (re.compile(rf"^ALTER TABLE (IF EXISTS )?{_TABLE} DROP CONSTRAINT ", re.I), "a constraint relaxed"),
    (re.compile(r"^(GRANT|REVOKE|COMMENT ON|CREATE SCHEMA|CREATE EXTENSION) ", re.I), "no lock on data"),
]
_ADD_COLUMN = re.compile(rf"^ALTER TABLE (IF EXISTS )?{_TABLE} ADD COLUMN (IF NOT EXISTS )?(.*)$", re.I | re.S)
_INDEX = re.compile(rf"^CREATE (UNIQUE )?INDEX (IF NOT EXISTS )?\S+ ON {_TABLE}", re.I)
_VOLATILE = re.compile(r"\b(random|gen_random_uuid|clock_timestamp|nextval|uuid_generate_v\d)\s*\(", re.I)
_DROP_FUNCTION = re.compile(r'^DROP FUNCTION (IF EXISTS )?(?:"?\w+"?\.)?"?(\w+)"?', re.I)
_CREATE_FUNCTION = re.compile(r'^CREATE (OR REPLACE )?FUNCTION (?:"?\w+"?\.)?"?(\w+)"?', re.I)


@dataclass(frozen=True)
class Verdict:
    version: int  # the migration's number
    statement: str  # the statement, shortened
    reason: str  # why it is unsafe


def statements(sql: str) -> list[str]:
    """The statements of a migration, function bodies and comments removed, whitespace collapsed."""
    text = _COMMENT.sub("", _DOLLAR_BODY.sub("$$body$$", sql))
    return [" ".join(part.split()) for part in text.split(";") if part.strip()]


def _add_column_problem(table: str, rest: str) -> str | None:
    """ADD COLUMN is a catalog change unless it must rewrite or scan the table."""
    upper = rest.upper()
    if "NOT NULL" in upper and "DEFAULT" not in upper:
        return f"adds a NOT NULL column without a default to {table} (fails on rows, or needs a rewrite)"
    default = re.search(r"DEFAULT (.*)$", rest, re.I | re.S)
    if default and re.search(
        r"\b(random|gen_random_uuid|clock_timestamp|nextval|uuid_generate_v\d)\s*\(", default.group(1), re.I
    ):
        return f"adds a column with a volatile default to {table} (rewrites the table under an exclusive lock)"
    return None


def unsafe_statements(version: int, sql: str) -> list[Verdict]:
    found = []
    parts = statements(sql)
    created = {m.group(2).lower() for p in parts if (m := _CREATE_FUNCTION.match(p))}
    new_tables = {m.group(2).lower() for p in parts if (m := _CREATE_TABLE.match(p))}
    for statement in parts:
        short = statement[:160]
        if any(pattern.match(statement) for pattern, _ in _SAFE):
            continue
        dropped = _DROP_FUNCTION.match(statement)
        if dropped:
            if dropped.group(2).lower() in created:
                continue  # replaced in the same migration with a compatible signature
            found.append(Verdict(version, short, "drops a function an older release may call"))
            continue
        added = _ADD_COLUMN.match(statement)
        if added:
            problem = _add_column_problem(added.group(2), added.group(4))
            if problem:
                found.append(Verdict(version, short, problem))
            continue
        index = _INDEX.match(statement)
        if index and index.group(3).lower() in SMALL_TABLES | new_tables:
            continue  # a small table, or one this migration created: nothing waits on it
        if index:
            found.append(Verdict(version, short, f"builds an index on {index.group(3)} while blocking its writes"))
            continue
        found.append(Verdict(version, short, "not known to be safe while older workers run"))
    return found


def step_verdicts(migrations: list[str], current: int, required: int) -> list[Verdict]:
    """Every unsafe statement of migrations current+1..required (1-based, as DBOS numbers them)."""
    found: list[Verdict] = []
    for version in range(current + 1, required + 1):
        found += unsafe_statements(version, migrations[version - 1])
    return found
