"""The worker process: launch DBOS, register the queues, serve health, drain on SIGTERM.

DBOS installs no SIGTERM handler and `DBOS.destroy` does not stop running workflow threads, so the
interpreter would wait for them at exit. The worker therefore: SIGTERM -> not ready -> `destroy` with the
drain timeout -> flush logs -> `os._exit`. What is still running stays PENDING under this executor id and is
recovered at the next launch with the same id.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import threading
from types import FrameType

from dbos import DBOS, DBOSConfig

from fireflow_worker import engine, metrics, queues, schema
from fireflow_worker.config import WorkerConfig
from fireflow_worker.dburl import redact_url
from fireflow_worker.flow_store import ProvisionCache, load_flow_definition
from fireflow_worker.health import HealthServer, HealthState

log = logging.getLogger("fireflow.worker")

QUEUE_DEPTH_SAMPLE_SECONDS = 5.0
WORKER_CONNECTION_PREFIX = "fireflow-worker:"


class StartupError(Exception):
    """The worker cannot start; the message is one line for the operator's log."""


def dbos_config(config: WorkerConfig) -> DBOSConfig:
    """The DBOS configuration equivalent to the seed's environment table."""
    return {
        "name": config.application_name,
        "system_database_url": config.system_database_url,
        "sys_db_pool_size": config.pool_size,
        "application_version": config.application_version,
        "executor_id": config.executor_id,
        "run_migrations": config.run_migrations,
        "log_level": config.log_level,
        # Named connections let the operator tell the pool's backends from everyone else's in pg_stat_activity.
        "db_engine_kwargs": {"connect_args": {"application_name": connection_application_name(config.executor_id)}},
    }


def connection_application_name(executor_id: str) -> str:
    """The PostgreSQL `application_name` of a worker's connections (the server keeps 63 bytes)."""
    return f"{WORKER_CONNECTION_PREFIX}{executor_id}"[:63]


def register_queues(config: WorkerConfig) -> None:
    """Register every queue; all replicas of an application share these rows (see the DBOS doc)."""
    polling = config.polling_interval_ms / 1000
    sizes = {
        queues.EXECUTIONS: (config.worker_concurrency, config.global_concurrency),
        queues.BACKGROUND: (config.background_concurrency, config.global_concurrency),
        queues.SANDBOX: (config.sandbox_concurrency, None),
        queues.TERMINAL: (config.terminal_concurrency, None),
    }
    for name, (worker_concurrency, global_concurrency) in sizes.items():
        try:
            DBOS.register_queue(
                name,
                worker_concurrency=worker_concurrency,
                global_concurrency=global_concurrency,
                polling_interval_sec=polling,
            )
        except Exception as err:
            raise StartupError(_explain(err, config)) from None


class QueueDepthSampler(threading.Thread):
    """Samples ENQUEUED/PENDING counts per queue into a gauge, off the request path of /metrics."""

    def __init__(self, dbos: DBOS, served: list[str]) -> None:
        super().__init__(name="queue-depth", daemon=True)
        self._dbos = dbos
        self._served = served
        self.stopped = threading.Event()

    def run(self) -> None:
        import sqlalchemy as sa  # noqa: PLC0415 - DBOS's own dependency

        # DBOS's pooled engine (a private attribute of the pinned version) avoids one more connection.
        engine_ = self._dbos._sys_db.engine
        table = "dbos.workflow_status" if engine_.dialect.name == "postgresql" else "workflow_status"
        query = sa.text(
            f"SELECT queue_name, status, count(*) FROM {table} "  # noqa: S608 - constant table name
            "WHERE queue_name IS NOT NULL AND status IN ('ENQUEUED', 'PENDING') GROUP BY queue_name, status"
        )
        while True:
            try:
                with engine_.connect() as conn:
                    counts = {(row[0], row[1]): int(row[2]) for row in conn.execute(query)}
            except Exception:
                metrics.QUEUE_DEPTH_SAMPLE_ERRORS.inc()
            else:
                for name in self._served:
                    for status in ("ENQUEUED", "PENDING"):
                        metrics.QUEUE_DEPTH.labels(name, status).set(counts.get((name, status), 0))
            if self.stopped.wait(QUEUE_DEPTH_SAMPLE_SECONDS):
                return


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run_worker(config: WorkerConfig) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status (the caller exits with it)."""
    configure_logging(config.log_level)
    if config.worker_id is None:
        log.warning(
            "FIREFLOW_WORKER_ID is unset: this worker runs as executor 'local'. Replicas sharing one id re-run "
            "each other's in-flight runs; give each replica its own stable id (e.g. its StatefulSet pod name)."
        )
    if config.local_mode:
        log.warning("local mode: SQLite at %s; fit for one worker, not for replicas", config.local_sqlite_path)
    state = HealthState()
    server = HealthServer(state, config.health_host, config.health_port).start()
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: draining", signal.Signals(signum).name)
        state.mark_not_ready("draining")
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info(
        "starting worker %s (app %s, version %s) on %s, queues %s, health on port %d",
        config.executor_id,
        config.application_name,
        config.application_version,
        redact_url(config.system_database_url),
        ",".join(config.queues),
        server.port,
    )
    try:
        dbos = _launch(config)
    except StartupError as err:
        log.error("cannot start: %s", err)
        server.stop()
        return 1
    sampler = QueueDepthSampler(dbos, config.queues)
    sampler.start()
    if not stop.is_set():
        state.mark_ready()
        log.info("ready: executor %s serving %s", config.executor_id, ", ".join(config.queues))
    stop.wait()
    sampler.stopped.set()
    drain_seconds = math.ceil(config.drain_timeout_ms / 1000)
    active = len(engine.SETTINGS.active_runs)
    log.info("draining: %d run(s) active, waiting up to %d s", active, drain_seconds)
    DBOS.destroy(workflow_completion_timeout_sec=drain_seconds)
    left = len(engine.SETTINGS.active_runs | engine.SETTINGS.interrupted_runs)
    if left:
        log.info("%d run(s) still running stay PENDING for recovery under executor %s", left, config.executor_id)
    log.info("stopped")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Running workflow threads would otherwise keep the interpreter alive past the drain.
    os._exit(0)


def _launch(config: WorkerConfig) -> DBOS:
    engine.SETTINGS.provision_cache = (
        None
        if config.database_url is None
        else ProvisionCache(
            lambda name: load_flow_definition(config.system_database_url, name),
            config.provision_cache_ttl_ms / 1000,
        )
    )
    dbos = DBOS(config=dbos_config(config))
    DBOS.listen_queues(config.queues)
    try:
        DBOS.launch()
    except Exception as err:
        raise StartupError(_explain(err, config)) from None
    if config.database_url is not None:
        try:
            schema.install(config.database_url)
        except Exception as err:
            raise StartupError(f"cannot install the run-end trigger and flows table: {_one_line(err)}") from None
    register_queues(config)
    return dbos


def _one_line(err: BaseException) -> str:
    return " ".join((str(err) or type(err).__name__).split())


def _explain(err: BaseException, config: WorkerConfig) -> str:
    """DBOS's message, led by what to do when it is the two-application-names mistake."""
    message = _one_line(err)
    if "already registered by application" in message:
        return (
            f"another application already uses this database; every worker on one database must use the same "
            f"DBOS_APPLICATION_NAME (this worker has {config.application_name!r}). DBOS: {message}"
        )
    return message
