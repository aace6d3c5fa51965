"""Each node's step id drawn up front, so a run's ids do not depend on which node finished first.

The worker pins dbos 3.4.0, whose `DBOS.reserve_step` does exactly this. The upgrade e2e on kind also builds the
worker on dbos 3.3.0 (an older schema, to migrate from for real), which has no `reserve_step`; there, a graph's
reservation is the workflow's step context snapshotted now (what `reserve_step` does inside) and run by 3.3's
async step runner, and a chain's step draws its id when it runs, which for nodes run one after another in
order gives the same ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from dbos import DBOS, StepOptions


class Reservation(Protocol):
    def run(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any: ...

    async def run_async(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any: ...


def reserve_in_order() -> Reservation:
    """The next step id, for a step run in this thread after the ones reserved before it."""
    if hasattr(DBOS, "reserve_step"):
        return cast(Reservation, DBOS.reserve_step())  # dbos 3.4's StepReservation: the same two methods
    return _DrawnWhenRun()


def reserve() -> Reservation:
    """The next step id, for a step that may run concurrently with others (`run_async`)."""
    if hasattr(DBOS, "reserve_step"):
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
        from dbos._context import snapshot_step_context  # noqa: PLC0415 - dbos 3.3 only

        self._step_ctx = snapshot_step_context()

    def run(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError("a reserved step runs with run_async()")

    async def run_async(self, options: StepOptions | None, func: Callable[..., Any], *args: Any) -> Any:
        from dbos._core import run_step_async  # noqa: PLC0415 - dbos 3.3 only
        from dbos._dbos import _get_dbos_instance  # noqa: PLC0415

        return await run_step_async(_get_dbos_instance(), self._step_ctx, func, options or {}, args, {})
