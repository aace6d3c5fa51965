"""The durable flow engine: one DBOS workflow per run, one DBOS step per node.

Step ids must be the same every time a workflow executes, or recovery cannot match recorded steps. Nodes
run as soon as their dependencies finish, so their start order depends on timing; the engine therefore
reserves one step id per node up front, in topological order, and each node runs at its own reserved id
whenever it becomes ready. A crash resumes at the first unfinished node; a finished node returns its
recorded output and never runs again.

A durable sleep cannot happen inside a step (a restarted step would sleep again from zero). A node type
marked `durable` asks for sleep through its context; the engine records the wake-up time as the step's
output and sleeps the remainder in workflow code, so after a crash only what is left is slept.

A run is bounded (see `run_limits`): at most `max_parallel_nodes` of its node steps run at once, each output
and the run's total are limited. A cancelled run stops at once: the cancel watcher wakes it, its node tasks
are cancelled (a node step already running in a thread finishes unobserved and is not retried), and the
workflow ends as DBOS's cancellation, freeing its slot.

What a run costs beyond DBOS's own records is kept to nothing on the hot path: a flow that travels with the
run needs no step to resolve it (it is the workflow's recorded input), the flow is parsed and validated once,
and with the default event detail no event is written (readers derive them from the step records; see
`run_events`). Only a run asking for `live` events writes each event to its stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dbos import DBOS, StepOptions
from dbos import error as dbos_error
from prometheus_client import Counter

from fireflow_worker import metrics, queues
from fireflow_worker.cancellation import CancelWatcher
from fireflow_worker.flow_plans import FlowPlan, PlanCache
from fireflow_worker.flow_store import FlowNotFoundError, ProvisionCache
from fireflow_worker.flows.graph import resolve_params
from fireflow_worker.flows.validate import FlowValidationError, validate_run_inputs
from fireflow_worker.node_step import (
    EVENTS_STREAM,
    NodeCall,
    node_finished_event,
    now_ms,
    one_line,
    run_node_step,
)
from fireflow_worker.run_events import LIVE, PROVISION_STEP, event_detail, flow_label
from fireflow_worker.run_limits import OutputBudget, RunLimits

__all__ = ["EVENTS_STREAM", "SETTINGS", "WORKFLOW_NAME", "RunFailedError", "register_workflow", "run_flow"]

WORKFLOW_NAME = "fireflow.run_flow"
# Flows with more nodes than this are validated in a thread, off the shared event loop.
THREADED_VALIDATION_NODES = 64


class RunFailedError(Exception):
    """The run ends in ERROR with this one-line message (a node failed, the flow or its inputs are invalid)."""


class _UpstreamFailedError(Exception):
    """A node that never ran because a node it depends on failed."""


@dataclass
class EngineSettings:
    """What the engine needs from the running worker; set once by the runtime before launch."""

    provision_cache: ProvisionCache | None = None
    limits: RunLimits = field(default_factory=RunLimits)
    cancel_watcher: CancelWatcher | None = None
    active_runs: set[str] = field(default_factory=set)
    # Runs whose execution here was cut short by shutdown: they stay PENDING for recovery.
    interrupted_runs: set[str] = field(default_factory=set)
    # Runs started since the sampler last read their claim latency (appended and swapped whole: thread-safe).
    claimed: list[str] = field(default_factory=list)
    # Told the queue of every run that ends here, so its claimer can fill the freed slot.
    on_run_ended: Callable[[str], None] | None = None

    def is_cancelled(self, run_id: str, ask_now: bool = False) -> bool:
        return self.cancel_watcher is not None and self.cancel_watcher.is_cancelled(run_id, ask_now)


SETTINGS = EngineSettings()
PLANS = PlanCache()
_registered = False


def register_workflow(max_recovery_attempts: int) -> None:
    """Register `run_flow` with DBOS (once, before launch). A run dispatched more than `max_recovery_attempts`
    + 1 times - its worker died while running it each time - ends as MAX_RECOVERY_ATTEMPTS_EXCEEDED."""
    global _registered  # noqa: PLW0603 - DBOS's registry is process-wide too
    if not _registered:
        DBOS.workflow(name=WORKFLOW_NAME, max_recovery_attempts=max_recovery_attempts)(run_flow)
        _registered = True


async def run_flow(request: dict[str, Any]) -> dict[str, Any]:
    """Execute one FireFlow run. `request` is `{"flow": {...}} | {"flow_ref": name}` plus `"inputs"`."""
    run_id = DBOS.workflow_id or ""
    # The metrics' queue label: one of the four (an enqueuer's request may say anything; labels must stay few).
    said = request.get("queue", "none") if isinstance(request, dict) else "none"
    queue = said if said in queues.ALL_QUEUES else "none"
    metrics.run_counter(metrics.RUNS_STARTED, queue).inc()
    metrics.ACTIVE_RUNS.inc()
    SETTINGS.active_runs.add(run_id)
    SETTINGS.claimed.append(run_id)
    started = time.monotonic()
    ended: Counter | None = metrics.RUNS_FAILED
    try:
        result = await _run(request, run_id)
        ended = metrics.RUNS_SUCCEEDED
        return result
    except dbos_error.DBOSWorkflowCancelledError:
        ended = metrics.RUNS_CANCELLED
        raise
    except asyncio.CancelledError:
        ended = None  # shutdown: not an outcome, the run is recovered later
        SETTINGS.interrupted_runs.add(run_id)
        raise
    finally:
        if ended is not None:
            metrics.run_counter(ended, queue).inc()
        metrics.RUN_DURATION.observe(time.monotonic() - started)
        metrics.ACTIVE_RUNS.dec()
        SETTINGS.active_runs.discard(run_id)
        if SETTINGS.on_run_ended is not None:
            SETTINGS.on_run_ended(queue)


async def _run(request: Any, run_id: str) -> dict[str, Any]:
    """The run between its events: every failure becomes one RunFailedError (and, with live events, one
    `run.failed` event). With the default event detail nothing is written but DBOS's own records."""
    live = event_detail(request) == LIVE
    announced = False
    try:
        definition = await _definition(request)
        plan = await _load(definition)
        flow = plan.flow
        if live:
            await _write_event({"event": "run.started", "flow": flow.name, "at_ms": now_ms()})
            announced = True
        # Enqueuers other than this package's client (the API, Flame Chorus) may not have checked inputs.
        try:
            inputs = validate_run_inputs(flow, request.get("inputs"))
        except FlowValidationError as err:
            raise RunFailedError(f"invalid run inputs: {err.one_line()}") from None
        result = await _execute(plan, inputs, run_id, live)
    except Exception as err:
        failure = err if isinstance(err, RunFailedError) else RunFailedError(f"{type(err).__name__}: {one_line(err)}")
        if live:
            if not announced:
                await _write_event({"event": "run.started", "flow": flow_label(request), "at_ms": now_ms()})
            await _write_event({"event": "run.failed", "error": str(failure), "at_ms": now_ms()})
            await DBOS.close_stream_async(EVENTS_STREAM)
        raise failure from None
    if live:
        await _write_event({"event": "run.finished", "at_ms": now_ms()})
        await DBOS.close_stream_async(EVENTS_STREAM)
    return result


async def _write_event(event: dict[str, Any]) -> None:
    await DBOS.write_stream_async(EVENTS_STREAM, event)


async def _definition(request: Any) -> Any:
    """The run's flow definition. A flow that travels with the run is part of the workflow's recorded input:
    no step. A stored flow is resolved in the recorded `provision` step, so a recovered run runs the
    definition its first execution resolved."""
    if not isinstance(request, dict) or (request.get("flow") is None) == (request.get("flow_ref") is None):
        raise RunFailedError("invalid run request: it must carry exactly one of flow and flow_ref")
    if request.get("flow") is not None:
        return request["flow"]
    return await DBOS.run_step_async(_PROVISION_STEP, _provision, str(request["flow_ref"]))


async def _load(definition: Any) -> FlowPlan:
    """The flow's plan: parsed and validated at most once per run, and once per distinct flow while cached
    (a stored flow may have changed since enqueue: what is validated is what runs)."""
    nodes = definition.get("nodes") if isinstance(definition, dict) else None
    big = isinstance(nodes, dict | list) and len(nodes) > THREADED_VALIDATION_NODES
    try:
        # A large flow is validated off the event loop, which every run of the worker shares.
        return await asyncio.to_thread(PLANS.get, definition) if big else PLANS.get(definition)
    except FlowValidationError as err:
        raise RunFailedError(f"invalid flow: {err.one_line()}") from None


def _provision_retry(err: BaseException) -> bool:
    # A lost database connection is worth another try; a missing flow is not.
    return not isinstance(err, RunFailedError)


_PROVISION_STEP: StepOptions = {
    "name": PROVISION_STEP,
    "retries_allowed": True,
    "max_attempts": 8,
    "interval_seconds": 1.0,
    "backoff_rate": 1.5,
    "should_retry": _provision_retry,
}


def _provision(flow_ref: str) -> Any:
    """Resolve a stored flow through the provision cache (validated by the workflow, once)."""
    if SETTINGS.provision_cache is None:
        raise RunFailedError("this worker cannot resolve stored flows (no database-backed cache)")
    try:
        return SETTINGS.provision_cache.get(flow_ref)
    except FlowNotFoundError as err:
        raise RunFailedError(str(err)) from None


async def _execute(plan: FlowPlan, inputs: dict[str, Any], run_id: str, live: bool) -> dict[str, Any]:
    limits = SETTINGS.limits
    flow, order, deps = plan.flow, plan.order, plan.deps
    reservations = {node_id: DBOS.reserve_step() for node_id in order}
    loop = asyncio.get_running_loop()
    done: dict[str, asyncio.Future[Any]] = {node_id: loop.create_future() for node_id in order}
    budget = OutputBudget(limits.max_run_output_bytes)
    slots = asyncio.Semaphore(limits.max_parallel_nodes)

    async def run_one(node_id: str) -> None:
        try:
            outputs = {dep: await done[dep] for dep in deps[node_id]}
        except (RunFailedError, _UpstreamFailedError):
            done[node_id].set_exception(_UpstreamFailedError(node_id))
            return
        spec = flow.nodes[node_id]
        retry = plan.retries[node_id]
        try:
            params = resolve_params(spec.params, inputs, outputs, limits.max_node_output_bytes)
            call = NodeCall(run_id, node_id, spec.type, params, limits, budget, SETTINGS.is_cancelled, live)
            options: StepOptions = {
                "name": f"node:{node_id}",
                "retries_allowed": retry.max_attempts > 1,
                "max_attempts": retry.max_attempts,
                "interval_seconds": retry.interval_seconds,
                "backoff_rate": retry.backoff_rate,
                "should_retry": call.should_retry,
            }
            async with slots:
                result = await reservations[node_id].run_async(options, run_node_step, call)
        except dbos_error.DBOSMaxStepRetriesExceeded as err:
            last = one_line(err.errors[-1]) if err.errors else one_line(err)
            message = f"node {node_id!r} failed after {len(err.errors)} attempts: {last}"
            done[node_id].set_exception(RunFailedError(message))
            return
        except Exception as err:
            done[node_id].set_exception(RunFailedError(f"node {node_id!r} failed: {one_line(err)}"))
            return
        budget.record(node_id, int(result.get("bytes", 0)))
        if result["wake_at_ms"]:
            await asyncio.sleep(max(0.0, (result["wake_at_ms"] - now_ms()) / 1000))
            if live:
                duration_ms = now_ms() - result.get("started_at_ms", now_ms())
                await _write_event(node_finished_event(node_id, result.get("attempt", 1), duration_ms))
        done[node_id].set_result(result["output"])

    tasks = [loop.create_task(run_one(node_id)) for node_id in order]
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
    if watcher is not None:
        watcher.watch(run_id, cancel_requested.set)
    try:
        waited: set[asyncio.Future[Any]] = {everything, cancel_wait}
        finished, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if everything not in finished:
            raise dbos_error.DBOSWorkflowCancelledError(f"Workflow {run_id} is cancelled. Stopping its nodes.")
        everything.result()  # what a node task raised past its own failure: DBOS's cancellation, seen by a step
    finally:
        if watcher is not None:
            watcher.unwatch(run_id)
        cancel_wait.cancel()
        if not everything.done():
            everything.cancel()
            with contextlib.suppress(BaseException):
                await everything
