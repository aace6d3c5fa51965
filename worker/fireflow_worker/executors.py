"""Executing a run's nodes as DBOS steps: a chain step after step in the workflow's thread, a graph with
independent branches concurrently on an event loop.

Step ids must be the same every time a workflow executes, or recovery cannot match recorded steps. Both
executors reserve one step id per node up front, in the plan's topological order, and run each node at its
own reserved id; so a run recovered by either executor finds its recorded nodes where it left them.

A durable sleep cannot happen inside a step (a restarted step would sleep again from zero). A node type
marked `durable` asks for sleep through its context; the step records the wake-up time as its output and the
executor sleeps the remainder, so after a crash only what is left is slept.

A node of a pure type (`template`, `transform`, any type declared pure) is computed in the workflow, not as a
step: with the default event detail it writes no record unless it fails (its final failure is recorded as its
step would have been, at its own reserved id), and a recovered run computes it again from the recorded
outputs before it. Its id stays reserved, so the ids of the steps after it do not depend on what is pure. A
run with `live` events checkpoints pure nodes too: their events are written from their step, which a recovery
does not run again once recorded.

A run is bounded (see `run_limits`): at most `max_parallel_nodes` of its node steps run at once, each output
and the run's total are limited. A cancelled run stops at once: the cancel watcher wakes it (a sleep ends, a
graph's node tasks are cancelled; a node step already running finishes unobserved and is not retried), and
the workflow ends as DBOS's cancellation, freeing its slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from dbos import DBOS, StepOptions
from dbos import error as dbos_error

from fireflow_contract import logformat, telemetry
from fireflow_contract.run_request import EVENTS_STREAM
from fireflow_worker import dbos_compat
from fireflow_worker.dbos_compat import Reservation
from fireflow_worker.flow_plans import FlowPlan
from fireflow_worker.flows.graph import resolve_params
from fireflow_worker.flows.nodetype import NodeError
from fireflow_worker.node_step import (
    NodeCall,
    PureAttempts,
    node_finished_event,
    now_ms,
    one_line,
    raise_recorded,
    run_node_step,
)
from fireflow_worker.run_limits import OutputBudget
from fireflow_worker.run_state import SETTINGS, RunFailedError


class _UpstreamFailedError(Exception):
    """A node that never ran because a node it depends on failed."""


def _cancelled(run_id: str) -> dbos_error.DBOSWorkflowCancelledError:
    return dbos_error.DBOSWorkflowCancelledError(f"Workflow {run_id} is cancelled. Stopping its nodes.")


def _node_call(
    plan: FlowPlan,
    node_id: str,
    inputs: dict[str, Any],
    outputs: dict[str, Any],
    run_id: str,
    live: bool,
    budget: OutputBudget,
) -> tuple[StepOptions, NodeCall]:
    """The node's step options and call, its params resolved against the inputs and its dependencies' outputs."""
    limits = SETTINGS.limits
    options = plan.step_options[node_id]
    retries = bool(options["retries_allowed"])
    params = resolve_params(plan.params[node_id], inputs, outputs, limits.max_node_output_bytes, budget.sizes)
    call = NodeCall(
        run_id,
        node_id,
        plan.flow.nodes[node_id].type,
        params,
        limits,
        budget,
        SETTINGS.is_cancelled,
        live,
        telemetry.current_run(),
        retries,
    )
    if retries:  # DBOS asks `should_retry` only then, and checks what it is at every call
        options = {**options, "should_retry": call.should_retry}
    return options, call


def _failure_record(options: StepOptions) -> StepOptions:
    # One attempt: the failure it records was reached by the pure node's own attempts.
    return {"name": options["name"], "retries_allowed": False}


def _pure_in_chain(
    reservation: Reservation, options: StepOptions, call: NodeCall, cancelled: _Cancellation, run_id: str
) -> dict[str, Any]:
    """A pure node in the workflow's thread; its final failure recorded at its step id (and raised)."""
    attempts = PureAttempts(call, options)
    while True:
        try:
            outcome = attempts.next()
        except (NodeError, dbos_error.DBOSMaxStepRetriesExceeded) as failure:
            reservation.run(_failure_record(options), raise_recorded, failure)
            raise  # not reached: the recording step raises the failure itself
        if isinstance(outcome, dict):
            return outcome
        if cancelled.wait(outcome):
            raise _cancelled(run_id)


async def _pure_in_graph(reservation: Reservation, options: StepOptions, call: NodeCall) -> dict[str, Any]:
    """A pure node on the graph's event loop; its final failure recorded at its step id (and raised)."""
    attempts = PureAttempts(call, options)
    while True:
        try:
            outcome = attempts.next()
        except (NodeError, dbos_error.DBOSMaxStepRetriesExceeded) as failure:
            await reservation.run_async(_failure_record(options), raise_recorded, failure)
            raise
        if isinstance(outcome, dict):
            return outcome
        await asyncio.sleep(outcome)  # a cancelled run cancels this task


class _Cancellation:
    """A chain run's cancellation, set from the cancel watcher's thread. An Event is made only once the run
    waits (a durable sleep, a pure node's pause between attempts): most runs never do."""

    __slots__ = ("_event", "seen")

    def __init__(self) -> None:
        self.seen = False
        self._event: threading.Event | None = None

    def set(self) -> None:
        self.seen = True
        event = self._event
        if event is not None:
            event.set()

    def wait(self, seconds: float) -> bool:
        """Whether the run was cancelled before `seconds` passed."""
        if self._event is None:
            self._event = threading.Event()  # made before `seen` is read: a `set` in between is seen either way
        return self.seen or self._event.wait(seconds)


def _node_failure(node_id: str, err: Exception) -> RunFailedError:
    if isinstance(err, dbos_error.DBOSMaxStepRetriesExceeded):
        last = one_line(err.errors[-1]) if err.errors else one_line(err)
        return RunFailedError(f"node {node_id!r} failed after {len(err.errors)} attempts: {last}")
    return RunFailedError(f"node {node_id!r} failed: {one_line(err)}")


def execute_chain(plan: FlowPlan, inputs: dict[str, Any], run_id: str, live: bool) -> dict[str, Any]:
    """A flow whose nodes depend on each other in one line: each node's step in turn, in this thread."""
    reservations = [(node_id, dbos_compat.reserve_in_order()) for node_id in plan.order]
    budget = OutputBudget(SETTINGS.limits.max_run_output_bytes)
    outputs: dict[str, Any] = {}
    cancelled = _Cancellation()
    watcher = SETTINGS.cancel_watcher
    if watcher is not None:
        watcher.watch(run_id, cancelled.set)
    try:
        for node_id, reservation in reservations:
            if cancelled.seen:
                raise _cancelled(run_id)
            try:
                # Every earlier node's output: a node's references name only nodes it depends on.
                options, call = _node_call(plan, node_id, inputs, outputs, run_id, live, budget)
                with logformat.node_context(node_id):  # DBOS's lines about the step (its retries) too
                    if node_id in plan.pure and not live:
                        result = _pure_in_chain(reservation, options, call, cancelled, run_id)
                    else:
                        result = reservation.run(options, run_node_step, call)
            except Exception as err:
                raise _node_failure(node_id, err) from None
            budget.record(node_id, int(result.get("bytes", 0)))
            if result.get("wake_at_ms"):
                if cancelled.wait(max(0.0, (result["wake_at_ms"] - now_ms()) / 1000)):
                    raise _cancelled(run_id)
                if live:
                    duration_ms = now_ms() - result.get("started_at_ms", now_ms())
                    DBOS.write_stream(
                        EVENTS_STREAM, node_finished_event(node_id, result.get("attempt", 1), duration_ms)
                    )
            outputs[node_id] = result["output"]
    finally:
        if watcher is not None:
            watcher.unwatch(run_id)
    return {node_id: outputs[node_id] for node_id in plan.outputs}


async def execute_graph(plan: FlowPlan, inputs: dict[str, Any], run_id: str, live: bool) -> dict[str, Any]:
    """Every node as soon as its dependencies finished, at most `max_parallel_nodes` at once."""
    limits = SETTINGS.limits
    reservations = {node_id: dbos_compat.reserve() for node_id in plan.order}
    loop = asyncio.get_running_loop()
    done: dict[str, asyncio.Future[Any]] = {node_id: loop.create_future() for node_id in plan.order}
    budget = OutputBudget(limits.max_run_output_bytes)
    slots = asyncio.Semaphore(limits.max_parallel_nodes)

    async def run_one(node_id: str) -> None:
        try:
            outputs = {dep: await done[dep] for dep in plan.deps[node_id]}
        except (RunFailedError, _UpstreamFailedError):
            done[node_id].set_exception(_UpstreamFailedError(node_id))
            return
        try:
            options, call = _node_call(plan, node_id, inputs, outputs, run_id, live, budget)
            async with slots:
                with logformat.node_context(node_id):  # this task's own context: DBOS's lines about the step too
                    if node_id in plan.pure and not live:
                        result = await _pure_in_graph(reservations[node_id], options, call)
                    else:
                        result = await reservations[node_id].run_async(options, run_node_step, call)
        except Exception as err:
            done[node_id].set_exception(_node_failure(node_id, err))
            return
        budget.record(node_id, int(result.get("bytes", 0)))
        if result.get("wake_at_ms"):
            await asyncio.sleep(max(0.0, (result["wake_at_ms"] - now_ms()) / 1000))
            if live:
                duration_ms = now_ms() - result.get("started_at_ms", now_ms())
                finished = node_finished_event(node_id, result.get("attempt", 1), duration_ms)
                await DBOS.write_stream_async(EVENTS_STREAM, finished)
        done[node_id].set_result(result["output"])

    tasks = [loop.create_task(run_one(node_id)) for node_id in plan.order]
    await _until_done_or_cancelled(tasks, run_id)
    failures = [f.exception() for f in done.values()]
    first_failure = next((err for err in failures if isinstance(err, RunFailedError)), None)
    if first_failure is not None:
        raise first_failure
    return {node_id: done[node_id].result() for node_id in plan.outputs}


async def _until_done_or_cancelled(tasks: list[asyncio.Task[None]], run_id: str) -> None:
    """Wait for every node task; if the run is cancelled meanwhile, stop them and end as DBOS's cancellation."""
    everything: asyncio.Future[list[None]] = asyncio.gather(*tasks)
    cancel_requested = asyncio.Event()
    cancel_wait: asyncio.Future[Any] = asyncio.ensure_future(cancel_requested.wait())
    watcher = SETTINGS.cancel_watcher
    loop = asyncio.get_running_loop()
    if watcher is not None:

        def wake() -> None:
            loop.call_soon_threadsafe(cancel_requested.set)

        watcher.watch(run_id, wake)
    try:
        waited: set[asyncio.Future[Any]] = {everything, cancel_wait}
        finished, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if everything not in finished:
            raise _cancelled(run_id)
        everything.result()  # what a node task raised past its own failure: DBOS's cancellation, seen by a step
    finally:
        if watcher is not None:
            watcher.unwatch(run_id)
        cancel_wait.cancel()
        if not everything.done():
            everything.cancel()
            with contextlib.suppress(BaseException):
                await everything
