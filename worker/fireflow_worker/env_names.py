"""Unknown `FIREFLOW_*` and `DBOS_*` variables in the worker's environment, each with the nearest known name
(pure): a misspelt setting is otherwise ignored without a word and its default silently used.

Known: every variable the worker reads (its configuration's names), and those that other programs sharing
its environment read and the worker ignores on purpose (DBOS itself, the supervisor and its processes, the
operator's pod, the migration Job, the client, the embedded PostgreSQL, the project's test and CI tools).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from fireflow_contract import worker_variables
from fireflow_contract.logformat import LOG_FORMAT_ENV
from fireflow_contract.variable_names import nearest
from fireflow_worker.processes import HEALTH_PORT_FD_ENV, SUPERVISOR_PID_ENV

PREFIXES = ("FIREFLOW_", "DBOS_")
# Read by the worker outside its configuration model.
WORKER_ELSEWHERE = frozenset({"FIREFLOW_PYTHON_NODE_MODULES", LOG_FORMAT_ENV})
OTHER_PROGRAMS = frozenset(
    {
        # DBOS (3.4.0) reads these itself.
        worker_variables.WORKER_ID_ALIAS,
        worker_variables.APPLICATION_VERSION_ALIAS,
        "DBOS__APPID",
        "DBOS__CLOUD",
        "DBOS__CONDUCTOR_APP_NAME",
        "DBOS__CONDUCTOR_KEY",
        "DBOS__CONDUCTOR_URL",
        "DBOS__OTLP_LOGS_ENDPOINT",
        "DBOS__OTLP_TRACES_ENDPOINT",
        "DBOS_DOMAIN",
        "DBOS_DATABASE_URL",
        "DBOS_SYSTEM_DATABASE_URL",
        "DBOS_APP_NAME",
        # The supervisor and its worker processes; the pool's pod; `fireflow-worker migrate`.
        SUPERVISOR_PID_ENV,
        HEALTH_PORT_FD_ENV,
        worker_variables.POOL,
        "FIREFLOW_TERMINATION_LOG",
        "FIREFLOW_MIGRATION_LOCK_TIMEOUT_MS",
        "FIREFLOW_MIGRATION_RETRIES",
        # The embedded PostgreSQL, the TypeScript interop, the test images and CI.
        "FIREFLOW_POSTGRES_DIR",
        "FIREFLOW_CACHE_DIR",
        "FIREFLOW_TOOLS_DIR",
        "FIREFLOW_IMAGE_BASE",
        "FIREFLOW_DOCKER_HELD",
        "FIREFLOW_REAL_WORKER",
        "FIREFLOW_DBOS_SDK",
        "FIREFLOW_TERMINATION_MESSAGE_PATH",
        "FIREFLOW_DATABASE_URL",
        "FIREFLOW_SEQUENCES",
    }
)
# Whole families of other programs' settings: the operator's and the test harness's.
OTHER_PREFIXES = ("FIREFLOW_OPERATOR_", "FIREFLOW_TEST_")


def unknown_variable_warnings(environ: Mapping[str, str], read: Iterable[str]) -> list[str]:
    """One line per unknown variable of the worker's families in `environ`; `read`: the names the worker reads."""
    readable = set(read) | set(worker_variables.RESERVED) | WORKER_ELSEWHERE
    known = readable | OTHER_PROGRAMS
    lines = []
    for name in sorted(environ):
        if not name.startswith(PREFIXES) or name in known or name.startswith(OTHER_PREFIXES):
            continue
        guess = nearest(name, readable)
        fix = f"did you mean {guess}?" if guess else "check its spelling against the README's table of variables"
        lines.append(f"{name} is not a variable the worker reads and is ignored: {fix}")
    return lines
