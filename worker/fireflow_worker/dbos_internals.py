"""Every use of DBOS's private API, in one module (I/O).

The worker claims and dispatches runs itself (`dispatcher`), makes a claimed run readable before DBOS runs it
(`run_encodings`), watches DBOS's own threads (`watchdog`), shares DBOS's pooled engine (`runtime`,
`worker_db`), reads the SQL of DBOS's migrations (`migrate`) and also runs on dbos 3.3 (`dbos_compat`): each
needs something DBOS keeps private. All of it is here and nowhere else - the import-linter contract "DBOS's
private modules" in pyproject.toml refuses an import of `dbos._...` from any other module of ours.

The protocols below state the signatures we rely on; mypy checks DBOS's own annotations against them where the
DBOS objects are bound to them (`_private`, `_system_database`, the typed names at the end), and
`tests/unit/test_dbos_internals.py` records the installed signatures and fails, naming what changed, when the
installed dbos differs. Everything here was read in the source of the pinned dbos 3.4.0 (the names also exist
in 3.3.0, which the upgrade e2e builds the worker on); when the pin moves, re-check this module and nothing else.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from dbos import (
    DBOS,
    Queue,
    Serializer,
    StepOptions,
    WorkflowHandle,
    _context,
    _core,
    _dbos,
    _migration,
    _queue,
    _serialization,
    _utils,
)
from dbos._sys_db import WorkflowStatusInternal

if TYPE_CHECKING:
    import sqlalchemy as sa

# A claimed run's status row as DBOS reads it (`dbos._sys_db.WorkflowStatusInternal`, a TypedDict).
ClaimedRun = WorkflowStatusInternal
# (workflow id or payload, topic, shard key): what DBOS's listener keeps beside a waiter (`WaiterComponents`).
WaiterComponents = tuple[str, str, str | None]


class _NotificationWaiters(Protocol):
    """`SystemDatabase.notifications_map` (a `ThreadSafeEventDict`)."""

    def add(self, key: str, event: _utils.LoopAwareEvent, components: WaiterComponents) -> None: ...

    def pop(self, key: str, event: _utils.LoopAwareEvent) -> None: ...


class _SystemDatabase(Protocol):
    """What the worker uses of `dbos._sys_db.SystemDatabase` (a launched DBOS's `_sys_db`)."""

    @property
    def engine(self) -> sa.Engine: ...

    @property
    def notifications_map(self) -> _NotificationWaiters: ...

    @property
    def _listener_thread_lock(self) -> AbstractContextManager[bool]: ...

    def get_queue(self, name: str) -> Queue | None: ...

    def start_queued_workflows(
        self,
        queue: Queue,
        executor_id: str,
        app_version: str,
        queue_partition_key: str | None,
        local_running_count: int = 0,
        *,
        owner_xid: str | None = None,
    ) -> tuple[list[str], str | None]: ...

    def get_workflow_statuses(self, workflow_ids: list[str]) -> list[ClaimedRun]: ...

    def get_workflow_status(self, workflow_uuid: str) -> ClaimedRun | None: ...

    def update_workflow_outcome(
        self, workflow_id: str, status: Literal["ERROR"], *, error: str | None = None, owner_xid: str | None = None
    ) -> bool: ...


class _InvokeStep(Protocol):
    """`dbos._core.invoke_step`."""

    def __call__(
        self,
        dbos: DBOS,
        step_ctx: _context.DBOSContext,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        step_name: str,
        retries_allowed: bool,
        interval_seconds: float,
        max_attempts: int,
        backoff_rate: float,
        should_retry: Callable[[BaseException], bool | Awaitable[bool]] | None = None,
        preemptible: bool = False,
        timeout_seconds: float | None = None,
    ) -> Any: ...


class _GetMigrations(Protocol):
    """`dbos._migration.get_dbos_migrations`."""

    def __call__(self, schema: str, use_listen_notify: bool) -> list[str]: ...


class _ActiveWorkflows(Protocol):
    """`dbos._core.ActiveWorkflowById`: the workflows running in this process."""

    def count_for_queue(self, queue_name: str) -> int: ...


class _BackgroundLoop(Protocol):
    """`dbos._event_loop.BackgroundEventLoop`: DBOS's own event loop and the thread that runs it."""

    @property
    def _loop(self) -> asyncio.AbstractEventLoop | None: ...

    @property
    def _thread(self) -> threading.Thread | None: ...


class _DbosPrivate(Protocol):
    """The private attributes of a `DBOS` instance (`dbos._dbos.DBOS.__init__`, `_sys_db` a property)."""

    @property
    def _sys_db(self) -> _SystemDatabase: ...

    @property
    def _active_workflows_set(self) -> _ActiveWorkflows: ...

    @property
    def _background_event_loop(self) -> _BackgroundLoop: ...

    @property
    def _background_threads(self) -> list[threading.Thread]: ...

    @property
    def _executor_field(self) -> ThreadPoolExecutor | None: ...


def _private(dbos: DBOS) -> _DbosPrivate:
    return dbos  # mypy checks here that DBOS still has every attribute above, with these types


def _system_database(dbos: DBOS) -> _SystemDatabase:
    return _private(dbos)._sys_db


# The instance: the worker creates one DBOS per process.


def instance() -> DBOS:
    """The process's DBOS (`dbos._dbos._get_dbos_instance`; it raises when none was created): for code that
    runs inside DBOS's workflows and is handed no instance."""
    return _dbos._get_dbos_instance()


def system_engine(dbos: DBOS) -> sa.Engine:
    """DBOS's pooled SQLAlchemy engine of the system database (`DBOS._sys_db.engine`): the worker's own reads
    and writes share DBOS's pool (`DBOS_SYSTEM_DATABASE_POOL_SIZE`) instead of opening connections of their
    own. Only once launched (`_sys_db` raises before)."""
    return _system_database(dbos).engine


# The worker's own machinery, for the watchdog.


def event_loop(dbos: DBOS) -> tuple[asyncio.AbstractEventLoop | None, threading.Thread | None]:
    """DBOS's background event loop and its thread (`DBOS._background_event_loop._loop` and `._thread`): when
    that loop stops, no async step of any run makes progress."""
    loop = _private(dbos)._background_event_loop
    return loop._loop, loop._thread


def thread_pool(dbos: DBOS) -> ThreadPoolExecutor | None:
    """DBOS's thread pool (`DBOS._executor_field`, None before launch and after destroy; the `_executor`
    property would raise instead): every run and step is started on it."""
    return _private(dbos)._executor_field


def queue_threads(dbos: DBOS) -> list[threading.Thread]:
    """DBOS's queue threads (`DBOS._background_threads` whose target is `dbos._queue.queue_thread`): polling
    queues (local mode, or FIREFLOW_CLAIM_ON_NOTIFY=false), no run is claimed once they died."""
    return [t for t in _private(dbos)._background_threads if getattr(t, "_target", None) is _queue.queue_thread]


# Claiming and dispatching (dispatcher.py claims on notification what DBOS's queue thread would claim by polling).


@dataclass(frozen=True)
class LoadedQueue:
    """A queue's row as DBOS loaded it, with the limits DBOS's queue thread reads from its cached private fields
    (`Queue._worker_concurrency`, `Queue._polling_interval_sec`): the public properties would read the row again."""

    queue: Queue
    worker_concurrency: int | None
    polling_interval_sec: float


def load_queue(dbos: DBOS, name: str) -> LoadedQueue | None:
    """The queue's row (`SystemDatabase.get_queue`, as DBOS's queue thread reloads it); None: not registered."""
    queue = _system_database(dbos).get_queue(name)
    if queue is None:
        return None
    return LoadedQueue(queue, queue._worker_concurrency, queue._polling_interval_sec)


def running_on_queue(dbos: DBOS, queue_name: str) -> int:
    """The runs of the queue running in this process (`DBOS._active_workflows_set.count_for_queue`): the
    worker concurrency left, as DBOS's queue thread counts it."""
    return _private(dbos)._active_workflows_set.count_for_queue(queue_name)


def new_owner_xid() -> str:
    """A new claim's owner id (`dbos._utils.generate_uuid`, as DBOS's queue thread draws it per poll): DBOS
    writes it on the claimed rows and every later write of this dispatch must name it."""
    return _utils.generate_uuid()


def claim(dbos: DBOS, loaded: LoadedQueue, running: int, owner_xid: str) -> tuple[list[str], str | None]:
    """Claim the queue's next runs for this executor and version, exactly as DBOS's queue thread does for a queue
    without partitions (`SystemDatabase.start_queued_workflows(queue, executor_id, app_version, None, running,
    owner_xid=...)`): the ids claimed, and the limit that left no room (None: every limit had room)."""
    return _system_database(dbos).start_queued_workflows(
        loaded.queue, DBOS.executor_id, DBOS.application_version, None, running, owner_xid=owner_xid
    )


def claimed_runs(dbos: DBOS, run_ids: list[str]) -> dict[str, ClaimedRun]:
    """The status rows of claimed runs, by id, in one round trip (`SystemDatabase.get_workflow_statuses`)."""
    return {status["workflow_uuid"]: status for status in _system_database(dbos).get_workflow_statuses(run_ids)}


def claimed_run(dbos: DBOS, run_id: str) -> ClaimedRun | None:
    """One claimed run's status row (`SystemDatabase.get_workflow_status`): DBOS's fallback when the batch
    read missed it."""
    return _system_database(dbos).get_workflow_status(run_id)


def execute_dequeued(dbos: DBOS, status: ClaimedRun, owner_xid: str) -> WorkflowHandle[Any]:
    """Run a claimed run from its status row (`dbos._core.execute_dequeued_workflow`), DBOS's own dispatch."""
    return _execute_dequeued_workflow(dbos, status, owner_xid)


def route_queue_thread_dispatch(execute_claimed: Callable[[DBOS, ClaimedRun, str], Any]) -> bool:
    """Have DBOS's own queue thread (polling) dispatch what it claims through `execute_claimed`, as the worker's
    claimers do: `dbos._queue` holds its own reference to `execute_dequeued_workflow`, which its queue worker
    threads call, and it is replaced. False where it has none."""
    if not hasattr(_queue, "execute_dequeued_workflow"):
        return False
    _queue.execute_dequeued_workflow = execute_claimed
    return True


def pickled_arguments(text: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A workflow's arguments stored in DBOS-py's pickle (`py_pickle`), as DBOS itself reads them
    (`dbos._serialization.deserialize_args` with `DBOSDefaultSerializer`): (positional, named)."""
    inputs = _deserialize_args(text, _PICKLE.name(), _PICKLE)
    return tuple(inputs["args"]), dict(inputs["kwargs"])


def end_claimed_run(dbos: DBOS, run_id: str, error: str, owner_xid: str) -> bool:
    """End a run this claim holds ERROR with `error`, already encoded (`SystemDatabase.update_workflow_outcome`
    with `owner_xid`: no write when the run is no longer this claim's); whether it was written."""
    return _system_database(dbos).update_workflow_outcome(run_id, "ERROR", error=error, owner_xid=owner_xid)


# Notifications through DBOS's LISTEN connection.


class NotificationCallback(_utils.LoopAwareEvent):
    """A waiter DBOS's listener sets (`dbos._utils.LoopAwareEvent`, whose `set` it calls when a notification's
    payload is the waiter's key): here a call, never an event anyone waits on."""

    def __init__(self, callback: Callable[[], None]) -> None:
        super().__init__()
        self._callback = callback

    def set(self) -> None:
        self._callback()


def listen(dbos: DBOS, key: str, callback: Callable[[], None]) -> NotificationCallback:
    """Have DBOS's listener call `callback` on every notification whose payload is `key`, on DBOS's channel
    (`SystemDatabase.notifications_map.add`): no connection of our own."""
    waiter = NotificationCallback(callback)
    _system_database(dbos).notifications_map.add(key, waiter, (key, "", None))
    return waiter


def unlisten(dbos: DBOS, key: str, waiter: NotificationCallback) -> None:
    """Undo `listen` (`SystemDatabase.notifications_map.pop`)."""
    _system_database(dbos).notifications_map.pop(key, waiter)


def listener_connection(dbos: DBOS) -> object | None:
    """DBOS's LISTEN connection (`PostgresSystemDatabase.notification_conn`; none on SQLite): a new object
    after it reconnected, when what was notified meanwhile is lost."""
    return getattr(_system_database(dbos), "notification_conn", None)


def wait_until_listening(dbos: DBOS) -> None:
    """Return once DBOS's listener ran its LISTEN statements on its current connection (it holds
    `SystemDatabase._listener_thread_lock` from connecting until then)."""
    with _system_database(dbos)._listener_thread_lock:
        pass


# Migrations.


def dbos_migrations() -> list[str]:
    """The SQL of every migration of the system schema the installed DBOS ships, in order, version n being item
    n-1 (`dbos._migration.get_dbos_migrations("dbos", use_listen_notify=True)`): DBOS publishes the schema
    version it requires only through this list."""
    return _get_dbos_migrations("dbos", use_listen_notify=True)


# A chain's steps (see dbos_compat.reserve_in_order): DBOS.reserve_step and StepReservation.run, without the
# checks of each call that hold for every node step of ours (a sync function, called from its workflow).


def step_at(
    step_context: _context.DBOSContext, options: StepOptions, func: Callable[..., Any], args: tuple[Any, ...]
) -> Any:
    """Run the sync `func` as the step of a context drawn by `step_context_now` in the workflow's own thread
    (`dbos._core.invoke_step`, what `StepReservation.run` comes to for a sync function)."""
    return _invoke_step(
        instance(),
        step_context,
        func,
        args,
        {},
        step_name=options.get("name") or func.__qualname__,
        retries_allowed=options.get("retries_allowed", False),
        interval_seconds=options.get("interval_seconds", 1.0),
        max_attempts=options.get("max_attempts", 3),
        backoff_rate=options.get("backoff_rate", 2.0),
        should_retry=options.get("should_retry"),
    )


# dbos 3.3 (which has no `DBOS.reserve_step`): what `reserve_step` does inside, done by hand (see dbos_compat).


def step_context_now() -> _context.DBOSContext | None:
    """The calling workflow's step context, with its next step id drawn now (`dbos._context.snapshot_step_context`)."""
    return _context.snapshot_step_context()


async def run_step_in(
    step_context: _context.DBOSContext | None,
    func: Callable[..., Any],
    options: StepOptions | None,
    args: tuple[Any, ...],
) -> Any:
    """Run `func` as the step of a context drawn by `step_context_now` (`dbos._core.run_step_async`)."""
    return await _run_step_async(instance(), step_context, func, options or {}, args, {})


# DBOS's module-level functions, bound to the types we call them with: mypy checks DBOS's signatures against them.
_PICKLE: Serializer = _serialization.DBOSDefaultSerializer
_deserialize_args: Callable[[str, str | None, Serializer], _serialization.WorkflowInputs] = (
    _serialization.deserialize_args
)
_execute_dequeued_workflow: Callable[[DBOS, ClaimedRun, str], WorkflowHandle[Any]] = _core.execute_dequeued_workflow
_get_dbos_migrations: _GetMigrations = _migration.get_dbos_migrations
_invoke_step: _InvokeStep = _core.invoke_step
_run_step_async: Callable[
    [DBOS, _context.DBOSContext | None, Callable[..., Any], StepOptions, tuple[Any, ...], dict[str, Any]],
    Coroutine[Any, Any, Any],
] = _core.run_step_async
