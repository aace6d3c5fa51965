"""What each environment variable does, in the words of the configuration reference (pure data).

The names, defaults, types and accepted ranges come from the models themselves (`generate.py`); only the
sentences live here, keyed by variable. The generator refuses a model variable without a sentence and a
sentence without a variable, so a new or removed setting cannot slip past the reference.
"""

from __future__ import annotations

WORKER_ENV: dict[str, str] = {
    "DATABASE_URL_EXECUTIONS": (
        "The executions (DBOS system) database: `postgresql://`, `postgres://` or `postgresql+psycopg://`; the "
        "password in the user info or as `?password=`. Required unless `FIREFLOW_LOCAL_MODE=true`."
    ),
    "FIREFLOW_LOCAL_MODE": "`true` runs on a local SQLite file instead (one worker, no LISTEN/NOTIFY); never implied.",
    "FIREFLOW_LOCAL_SQLITE_PATH": "The SQLite file of local mode.",
    "DBOS_APPLICATION_NAME": (
        "Every process on one database must use the same name; a second name fails at start with a message saying so."
    ),
    "FIREFLOW_APPLICATION_VERSION": (
        "The pinned DBOS application version: DBOS lets only a run's own version recover it, so it must not "
        "change with the code (DBOS's default, a hash of it) or with every release. Change it only for an "
        "incompatible engine change."
    ),
    "FIREFLOW_VERSION_ROLE": (
        "DBOS gives version-less runs to its latest version only. `standalone`: refuse to start, with the "
        "reason, when this version is not the latest (it would take no new run); `claim-latest`: make it the "
        "latest at start (a rollback); `managed`: the operator decides (set on every pod it runs)."
    ),
    "DBOS_WORKER_CONCURRENCY": (
        "Most runs one process executes at once from `fireflow-executions`; half of it (at least 1) for "
        "`fireflow-executions-background`. Per process, whatever the processes per pod: on 2026-12-06 a lower "
        "value cost CPU per run even for flows that wait on nothing (8: 1.13-1.53x, see "
        "[Benchmarks](benchmarks-pure-nodes.md#where-the-rest-goes-2026-12-06))."
    ),
    "DBOS_QUEUE_CONCURRENCY": (
        "Most runs of both execution queues at once across all workers; `0` = no cap (DBOS's `None`: "
        "`SKIP LOCKED` claims, no `COUNT(*)`)."
    ),
    "DBOS_QUEUE_POLLING_INTERVAL_MS": (
        "Polling interval of `fireflow-executions`: the least time between two claims of it by one worker "
        "process (an idle worker claims on notification), and how often DBOS polls it where there is no "
        "LISTEN (local mode, or `FIREFLOW_CLAIM_ON_NOTIFY=false`)."
    ),
    "FIREFLOW_BACKGROUND_QUEUE_POLLING_INTERVAL_MS": (
        "The same for `fireflow-executions-background`; unset = `DBOS_QUEUE_POLLING_INTERVAL_MS`."
    ),
    "FIREFLOW_SANDBOX_QUEUE_POLLING_INTERVAL_MS": (
        "The same for `fireflow-sandbox`; unset = `DBOS_QUEUE_POLLING_INTERVAL_MS`."
    ),
    "FIREFLOW_TERMINAL_QUEUE_POLLING_INTERVAL_MS": (
        "The same for `fireflow-terminal`; unset = `DBOS_QUEUE_POLLING_INTERVAL_MS`."
    ),
    "FIREFLOW_CLAIM_ON_NOTIFY": (
        "Claim runs when an enqueue is notified (plus a safety poll) instead of DBOS polling every queue every "
        "interval; `false` is DBOS's own polling (about 7 statements and 2 commits per queue per interval, idle "
        "or not)."
    ),
    "FIREFLOW_IDLE_POLL_INTERVAL_MS": (
        "The safety poll of each served queue while claiming on notification: what catches a run enqueued with "
        "a delay, or while the database was away."
    ),
    "FIREFLOW_POOL_PRE_PING": (
        "SQLAlchemy's ping before every use of a pooled connection (DBOS's default is on). Off saves one round "
        "trip per database transaction; the price is that the first use of a connection that died with the "
        "database (a restart, a failover) fails once and is retried by DBOS after about a second."
    ),
    "DBOS_SYSTEM_DATABASE_POOL_SIZE": (
        "DBOS's connection pool per worker process. Every connection a worker process holds is one of this pool "
        "or DBOS's LISTEN connection, all named `fireflow-worker:<executor id>` in `pg_stat_activity`: budget "
        "pods x processes x (this + 1) against `max_connections`."
    ),
    "FIREFLOW_WORKER_ID": (
        "The DBOS executor id of process 0; process k ≥ 1 of the pod is "
        "`<FIREFLOW_WORKER_ID>-p<k>`. Launch recovers the PENDING runs stamped with a process's own id. Unset: "
        "`local`, with a warning. Give each pod its own stable id."
    ),
    "FIREFLOW_WORKER_PROCESSES": (
        "Worker processes in the pod: `auto` (unset) = the container's CPU limit rounded up (cgroup v2 "
        "`cpu.max`, v1 `cpu.cfs_quota_us`), 1 without a limit (never the node's CPU count: the connection "
        "budget must not depend on the node a pod lands on)."
    ),
    "DBOS_RUN_MIGRATIONS": "`false` verifies the DBOS schema at launch and refuses to start when it is behind.",
    "DBOS_SHUTDOWN_DRAIN_TIMEOUT_MS": (
        "How long SIGTERM waits for running runs (whole seconds); keep it below the termination grace period."
    ),
    "DBOS_LOG_LEVEL": "Log level, any case.",
    "FIREFLOW_LOG_FORMAT": (
        "`json`: every line of the process (DBOS's included) is one JSON object with `time`, `level`, `logger`, "
        "`message` and what it is about (`namespace`, `executor`, `run_id`, `node`, `trace_id`); `text`: the "
        "same fields on one line. See [Monitoring](monitoring.md#logs)."
    ),
    "FIREFLOW_PROVISION_CACHE_TTL_MS": (
        "How long a worker caches a stored flow resolved by name; `0` switches the cache off."
    ),
    "FIREFLOW_SANDBOX_QUEUE_CONCURRENCY": "Worker concurrency of `fireflow-sandbox`.",
    "FIREFLOW_TERMINAL_QUEUE_CONCURRENCY": "Worker concurrency of `fireflow-terminal`.",
    "FIREFLOW_QUEUES": "Comma-separated queues this process serves (`all` or unset: every queue).",
    "FIREFLOW_HEALTH_HOST": "Address of `/healthz`, `/readyz` and `/metrics`.",
    "FIREFLOW_HEALTH_PORT": "Port of `/healthz`, `/readyz` and `/metrics`.",
    "FIREFLOW_MAX_NODE_OUTPUT_BYTES": (
        "The largest output one node may produce, and the most data its params' references may resolve to."
    ),
    "FIREFLOW_MAX_RUN_OUTPUT_BYTES": (
        "The most a run may store in node outputs, all nodes together; at least the node limit."
    ),
    "FIREFLOW_MAX_PARALLEL_NODES": "How many of one run's nodes execute at once (a durable sleep does not count).",
    "FIREFLOW_MAX_FLOW_NODES": (
        "The most nodes a flow may have; checked before enqueue (with the client's own environment, else this "
        "default) and again on the worker before the run starts."
    ),
    "FIREFLOW_MAX_RECOVERY_ATTEMPTS": (
        "How often a run is recovered after its worker died while running it (DBOS's `max_recovery_attempts`); "
        "past it the run ends `MAX_RECOVERY_ATTEMPTS_EXCEEDED`. Graceful drains do not count."
    ),
}

OPERATOR_ENV: dict[str, str] = {
    "FIREFLOW_OPERATOR_NAMESPACES": "Comma-separated namespaces to watch; empty: every namespace.",
    "FIREFLOW_OPERATOR_POOL_SELECTOR": (
        "Reconcile only pools with all these labels (`key=value,...`; empty: every pool): operators on disjoint "
        "selectors shard a fleet. Every pool of one PostgreSQL server must be in one shard."
    ),
    "FIREFLOW_OPERATOR_METRICS_HOST": "Address of the operator's Prometheus metrics.",
    "FIREFLOW_OPERATOR_METRICS_PORT": (
        "Port of the operator's Prometheus metrics (reconciles, errors, duration, pools by phase, recovered "
        "runs); `0` switches the endpoint off."
    ),
    "FIREFLOW_OPERATOR_HEALTH_HOST": "Address of kopf's liveness endpoint `/healthz`.",
    "FIREFLOW_OPERATOR_HEALTH_PORT": "Port of kopf's liveness endpoint `/healthz`.",
    "FIREFLOW_OPERATOR_WORKER_RESOURCES": "Resources (JSON) of the workers of pools without `spec.resources`.",
    "FIREFLOW_OPERATOR_MIGRATION_RESOURCES": (
        "Resources (JSON) of the migration Jobs of pools without `spec.migration.resources`."
    ),
    "FIREFLOW_OPERATOR_RESYNC_SECONDS": "How often each pool is looked at without a change (writes only on change).",
    "FIREFLOW_OPERATOR_DATABASE_TIMEOUT_SECONDS": "Connect and statement timeout of the operator's database checks.",
    "FIREFLOW_OPERATOR_MIGRATION_RETRY_SECONDS": (
        "First back-off before a failed migration is retried (doubling, at most 10 minutes)."
    ),
    "FIREFLOW_OPERATOR_BUDGET_WINDOW_SECONDS": (
        "Window over which others' connection usage is smoothed (0 = none): a burst shorter than it never "
        "removes a worker."
    ),
    "FIREFLOW_OPERATOR_ALLOWED_SERVICE_ACCOUNTS": "Service accounts pools may name besides `default`.",
    "FIREFLOW_OPERATOR_REQUIRE_SHARED_SECRETS": (
        "Use only Secrets labelled `fireflow.persistent.ai/usable-by-pools=true`."
    ),
    "FIREFLOW_OPERATOR_LOG_LEVEL": "Log level (any case).",
    "FIREFLOW_LOG_FORMAT": (
        "`json`: every line (kopf's included) one JSON object, the lines about a pool carrying `namespace` and "
        "`pool` ([Monitoring](monitoring.md#logs))."
    ),
    "FIREFLOW_OPERATOR_LEADER_ELECTION_NAMESPACE": (
        "Namespace of the leader Lease; empty: no election (one replica). The chart sets the release namespace."
    ),
    "FIREFLOW_OPERATOR_LEASE_NAME": "The leader Lease's name (the chart: `<fullname>-leader`).",
    "FIREFLOW_OPERATOR_LEASE_DURATION_SECONDS": (
        "How long a Lease holds without renewal; 1.2 x retry period < renew deadline < lease duration."
    ),
    "FIREFLOW_OPERATOR_RENEW_DEADLINE_SECONDS": "A leader that could not renew within this gives up the lead.",
    "FIREFLOW_OPERATOR_RETRY_PERIOD_SECONDS": "How often the leader renews and candidates look.",
}
