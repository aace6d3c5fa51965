"""The worker process: launch DBOS, register the queues, serve health, drain on SIGTERM.

DBOS installs no SIGTERM handler and `DBOS.destroy` does not stop running workflow threads, so the
interpreter would wait for them at exit. The worker therefore: SIGTERM -> not ready -> `destroy` with the
drain timeout -> flush logs -> `os._exit`. What is still running stays PENDING under this executor id and is
recovered at the next launch with the same id.

Beside DBOS, three threads of the worker's own: the queue-depth sampler, the cancel watcher and the machinery
watchdog (a broken worker -> not ready -> exit 70). All of them use DBOS's pooled engine, whose connections
carry the worker's `application_name`.
"""

from __future__ import annotations

import gc
import importlib.metadata
import logging
import math
import os
import signal
import sys
import threading
import time
from types import FrameType

import sqlalchemy as sa
from dbos import DBOS, DBOSConfig

from fireflow_contract import executor_ids, logformat, queues, telemetry, worker_variables
from fireflow_contract.dburl import SecretMask, mask_logs, redact_url
from fireflow_contract.explain import bind_error, database_error
from fireflow_contract.worker_variables import DATABASE_URL, HEALTH_HOST, HEALTH_PORT
from fireflow_worker import dbos_internals, engine, run_encodings, schema, worker_db
from fireflow_worker.cancellation import CancelWatcher
from fireflow_worker.config import WorkerConfig
from fireflow_worker.dbos_lines import DBOS_START_LINES
from fireflow_worker.dispatcher import Dispatcher
from fireflow_worker.flow_store import ProvisionCache
from fireflow_worker.flows.registry import RegistryError, default_registry
from fireflow_worker.health import HealthServer, HealthState
from fireflow_worker.processes import HEALTH_PORT_FD_ENV
from fireflow_worker.run_limits import RunLimits
from fireflow_worker.sampler import QueueDepthSampler
from fireflow_worker.watchdog import MachineryWatchdog, dbos_probes

log = logging.getLogger("fireflow.worker")

# The exit status of a worker whose machinery broke (EX_SOFTWARE); Kubernetes restarts it.
EXIT_BROKEN = 70
# How often the main thread wakes to run a signal handler Python could not run while it waited.
SIGNAL_CHECK_SECONDS = 0.2
# How long a broken worker stays up answering 503 before it exits, so that probes and logs show why.
BROKEN_GRACE_SECONDS = 2.0


class StartupError(Exception):
    """The worker cannot start; the message is one line for the operator's log."""


def dbos_config(config: WorkerConfig) -> DBOSConfig:
    """The DBOS configuration equivalent to the TypeScript FireFlow execution worker's environment table."""
    return {
        "name": config.application_name,
        "system_database_url": config.system_database_url,
        "sys_db_pool_size": config.pool_size,
        "application_version": config.application_version,
        "executor_id": config.executor_id,
        "run_migrations": config.run_migrations,
        "log_level": config.log_level,
        # Named connections let the operator tell the pool's backends from everyone else's in pg_stat_activity.
        "db_engine_kwargs": {
            "connect_args": {"application_name": executor_ids.connection_name(config.executor_id)},
            # Off by default: the ping is a round trip before every transaction. DBOS retries what fails on
            # a connection that died meanwhile, and SQLAlchemy then replaces the pool's older connections.
            "pool_pre_ping": config.pool_pre_ping,
        },
    }


def register_queues(config: WorkerConfig) -> None:
    """Register every queue; all replicas of an application share these rows (see the DBOS doc)."""
    polling = config.polling_intervals_ms
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
                polling_interval_sec=polling[name] / 1000,
            )
        except Exception as err:
            raise StartupError(_explain(err, config)) from None


def configure_logging(config: WorkerConfig) -> None:
    """The worker's log on stderr in one format (DBOS's lines included), with the database password masked
    in every record.

    Uncaught exceptions of any thread are logged through the same mask instead of printed raw.
    """
    logformat.configure(config.log_level, config.log_format)
    logformat.set_process_context(
        namespace=os.environ.get(worker_variables.POD_NAMESPACE),
        pool=os.environ.get(worker_variables.POOL),
        executor=config.executor_id,
    )
    DBOS_START_LINES.quiet_launch_failures = config.log_level != "DEBUG"
    logging.getLogger("dbos").addFilter(DBOS_START_LINES)
    mask_logs([config.system_database_url])
    sys.excepthook = lambda kind, value, tb: log.critical("uncaught exception", exc_info=(kind, value, tb))
    threading.excepthook = lambda hook: log.error(
        "uncaught exception in thread %s",
        hook.thread.name if hook.thread else "?",
        exc_info=(hook.exc_type, hook.exc_value or hook.exc_type(), hook.exc_traceback),
    )


def run_worker(config: WorkerConfig) -> int:
    """Run until SIGTERM/SIGINT; returns the exit status (the caller exits with it)."""
    configure_logging(config)
    if not _configure_tracing(config):
        return 2
    if config.worker_id is None:
        log.warning(
            "FIREFLOW_WORKER_ID is unset: this worker runs as executor 'local'. Replicas sharing one id re-run "
            "each other's in-flight runs; give each replica its own stable id (e.g. its StatefulSet pod name)."
        )
    if config.local_mode:
        log.warning("local mode: SQLite at %s; fit for one worker, not for replicas", config.local_sqlite_path)
    state = HealthState()
    server = _serve_health(state, config)
    if server is None:
        return 1
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
    sampler = QueueDepthSampler(lambda: _sys_engine(dbos), config.queues)
    sampler.start()
    dispatcher = _start_dispatcher(dbos, config)
    probes = dbos_probes(dbos) + ([dispatcher.problem] if dispatcher is not None else [])
    watchdog = MachineryWatchdog(probes, lambda problem: _exit_broken(state, problem))
    watchdog.start()
    if not stop.is_set():
        state.mark_ready()
        log.info("ready: executor %s serving %s", config.executor_id, ", ".join(config.queues))
    # A timed wait, not `stop.wait()`: a signal delivered to another thread (DBOS's, the watchdog's...) does not
    # interrupt the main thread's lock wait, and Python runs signal handlers only in the main thread.
    while not stop.wait(SIGNAL_CHECK_SECONDS):
        pass
    if dispatcher is not None:
        dispatcher.stop()  # claim nothing more
    watchdog.stopped.set()
    sampler.stopped.set()
    if engine.SETTINGS.cancel_watcher is not None:
        engine.SETTINGS.cancel_watcher.stopped.set()
    drain_seconds = math.ceil(config.drain_timeout_ms / 1000)
    active = len(engine.SETTINGS.active_runs)
    log.info("draining: %d run(s) active, waiting up to %d s", active, drain_seconds)
    DBOS.destroy(workflow_completion_timeout_sec=drain_seconds)
    left = sorted(engine.SETTINGS.active_runs | engine.SETTINGS.interrupted_runs)
    if left:
        log.info("%d run(s) still running stay PENDING for recovery under executor %s", len(left), config.executor_id)
        _refund(config, left)
    log.info("stopped")
    _flush_and_exit(0)
    return 0  # not reached


def _serve_health(state: HealthState, config: WorkerConfig) -> HealthServer | None:
    """The health server, started, its port told to a supervisor; None: the port cannot be bound (said in the
    log, in one sentence)."""
    try:
        server = HealthServer(state, config.health_host, config.health_port).start()
    except OSError as err:
        log.error("cannot start: %s", bind_error(err, config.health_host, config.health_port, HEALTH_HOST, HEALTH_PORT))
        return None
    _tell_supervisor(server.port)
    return server


def _configure_tracing(config: WorkerConfig) -> bool:
    """Spans of runs and nodes, and the log records, over OTLP when the OTEL_* variables ask for them; False:
    they ask for the impossible (said in the log)."""
    attributes = {"fireflow.executor": config.executor_id, "fireflow.application_version": config.application_version}
    try:
        tracing = telemetry.configure_tracing("fireflow-worker", attributes)
        logs = telemetry.configure_log_export(
            "fireflow-worker", attributes, filters=[SecretMask([config.system_database_url])]
        )
    except telemetry.TelemetryError as err:
        log.error("cannot start: %s", err)
        return False
    if tracing:
        log.info("tracing runs and nodes over OTLP/HTTP (OTEL_EXPORTER_OTLP_ENDPOINT)")
    if logs:
        log.info("exporting the log over OTLP/HTTP too (OTEL_LOGS_EXPORTER=otlp)")
    return True


def _refund(config: WorkerConfig, run_ids: list[str]) -> None:
    """A drained run was not killed by its worker: its dispatch must not count towards abandoning it."""
    if config.database_url is None:
        return
    try:
        refunded = worker_db.refund_drained_dispatches(
            config.database_url, executor_ids.connection_name(config.executor_id), config.executor_id, run_ids
        )
    except Exception as err:
        log.warning("cannot return the drained runs' recovery attempts: %s", _one_line(err))
    else:
        log.info("returned the recovery attempt of %d drained run(s)", refunded)


def _flush_and_exit(status: int) -> None:
    telemetry.flush()  # the spans still buffered: os._exit runs no atexit handler
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Running workflow threads would otherwise keep the interpreter alive past the drain.
    os._exit(status)


def _tell_supervisor(health_port: int) -> None:
    """A supervised process says which port its health server bound (see processes.HEALTH_PORT_FD_ENV)."""
    fd = os.environ.pop(HEALTH_PORT_FD_ENV, None)
    if fd:
        with os.fdopen(int(fd), "w") as pipe:
            pipe.write(f"{health_port}\n")


def _exit_broken(state: HealthState, problem: str) -> None:
    """The worker cannot run anything any more: say so on /readyz and in the log, then exit for a restart."""
    state.mark_not_ready(f"broken: {problem}")
    log.critical(
        "the worker's machinery is broken: %s; exiting with status %d so that it is restarted "
        "(its runs stay PENDING and are recovered under the same executor id)",
        problem,
        EXIT_BROKEN,
    )
    time.sleep(BROKEN_GRACE_SECONDS)
    _flush_and_exit(EXIT_BROKEN)


def _sys_engine(dbos: DBOS) -> sa.Engine:
    """DBOS's pooled system-database engine, once launched."""
    return dbos_internals.system_engine(dbos)


def _launch(config: WorkerConfig) -> DBOS:
    try:  # the node types, plugins' too, before the database: a broken one refuses the start, not every run
        default_registry()
    except RegistryError as err:
        raise StartupError(f"{err}; fix or uninstall the package that declares it") from None
    dbos = DBOS(config=dbos_config(config))
    mask_logs([config.system_database_url])  # again: DBOS added its own handlers while constructing
    engine.SETTINGS.limits = RunLimits(
        max_node_output_bytes=config.max_node_output_bytes,
        max_run_output_bytes=config.max_run_output_bytes,
        max_parallel_nodes=config.max_parallel_nodes,
    )
    # Both read through the pool lazily: recovered runs may start as soon as DBOS launches.
    if config.database_url is not None:
        engine.SETTINGS.provision_cache = ProvisionCache(
            lambda name: worker_db.load_flow_definition(_sys_engine(dbos), name),
            config.provision_cache_ttl_ms / 1000,
        )
    watcher = CancelWatcher(lambda run_ids: worker_db.cancelled_among(_sys_engine(dbos), run_ids))
    engine.SETTINGS.cancel_watcher = watcher
    engine.register_workflow(config.max_recovery_attempts)
    # Runs in an encoding other than portable JSON are made portable or ended ERROR when claimed, by DBOS's
    # queue thread too (it claims resumed runs): without that, such a run could stay PENDING for ever.
    if not dbos_internals.route_queue_thread_dispatch(run_encodings.execute_claimed):
        raise StartupError(
            f"the installed dbos {importlib.metadata.version('dbos')} has no dispatch of its queue thread the worker "
            "can route (dbos._queue.execute_dequeued_workflow), so a resumed run enqueued by another SDK could stay "
            "PENDING for ever; install the dbos version this fireflow-pool release pins"
        )
    # Claiming on notification, the worker claims its queues itself; DBOS polls none of them.
    DBOS.listen_queues([] if config.listens_for_work else config.queues)
    try:
        DBOS_START_LINES.claimed_queues = config.queues if config.listens_for_work else []
        DBOS.launch()
    except Exception as err:
        raise StartupError(_explain(err, config)) from None
    watcher.start()
    try:
        _settle_latest_version(config)
    except StartupError:
        raise
    except Exception as err:
        raise StartupError(_explain(err, config)) from None
    if config.database_url is not None:
        try:
            schema.install_pooled(_sys_engine(dbos))
        except Exception as err:
            raise StartupError(f"cannot install the run-end trigger and flows table: {_explain(err, config)}") from None
    register_queues(config)
    # What start-up loaded (modules, DBOS, SQLAlchemy, the schemas) lives as long as the worker: out of the
    # collector's sight, the full collections that runs' garbage triggers do not walk it again each time.
    gc.freeze()
    return dbos


def _settle_latest_version(config: WorkerConfig) -> None:
    """A worker whose version is not DBOS's latest takes no version-less run: make it the latest, or refuse."""
    latest = str(DBOS.get_latest_application_version()["version_name"])
    mine = config.application_version
    if latest == mine or config.version_role == worker_variables.VERSION_ROLE_MANAGED:
        return
    if config.version_role == "claim-latest":
        DBOS.set_latest_application_version(mine)
        log.info("application version %r is now DBOS's latest (was %r): new runs come to this version", mine, latest)
        return
    raise StartupError(
        f"application version {mine!r} is not DBOS's latest ({latest!r}) on this database: this worker would take "
        f"no new run. Run version {latest!r}, or set FIREFLOW_VERSION_ROLE=claim-latest to make {mine!r} the latest "
        f"(a rollback)"
    )


def _start_dispatcher(dbos: DBOS, config: WorkerConfig) -> Dispatcher | None:
    """The claimers of the served queues, woken by the enqueue notifications (see dispatcher.py)."""
    if not config.listens_for_work:
        return None
    dispatcher = Dispatcher(dbos, config.queues, config.idle_poll_interval_ms / 1000)
    engine.SETTINGS.on_run_started = dispatcher.run_started
    engine.SETTINGS.on_run_ended = dispatcher.run_ended
    return dispatcher.start()


def _one_line(err: BaseException) -> str:
    return " ".join((str(err) or type(err).__name__).split())


def _explain(err: BaseException, config: WorkerConfig) -> str:
    """What to do when it is the two-application-names mistake, else one sentence for what the database
    said, else DBOS's message."""
    message = _one_line(err)
    if "already registered by application" in message:
        return (
            f"another application already uses this database; every worker on one database must use the same "
            f"DBOS_APPLICATION_NAME (this worker has {config.application_name!r}). DBOS: {message}"
        )
    return database_error(err, config.system_database_url, DATABASE_URL) or message
