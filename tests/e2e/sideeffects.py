"""The `python` node's callable in the e2e scenarios (the pools allow this module through
FIREFLOW_PYTHON_NODE_MODULES).

Each call inserts one row into `e2e_trace` in the pool's own database: the worker reaches it through
DATABASE_URL_EXECUTIONS, which the operator gives every worker, so this works the same from a local process
on the process node and from a container in kind. The insert commits on its own connection, outside DBOS's
bookkeeping: a node body that ran twice leaves two rows. Imports nothing of the repository, so the kind
mode can copy this one file into a worker image.
"""

from __future__ import annotations

import os

import psycopg

CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS public.e2e_trace ("
    " run_key text NOT NULL, label text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())"
)


def record(key: str, label: str) -> dict[str, str]:
    """Leave one trace row for (key, label); the table is created by the test beforehand."""
    with psycopg.connect(os.environ["DATABASE_URL_EXECUTIONS"], autocommit=True, connect_timeout=10) as conn:
        conn.execute("INSERT INTO public.e2e_trace (run_key, label) VALUES (%s, %s)", (key, label))
    return {"recorded": label}
