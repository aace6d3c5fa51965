"""What the engine needs from dbos that differs between the releases the worker is built on.

The worker pins dbos 3.4.0. The upgrade e2e on kind also builds it on dbos 3.3.0 (an older schema, to migrate
from for real), and two things differ there:

- Step ids drawn up front (so a run's ids do not depend on which node finished first): 3.4 has
  `DBOS.reserve_step`; 3.3 has not, so a graph's reservation is the workflow's step context snapshotted now
  (what `reserve_step` does inside) run by 3.3's async step runner, and a chain's step draws its id when it
  runs, which for nodes run one after another in order gives the same ids.
- A graph's own event loop: 3.3 makes DBOS's thread pool the default executor of any loop it runs an async
  call on, and closing a loop shuts its default executor down, so `asyncio.run` would shut DBOS's pool down.

What of this is private to DBOS (its thread pool, 3.3's step context and async step runner) is reached through
`dbos_internals`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, TypeVar, cast

from dbos import DBOS, StepOptions

from fireflow_worker import dbos_internals

R = TypeVar("R")
HAS_RESERVE_STEP = hasattr(DBOS, "reserve_step")  # dbos 3.4


def run_on_own_loop(coro: Coroutine[Any, Any, R]) -> R:
    """`asyncio.run`, except that an executor the loop was given (DBOS's pool, by dbos 3.3) is not shut down."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        if getattr(loop, "_default_executor", None) is dbos_internals.thread_pool(dbos_internals.instance()):
            loop._default_executor = None  # type: ignore[attr-defined]  # DBOS's pool: not this loop's to shut down
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()


class Reservation(Protocol):
    def run(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any: ...

    async def run_async(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any: ...


def reserve_in_order() -> Reservation:
    """The next step id, for a sync step run in this workflow's thread after the ones reserved before it."""
    if HAS_RESERVE_STEP:
        return _InOrder(dbos_internals.step_context_now())
    return _DrawnWhenRun()


class _InOrder:
    """dbos 3.4: what `DBOS.reserve_step` and `StepReservation.run` do for a sync step in the workflow's thread,
    without the checks of every call (a node step of ours always is one): a third of a step's cost in the
    engine's own Python."""

    def __init__(self, step_context: Any) -> None:
        if step_context is None:
            raise RuntimeError("a step is reserved from a workflow only")
        self._step_context = step_context

    def run(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        return dbos_internals.step_at(self._step_context, options or {}, func, args)

    async def run_async(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError("a step run in order runs with run()")


def reserve() -> Reservation:
    """The next step id, for a step that may run concurrently with others (`run_async`)."""
    if HAS_RESERVE_STEP:
        return cast(Reservation, DBOS.reserve_step())  # dbos 3.4's StepReservation: the same two methods
    return _Snapshot()


class _DrawnWhenRun:
    """dbos 3.3: the id is drawn by `DBOS.run_step` itself."""

    def run(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        return DBOS.run_step(options, func, *args)

    async def run_async(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError("a step run in order runs with run()")


class _Snapshot:
    """dbos 3.3: the workflow's step context, snapshotted (its id drawn) at reservation."""

    def __init__(self) -> None:
        self._step_ctx = dbos_internals.step_context_now()

    def run(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError("a reserved step runs with run_async()")

    async def run_async(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        return await dbos_internals.run_step_in(self._step_ctx, func, options, args)
