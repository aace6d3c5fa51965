"""The private API of DBOS the worker relies on (fireflow_worker/dbos_internals.py), as the pinned dbos has it
(pure: reads the installed package, starts nothing).

Each function is recorded as `inspect.signature` prints it, each attribute DBOS assigns in a constructor as its
annotation there (or, unannotated, the callable its value comes from), each name a DBOS function must still call
by name as that name. When the installed dbos differs, the test fails naming the function and what changed: read
the new DBOS source, adapt dbos_internals, then record the new text here. Where the records came from: dbos
3.4.0's source (`.venv/lib/python3.11/site-packages/dbos/`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, _migration
from dbos._sys_db import SystemDatabase

from fireflow_worker import dbos_internals

# Functions, methods and properties: what `inspect.signature` prints (of a property: of its getter).
SIGNATURES: dict[str, str] = {
    "dbos._dbos._get_dbos_instance": "() -> 'DBOS'",
    "dbos._dbos.DBOS._sys_db": "(self) -> 'SystemDatabase'",
    "dbos._sys_db.SystemDatabase.get_queue": (
        "(self, name: str, *, client_system_database: Optional[ForwardRef('SystemDatabase')] = None) "
        "-> Optional[ForwardRef('Queue')]"
    ),
    "dbos._sys_db.SystemDatabase.start_queued_workflows": (
        "(self, queue: 'Queue', executor_id: str, app_version: str, queue_partition_key: Optional[str], "
        "local_running_count: int = 0, partition_local_running_count: int = 0, *, owner_xid: Optional[str] = None, "
        "is_latest_version: Optional[bool] = None) -> Tuple[List[str], Optional[Literal['worker_concurrency', "
        "'partition_worker_concurrency', 'limiter', 'partition_limiter', 'concurrency', 'partition_concurrency']]]"
    ),
    "dbos._sys_db.SystemDatabase.get_workflow_statuses": (
        "(self, workflow_ids: List[str]) -> List[dbos._sys_db.WorkflowStatusInternal]"
    ),
    "dbos._sys_db.SystemDatabase.get_workflow_status": (
        "(self, workflow_uuid: str) -> Optional[dbos._sys_db.WorkflowStatusInternal]"
    ),
    "dbos._sys_db.SystemDatabase.update_workflow_outcome": (
        "(self, workflow_id: str, status: Literal['PENDING', 'SUCCESS', 'ERROR', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED', "
        "'CANCELLED', 'ENQUEUED', 'DELAYED'], *, output: Optional[str] = None, error: Optional[str] = None, "
        "owner_xid: Optional[str] = None) -> bool"
    ),
    "dbos._sys_db.ThreadSafeEventDict.add": (
        "(self, key: str, event: dbos._utils.LoopAwareEvent, components: Tuple[str, str, Optional[str]]) -> None"
    ),
    "dbos._sys_db.ThreadSafeEventDict.pop": "(self, key: str, event: dbos._utils.LoopAwareEvent) -> None",
    "dbos._core.ActiveWorkflowById.count_for_queue": "(self, queue_name: str) -> int",
    "dbos._core.execute_dequeued_workflow": (
        "(dbos: 'DBOS', status: dbos._sys_db.WorkflowStatusInternal, owner_xid: str) -> 'WorkflowHandle[Any]'"
    ),
    "dbos._queue.execute_dequeued_workflow": (
        "(dbos: 'DBOS', status: dbos._sys_db.WorkflowStatusInternal, owner_xid: str) -> 'WorkflowHandle[Any]'"
    ),
    "dbos._queue.queue_thread": "(stop_event: threading.Event, dbos: 'DBOS') -> None",
    "dbos._utils.generate_uuid": "() -> str",
    "dbos._utils.LoopAwareEvent.__init__": "(self) -> None",
    "dbos._utils.LoopAwareEvent.set": "(self) -> None",
    "dbos._migration.get_dbos_migrations": (
        "(schema: str, use_listen_notify: bool, is_cockroach: bool = False) -> list[str]"
    ),
    "dbos._context.snapshot_step_context": "(reserve_sleep_id: 'bool' = False) -> 'Optional[DBOSContext]'",
    "dbos._core.invoke_step": (
        "(dbos: 'DBOS', step_ctx: dbos._context.DBOSContext, func: Union[Callable[~P, Coroutine[Any, Any, +R]], "
        "Callable[~P, +R]], args: tuple[typing.Any, ...], kwargs: dict[str, typing.Any], *, step_name: str, "
        "retries_allowed: bool, interval_seconds: float, max_attempts: int, backoff_rate: float, should_retry: "
        "Optional[Callable[[BaseException], Union[bool, Awaitable[bool]]]] = None, preemptible: bool = False, "
        "timeout_seconds: Optional[float] = None) -> Union[+R, Coroutine[Any, Any, +R]]"
    ),
    "dbos._core.run_step_async": (
        "(dbos: 'DBOS', step_ctx: Optional[dbos._context.DBOSContext], func: Union[Callable[~P, Coroutine[Any, Any, "
        "+R]], Callable[~P, +R]], options: dbos._core.StepOptions, args: tuple[typing.Any, ...], kwargs: dict[str, "
        "typing.Any]) -> +R"
    ),
    # Not the worker's: tests/operator/test_promises.py builds a database at an older schema version with it,
    # benchmarks/workload.py reads a finished run's output with the other.
    "dbos._migration.run_dbos_migrations": (
        "(engine: sqlalchemy.engine.base.Engine, schema: str, use_listen_notify: bool) -> None"
    ),
    "dbos._migration.ensure_dbos_schema": "(engine: sqlalchemy.engine.base.Engine, schema: str) -> None",
    # run_encodings reads a pickled run request with it (dbos_internals.pickled_arguments).
    "dbos._serialization.deserialize_args": (
        "(serialized_value: 'str', serialization: 'Optional[str]', serializer: 'Serializer') -> 'WorkflowInputs'"
    ),
    "dbos._serialization.deserialize_value": (
        "(serialized_value: 'Optional[str]', serialization: 'Optional[str]', serializer: 'Serializer') "
        "-> 'Optional[Any]'"
    ),
}

# Instance attributes: their annotation where DBOS's constructor (or class body) has one, else `= <callable>`.
ATTRIBUTES: dict[str, str] = {
    "dbos._dbos.DBOS._executor_field": "Optional[ThreadPoolExecutor]",
    "dbos._dbos.DBOS._background_threads": "List[threading.Thread]",
    "dbos._dbos.DBOS._background_event_loop": "BackgroundEventLoop",
    "dbos._dbos.DBOS._active_workflows_set": "ActiveWorkflowById",
    "dbos._sys_db.SystemDatabase.engine": "= base_engine.execution_options",
    "dbos._sys_db.SystemDatabase.notifications_map": "= ThreadSafeEventDict",
    "dbos._sys_db.SystemDatabase._listener_thread_lock": "= threading.Lock",
    "dbos._sys_db_postgres.PostgresSystemDatabase.notification_conn": (
        "Optional[sqlalchemy.pool.base.PoolProxiedConnection]"
    ),
    "dbos._event_loop.BackgroundEventLoop._loop": "Optional[asyncio.AbstractEventLoop]",
    "dbos._event_loop.BackgroundEventLoop._thread": "Optional[threading.Thread]",
    "dbos._queue.Queue._worker_concurrency": "= worker_concurrency",
    "dbos._queue.Queue._polling_interval_sec": "= polling_interval_sec",
    # The keys of a claimed run's status row that run_encodings reads and rewrites.
    "dbos._sys_db.WorkflowStatusInternal.workflow_uuid": "str",
    "dbos._sys_db.WorkflowStatusInternal.inputs": "str",
    "dbos._sys_db.WorkflowStatusInternal.serialization": "Optional[str]",
}

# Types named only (dbos_internals' annotations, benchmarks/workload.py's serializer): they must still exist.
TYPES: set[str] = {
    "dbos._context.DBOSContext",
    "dbos._serialization.DBOSDefaultSerializer",
    "dbos._serialization.WorkflowInputs",
}

# Names a DBOS function must still use: what dbos_internals replaces or recognises is what DBOS calls.
USES: dict[str, str] = {
    # route_queue_thread_dispatch replaces this module global: the queue worker threads must call it by name.
    "dbos._queue.queue_worker_thread": "execute_dequeued_workflow",
    # queue_threads recognises DBOS's queue thread by its target.
    "dbos._dbos.DBOS._launch": "queue_thread",
}

# The protocols of dbos_internals and the DBOS classes they describe (their members must be recorded above).
PROTOCOLS: dict[str, str] = {
    "_DbosPrivate": "dbos._dbos.DBOS",
    "_SystemDatabase": "dbos._sys_db.SystemDatabase",
    "_NotificationWaiters": "dbos._sys_db.ThreadSafeEventDict",
    "_ActiveWorkflows": "dbos._core.ActiveWorkflowById",
    "_BackgroundLoop": "dbos._event_loop.BackgroundEventLoop",
}

ROOT = Path(__file__).resolve().parents[2]
INTERNALS = Path(dbos_internals.__file__)


def test_should_find_every_dbos_internal_the_worker_relies_on_as_recorded() -> None:
    problems = differences()
    assert not problems, "the installed dbos differs from the one dbos_internals was written for:\n" + "\n".join(
        problems
    )


def test_should_record_every_private_name_dbos_internals_uses() -> None:
    recorded = {*SIGNATURES, *ATTRIBUTES, *USES, *TYPES}
    missing = sorted({name for name in private_names_used() if not _is_recorded(name, recorded)})
    assert not missing, f"dbos_internals uses DBOS internals this test does not record: {', '.join(missing)}"


def test_should_find_no_private_attribute_of_dbos_read_outside_dbos_internals() -> None:
    private = {name.rsplit(".", 1)[1] for name in {*SIGNATURES, *ATTRIBUTES}} | {"_executor", "_sys_db_field"}
    private = {name for name in private if name.startswith("_") and not name.startswith("__")}
    found = sorted(
        (str(path.relative_to(ROOT)), node.lineno, node.attr)
        for folder in ("worker", "operator", "tests", "benchmarks", "examples")
        for path in (ROOT / folder).rglob("*.py")
        if path not in {INTERNALS, Path(__file__)}
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr in private
        and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
    )
    assert not found, "DBOS's private attributes are dbos_internals' alone:\n" + "\n".join(
        f"{path}:{line}: .{attribute}" for path, line, attribute in found
    )


# What the newest dbos-transact-py source (main at 6bc3032f, 2026-08-21, dbos/_sys_db.py) has in place of
# 3.4.0's claim: no owner_xid, and the claimed ids alone. The worker relies on both: the record must not match.
NEWEST_START_QUEUED_WORKFLOWS = """
from typing import List, Optional

def start_queued_workflows(
    self,
    queue: "Queue",
    executor_id: str,
    app_version: str,
    queue_partition_key: Optional[str],
    local_running_count: int = 0,
    partition_local_running_count: int = 0,
) -> List[str]:
    raise AssertionError("never called")
"""


def _newest_start_queued_workflows() -> Any:
    """The function as DBOS's module defines it (annotations evaluated: no `from __future__ import annotations`)."""
    namespace: dict[str, Any] = {}
    exec(compile(NEWEST_START_QUEUED_WORKFLOWS, "newest _sys_db.py", "exec", dont_inherit=True), namespace)
    return namespace["start_queued_workflows"]


def _init_without_thread_pool(self: Any) -> None:
    self._background_threads = []


@pytest.mark.parametrize(
    ("name", "change", "expected"),
    [
        (
            "dbos._sys_db.SystemDatabase.start_queued_workflows",
            lambda mp: mp.setattr(SystemDatabase, "start_queued_workflows", _newest_start_queued_workflows()),
            [
                "dbos._sys_db.SystemDatabase.start_queued_workflows changed",
                "no longer has: *, owner_xid: Optional[str] = None, is_latest_version: Optional[bool] = None",
                "returns List[str], recorded Tuple[List[str], Optional[Literal[",
            ],
        ),
        (
            "dbos._migration.get_dbos_migrations",
            lambda mp: mp.delattr(_migration, "get_dbos_migrations"),
            ["dbos._migration.get_dbos_migrations is gone"],
        ),
        (
            "dbos._dbos.DBOS._executor_field",
            lambda mp: mp.setattr(DBOS, "__init__", _init_without_thread_pool),
            ["dbos._dbos.DBOS._executor_field is gone: DBOS.__init__ no longer assigns it"],
        ),
    ],
)
def test_should_name_the_function_and_what_changed_when_dbos_differs(
    monkeypatch: pytest.MonkeyPatch, name: str, change: Any, expected: list[str]
) -> None:
    change(monkeypatch)
    problems = [problem for problem in differences() if problem.startswith(name)]
    assert len(problems) == 1, problems
    for part in expected:
        assert part in problems[0]


def differences() -> list[str]:
    """One line per recorded internal the installed dbos no longer has as recorded."""
    problems = [problem for name, text in SIGNATURES.items() if (problem := _signature_problem(name, text))]
    problems += [problem for name, text in ATTRIBUTES.items() if (problem := _attribute_problem(name, text))]
    problems += [problem for name, used in USES.items() if (problem := _use_problem(name, used))]
    return problems + [f"{name} is gone" for name in sorted(TYPES) if not _exists(name)]


def _exists(name: str) -> bool:
    try:
        _resolve(name)
    except AttributeError:
        return False
    return True


def _signature_problem(name: str, recorded: str) -> str | None:
    try:
        found = _resolve(name)
    except AttributeError:
        return f"{name} is gone"
    if isinstance(found, property) and found.fget is not None:
        found = found.fget
    actual = str(inspect.signature(found))
    if actual == recorded:
        return None
    (was, was_returns), (now, now_returns) = _split(recorded), _split(actual)
    changes = []
    if gone := [part for part in was if part not in now]:
        changes.append(f"no longer has: {', '.join(gone)}")
    if new := [part for part in now if part not in was]:
        changes.append(f"now has: {', '.join(new)}")
    if not changes and was != now:
        changes.append("its parameters are in another order")
    if was_returns != now_returns:
        changes.append(f"returns {now_returns or 'no annotation'}, recorded {was_returns or 'no annotation'}")
    return f"{name} changed: {'; '.join(changes)} (now {actual})"


def _attribute_problem(name: str, recorded: str) -> str | None:
    owner_name, attribute = name.rsplit(".", 1)
    try:
        owner = _resolve(owner_name)
    except AttributeError:
        return f"{name} is gone: {owner_name} is gone"
    actual = _attribute_text(owner, attribute)
    if actual is None:
        return f"{name} is gone: {owner.__name__}.__init__ no longer assigns it"
    if actual != recorded:
        return f"{name} changed: now {actual}, recorded {recorded}"
    return None


def _use_problem(name: str, used: str) -> str | None:
    try:
        found = _resolve(name)
    except AttributeError:
        return f"{name} is gone"
    if used not in _names_in(found.__code__):
        return f"{name} changed: it no longer uses {used}, which dbos_internals relies on"
    return None


def _resolve(name: str) -> Any:
    """The object of a dotted name: the longest importable module, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = inspect.getattr_static(found, part)
        return found
    raise AttributeError(name)


def _attribute_text(owner: type, attribute: str) -> str | None:
    """The annotation of `attribute` in the class body or a constructor of `owner` or a base, else `= <callable>`
    (`= <name>` for a plain value) of its assignment there; None where none assigns it."""
    for cls in owner.__mro__:
        if attribute in inspect.get_annotations(cls):
            return _annotation_text(cls, attribute)
        init = cls.__dict__.get("__init__")
        if not isinstance(init, types.FunctionType):
            continue
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(init)))):
            if isinstance(node, ast.AnnAssign) and _is_self_attribute(node.target, attribute):
                return ast.unparse(node.annotation)
            if isinstance(node, ast.Assign) and any(_is_self_attribute(each, attribute) for each in node.targets):
                value = node.value.func if isinstance(node.value, ast.Call) else node.value
                return f"= {ast.unparse(value)}"
    return None


def _is_self_attribute(node: ast.expr, attribute: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attribute and _is_self(node.value)


def _annotation_text(cls: type, attribute: str) -> str:
    annotation = inspect.get_annotations(cls)[attribute]
    if isinstance(annotation, str):
        return annotation
    return inspect.formatannotation(annotation)


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _names_in(code: types.CodeType) -> set[str]:
    """The global and attribute names a function's code uses, its nested functions' included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names_in(const)
    return names


def _split(signature: str) -> tuple[list[str], str]:
    """A printed signature's parameters (a `*` marker kept on the first keyword-only one) and its return."""
    depth, start, parts = 0, 1, []
    quote: str | None = None
    for index, char in enumerate(signature):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth == 0:
                parts.append(signature[start:index].strip())
                returns = signature[index + 1 :].strip().removeprefix("->").strip()
                break
        elif char == "," and depth == 1:
            parts.append(signature[start:index].strip())
            start = index + 1
    else:
        raise ValueError(f"not a signature: {signature}")
    merged: list[str] = []
    for part in [part for part in parts if part]:
        if merged and merged[-1] in {"*", "/"}:
            merged[-1] = f"{merged[-1]}, {part}"
        else:
            merged.append(part)
    return merged, returns


def private_names_used() -> Iterator[str]:
    """The dotted DBOS names dbos_internals reaches: attributes of the private modules it imports, names it
    imports from them, private attributes it reads and its protocols' members."""
    tree = ast.parse(INTERNALS.read_text())
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "dbos":
            modules.update({alias.asname or alias.name: f"dbos.{alias.name}" for alias in node.names})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dbos._"):
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            if node.value.id.startswith("_"):
                yield f"{modules[node.value.id]}.{node.attr}"
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if not (_is_self(node.value) and node.attr == "_callback"):  # our own subclass's field
                yield f"*.{node.attr}"
        elif isinstance(node, ast.ClassDef) and node.name in PROTOCOLS:
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    yield f"{PROTOCOLS[node.name]}.{member.name}"


def _is_recorded(name: str, recorded: set[str]) -> bool:
    if name.startswith("*."):  # a private attribute of some DBOS object
        return any(each.endswith(name[1:]) for each in recorded)
    return name in recorded or any(each.startswith(name + ".") for each in recorded)
