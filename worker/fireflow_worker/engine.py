"""The durable flow engine: one DBOS workflow per run (`fireflow.run_flow`), one DBOS step per node with effects.

Nodes of pure types (`template`, `transform`) are computed in the workflow itself and not checkpointed: DBOS's
model is that workflow code is deterministic and only what has effects is a step, so a recovered run computes
them again from the recorded outputs of the steps before them, to the same values (see `executors`).

The workflow is a plain (sync) DBOS workflow, DBOS's cheapest form: it resolves the run's flow, checks it and
its inputs, then executes its nodes (see `executors`): a chain of nodes step after step in the workflow's own
thread; a flow with independent branches concurrently, on an event loop of the workflow's own.

What a run costs beyond DBOS's own records is kept to nothing on the hot path: a flow that travels with the
run needs no step to resolve it (it is the workflow's recorded input), the flow is parsed and validated once
per distinct flow (`flow_plans`), and with the default event detail no event is written (readers derive them
from the step records; see `run_events`). Only a run asking for `live` events writes each to its stream.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from dbos import DBOS, StepOptions
from dbos import error as dbos_error
from prometheus_client import Counter

from fireflow_contract import events, logformat, queues, run_request, telemetry
from fireflow_worker import dbos_compat, metrics
from fireflow_worker.executors import execute_chain, execute_graph
from fireflow_worker.flow_plans import FlowPlan, PlanCache
from fireflow_worker.flow_store import FlowNotFoundError
from fireflow_worker.flows.validate import FlowValidationError, validate_run_inputs
from fireflow_worker.node_step import now_ms, one_line
from fireflow_worker.run_events import PROVISION_STEP, flow_label
from fireflow_worker.run_state import SETTINGS, EngineSettings, RunFailedError

__all__ = [
    "EVENTS_STREAM",
    "SETTINGS",
    "WORKFLOW_NAME",
    "EngineSettings",
    "RunFailedError",
    "register_workflow",
    "run_flow",
]

# The contract's names (see fireflow_contract.run_request), re-exported for the engine's callers.
WORKFLOW_NAME = run_request.WORKFLOW_NAME
EVENTS_STREAM = run_request.EVENTS_STREAM

log = logging.getLogger("fireflow.worker")


PLANS = PlanCache()
_registered = False


def register_workflow(max_recovery_attempts: int) -> None:
    """Register `run_flow` with DBOS (once, before launch). A run dispatched more than `max_recovery_attempts`
    + 1 times - its worker died while running it each time - ends as MAX_RECOVERY_ATTEMPTS_EXCEEDED."""
    global _registered  # noqa: PLW0603 - DBOS's registry is process-wide too
    if not _registered:
        DBOS.workflow(name=WORKFLOW_NAME, max_recovery_attempts=max_recovery_attempts)(_workflow_entry)
        _registered = True


def _workflow_entry(request):  # type: ignore[no-untyped-def]
    # Unannotated on purpose: DBOS evaluates a workflow's type hints on every run of portable JSON arguments
    # (to coerce dates), and the run request has none to coerce.
    return run_flow(request)


def run_flow(request: dict[str, Any]) -> dict[str, Any]:
    """Execute one FireFlow run. `request` is `{"flow": {...}} | {"flow_ref": name}` plus `"inputs"`."""
    run_id = DBOS.workflow_id or ""
    # The metrics' queue label: one of the four (an enqueuer's request may say anything; labels must stay few).
    said = request.get(run_request.QUEUE, "none") if isinstance(request, dict) else "none"
    queue = said if said in queues.ALL_QUEUES else "none"
    metrics.run_counter(metrics.RUNS_STARTED, queue).inc(1)
    metrics.ACTIVE.inc(1)
    SETTINGS.active_runs.add(run_id)
    SETTINGS.claimed.append(run_id)
    if SETTINGS.on_run_started is not None:
        SETTINGS.on_run_started(run_id)
    started = time.monotonic()
    ended: Counter | None = metrics.RUNS_FAILED
    outcome = "failed"
    flow = flow_label(request) or "unknown"
    with logformat.run_context(run_id), telemetry.run_span(request, run_id, flow, queue):
        log.debug("run %s started: flow %s, queue %s", run_id, flow, queue)
        try:
            result = _run(request, run_id)
            ended, outcome = metrics.RUNS_SUCCEEDED, "succeeded"
            return result
        except dbos_error.DBOSWorkflowCancelledError:
            ended, outcome = metrics.RUNS_CANCELLED, "cancelled"
            raise
        except BaseException as err:
            outcome = f"failed: {one_line(err, 300)}"
            raise
        finally:
            elapsed = time.monotonic() - started
            if ended is not None:
                metrics.run_counter(ended, queue).inc(1)
            metrics.run_duration(flow).observe(elapsed)
            metrics.ACTIVE.inc(-1)
            SETTINGS.active_runs.discard(run_id)
            if SETTINGS.on_run_ended is not None:
                SETTINGS.on_run_ended(queue)
            # Per-run lines are debug, as the TypeScript FireFlow execution worker's are (at a hundred runs a
            # second they were a sixth of the worker's CPU); a failed run's end is info: it says why.
            level = logging.INFO if ended is metrics.RUNS_FAILED else logging.DEBUG
            log.log(level, "run %s ended after %.3f s: %s", run_id, elapsed, outcome)


def _run(request: Any, run_id: str) -> dict[str, Any]:
    """The run between its events: every failure becomes one RunFailedError (and, with live events, one
    `run.failed` event). With the default event detail nothing is written but DBOS's own records."""
    live = run_request.event_detail(request) == run_request.LIVE_DETAIL
    announced = False
    try:
        definition = _definition(request)
        plan = _load(definition)
        flow = plan.flow
        if live:
            _write_event(events.run_started(flow.name, now_ms()))
            announced = True
        # Enqueuers other than this package's client (the API, Flame Chorus) may not have checked inputs.
        try:
            inputs = validate_run_inputs(flow, request.get(run_request.INPUTS))
        except FlowValidationError as err:
            raise RunFailedError(f"invalid run inputs: {err.one_line()}") from None
        if plan.is_chain:  # in this workflow's thread, step after step: no event loop, no task per node
            result = execute_chain(plan, inputs, run_id, live)
        else:  # independent branches run concurrently, on an event loop of this workflow's own
            result = dbos_compat.run_on_own_loop(execute_graph(plan, inputs, run_id, live))
    except Exception as err:
        failure = err if isinstance(err, RunFailedError) else RunFailedError(f"{type(err).__name__}: {one_line(err)}")
        if live:
            if not announced:
                _write_event(events.run_started(flow_label(request), now_ms()))
            _write_event(events.run_failed(str(failure), now_ms()))
            DBOS.close_stream(EVENTS_STREAM)
        raise failure from None
    if live:
        _write_event(events.run_finished(now_ms()))
        DBOS.close_stream(EVENTS_STREAM)
    return result


def _write_event(event: events.Event) -> None:
    DBOS.write_stream(EVENTS_STREAM, event)


def _definition(request: Any) -> Any:
    """The run's flow definition. A flow that travels with the run is part of the workflow's recorded input:
    no step. A stored flow is resolved in the recorded `provision` step, so a recovered run runs the
    definition its first execution resolved."""
    problems = run_request.request_problems(request)
    if problems:
        raise RunFailedError("invalid run request: " + "; ".join(problems))
    if request.get(run_request.FLOW) is not None:
        return request[run_request.FLOW]
    return DBOS.run_step(_PROVISION_STEP, _provision, str(request[run_request.FLOW_REF]))


def _load(definition: Any) -> FlowPlan:
    """The flow's plan: parsed and validated at most once per run, and once per distinct flow while cached
    (a stored flow may have changed since enqueue: what is validated is what runs)."""
    try:
        return PLANS.get(definition)
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
