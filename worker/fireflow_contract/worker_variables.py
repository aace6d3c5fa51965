"""The environment the operator gives a worker container, by the names the worker reads (pure).

The names are the TypeScript FireFlow execution worker's where it has one (its README's env table is the
configuration contract), FireFlow's own otherwise. `RESERVED` is every variable a pool's `spec.env` may not
set: what the operator sets, the aliases the worker also reads for them, and the switches that would take a
worker off the pool's database.
"""

from __future__ import annotations

from typing import Final

DATABASE_URL: Final = "DATABASE_URL_EXECUTIONS"
WORKER_ID: Final = "FIREFLOW_WORKER_ID"
WORKER_ID_ALIAS: Final = "DBOS__VMID"  # DBOS's own name for the executor id, read when WORKER_ID is unset
POD_NAME: Final = "POD_NAME"
POD_NAMESPACE: Final = "POD_NAMESPACE"
RUN_MIGRATIONS: Final = "DBOS_RUN_MIGRATIONS"
APPLICATION_NAME: Final = "DBOS_APPLICATION_NAME"
APPLICATION_VERSION: Final = "FIREFLOW_APPLICATION_VERSION"
APPLICATION_VERSION_ALIAS: Final = "DBOS__APPVERSION"
WORKER_CONCURRENCY: Final = "DBOS_WORKER_CONCURRENCY"
QUEUE_CONCURRENCY: Final = "DBOS_QUEUE_CONCURRENCY"
POLLING_INTERVAL_MS: Final = "DBOS_QUEUE_POLLING_INTERVAL_MS"
POOL_SIZE: Final = "DBOS_SYSTEM_DATABASE_POOL_SIZE"
DRAIN_TIMEOUT_MS: Final = "DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS"
LOG_LEVEL: Final = "DBOS_LOG_LEVEL"
PROVISION_CACHE_TTL_MS: Final = "FIREFLOW_PROVISION_CACHE_TTL_MS"
SANDBOX_CONCURRENCY: Final = "FIREFLOW_SANDBOX_QUEUE_CONCURRENCY"
TERMINAL_CONCURRENCY: Final = "FIREFLOW_TERMINAL_QUEUE_CONCURRENCY"
QUEUES: Final = "FIREFLOW_QUEUES"
HEALTH_HOST: Final = "FIREFLOW_HEALTH_HOST"
HEALTH_PORT: Final = "FIREFLOW_HEALTH_PORT"
LOCAL_MODE: Final = "FIREFLOW_LOCAL_MODE"
LOCAL_SQLITE_PATH: Final = "FIREFLOW_LOCAL_SQLITE_PATH"
CONNECTION_NAME: Final = "PGAPPNAME"  # the worker names its own connections (executor_ids.connection_name)
VERSION_ROLE: Final = "FIREFLOW_VERSION_ROLE"
VERSION_ROLE_MANAGED: Final = "managed"  # the operator decides which application version is DBOS's latest
PROCESSES: Final = "FIREFLOW_WORKER_PROCESSES"
POOL: Final = "FIREFLOW_POOL"  # the pool's name: the `pool` field of the worker's log lines

RESERVED: tuple[str, ...] = (
    DATABASE_URL,
    WORKER_ID,
    WORKER_ID_ALIAS,
    POD_NAME,
    POD_NAMESPACE,
    RUN_MIGRATIONS,
    APPLICATION_NAME,
    APPLICATION_VERSION,
    APPLICATION_VERSION_ALIAS,
    WORKER_CONCURRENCY,
    QUEUE_CONCURRENCY,
    POLLING_INTERVAL_MS,
    POOL_SIZE,
    DRAIN_TIMEOUT_MS,
    LOG_LEVEL,
    PROVISION_CACHE_TTL_MS,
    SANDBOX_CONCURRENCY,
    TERMINAL_CONCURRENCY,
    QUEUES,
    HEALTH_HOST,
    HEALTH_PORT,
    LOCAL_MODE,
    LOCAL_SQLITE_PATH,
    CONNECTION_NAME,
    VERSION_ROLE,
    PROCESSES,
    POOL,
)
