"""The durable flow engine: one DBOS workflow per run, one DBOS step per node.

Step ids must be the same every time a workflow executes, or recovery cannot match recorded steps. Nodes
run as soon as their dependencies finish, so their start order depends on timing; the engine therefore
reserves one step id per node up front, in topological order, and each node runs at its own reserved id
whenever it becomes ready. A crash resumes at the first unfinished node; a finished node returns its
recorded output and never runs again.

A durable sleep cannot happen inside a step (a restarted step would sleep again from zero). A node type
marked `durable` asks for sleep through its context; the engine records the wake-up time as the step's
output and sleeps the remainder in workflow code, so after a crash only what is left is slept.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from dbos import DBOS, StepOptions

from fireflow_worker import metrics
from fireflow_worker.flow_store import ProvisionCache
from fireflow_worker.flows.graph import dependencies, output_nodes, resolve_params, topological_layers
from fireflow_worker.flows.model import Flow
from fireflow_worker.flows.nodetype import NodeContext, NodeError, parse_params, retry_policy, run_node
from fireflow_worker.flows.registry import default_registry
from fireflow_worker.flows.validate import FlowValidationError, load_flow, validate_run_inputs

WORKFLOW_NAME = "fireflow.run_flow"
EVENTS_STREAM = "events"


class RunFailedError(Exception):
    """A node failed after its retries; the run ends in ERROR with this message."""


class _UpstreamFailedError(Exception):
    """A node that never ran because a node it depends on failed."""


@dataclass
class EngineSettings:
    """What the engine needs from the running worker; set once by the runtime before launch."""

    provision_cache: ProvisionCache | None = None
    active_runs: set[str] = field(default_factory=set)
    # Runs whose execution here was cut short by shutdown: they stay PENDING for recovery.
    interrupted_runs: set[str] = field(default_factory=set)


SETTINGS = EngineSettings()


def _now_ms() -> int:
    return int(time.time() * 1000)


class _DeferredSleep:
    """Collects a durable node's sleep requests inside its step; the workflow sleeps them afterwards."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, seconds: float) -> None:
        self.seconds += max(0.0, seconds)


def _should_retry(err: BaseException) -> bool:
    """Failures another attempt cannot fix (bad params, missing references) are not retried."""
    return not (isinstance(err, NodeError) and not err.retryable)


def _run_node_step(run_id: str, node_id: str, node_type_name: str, params: dict[str, Any]) -> dict[str, Any]:
    """The body of one node's step: events around one attempt of the node."""
    status = DBOS.step_status
    attempt = 1 + (status.current_attempt or 0) if status is not None else 1
    node_type = default_registry().get(node_type_name)
    started = time.monotonic()
    DBOS.write_stream(
        EVENTS_STREAM,
        {"event": "node.started", "node": node_id, "type": node_type_name, "attempt": attempt, "at_ms": _now_ms()},
    )
    deferred_sleep = _DeferredSleep()
    ctx = NodeContext(run_id=run_id, node_id=node_id, sleeper=deferred_sleep, attempt=attempt)
    try:
        output = run_node(node_type, parse_params(node_type, params), ctx)
    except Exception as err:
        elapsed = time.monotonic() - started
        metrics.NODE_DURATION.labels(node_type_name, "failed").observe(elapsed)
        DBOS.write_stream(
            EVENTS_STREAM,
            {
                "event": "node.failed",
                "node": node_id,
                "attempt": attempt,
                "error": str(err) or type(err).__name__,
                "duration_ms": round(elapsed * 1000, 3),
                "at_ms": _now_ms(),
            },
        )
        raise
    elapsed = time.monotonic() - started
    metrics.NODE_DURATION.labels(node_type_name, "succeeded").observe(elapsed)
    wake_at_ms = _now_ms() + int(deferred_sleep.seconds * 1000) if deferred_sleep.seconds else None
    DBOS.write_stream(
        EVENTS_STREAM,
        {
            "event": "node.finished",
            "node": node_id,
            "attempt": attempt,
            "duration_ms": round(elapsed * 1000, 3),
            "at_ms": _now_ms(),
            **({"sleep_until_ms": wake_at_ms} if wake_at_ms else {}),
        },
    )
    return {"output": output, "wake_at_ms": wake_at_ms}


def _provision(request: dict[str, Any]) -> dict[str, Any]:
    """Resolve the run's flow (a stored one through the provision cache) and note the claim latency."""
    status = DBOS.get_workflow_status(DBOS.workflow_id or "")
    if status is not None and status.created_at and status.dequeued_at:
        metrics.CLAIM_LATENCY.labels(status.queue_name or "none").observe(
            max(0.0, (status.dequeued_at - status.created_at) / 1000)
        )
    if request.get("flow") is not None:
        definition: dict[str, Any] = request["flow"]
    else:
        if SETTINGS.provision_cache is None:
            raise RunFailedError("this worker cannot resolve stored flows (no database-backed cache)")
        definition = SETTINGS.provision_cache.get(str(request["flow_ref"]))
    load_flow(definition)  # a stored flow may have changed since enqueue: validate what will run
    return definition


async def _execute(flow: Flow, inputs: dict[str, Any], run_id: str) -> dict[str, Any]:
    order = [node_id for layer in topological_layers(flow) for node_id in layer]
    reservations = {node_id: DBOS.reserve_step() for node_id in order}
    deps = dependencies(flow)
    done: dict[str, asyncio.Future[Any]] = {node_id: asyncio.get_running_loop().create_future() for node_id in order}

    async def run_one(node_id: str) -> None:
        try:
            outputs = {dep: await done[dep] for dep in sorted(deps[node_id])}
        except (RunFailedError, _UpstreamFailedError):
            done[node_id].set_exception(_UpstreamFailedError(node_id))
            return
        spec = flow.nodes[node_id]
        retry = retry_policy(default_registry().get(spec.type), spec)
        options: StepOptions = {
            "name": f"node:{node_id}",
            "retries_allowed": retry.max_attempts > 1,
            "max_attempts": retry.max_attempts,
            "interval_seconds": retry.interval_seconds,
            "backoff_rate": retry.backoff_rate,
            "should_retry": _should_retry,
        }
        try:
            params = resolve_params(spec.params, inputs, outputs)
            result = await reservations[node_id].run_async(options, _run_node_step, run_id, node_id, spec.type, params)
        except Exception as err:
            done[node_id].set_exception(RunFailedError(f"node {node_id!r} failed: {err}"))
            return
        if result["wake_at_ms"]:
            await asyncio.sleep(max(0.0, (result["wake_at_ms"] - _now_ms()) / 1000))
        done[node_id].set_result(result["output"])

    await asyncio.gather(*(run_one(node_id) for node_id in order))
    failures = [f.exception() for f in done.values()]
    first_failure = next((err for err in failures if isinstance(err, RunFailedError)), None)
    if first_failure is not None:
        raise first_failure
    return {node_id: done[node_id].result() for node_id in output_nodes(flow)}


@DBOS.workflow(name=WORKFLOW_NAME)
async def run_flow(request: dict[str, Any]) -> dict[str, Any]:
    """Execute one FireFlow run. `request` is `{"flow": {...}} | {"flow_ref": name}` plus `"inputs"`."""
    run_id = DBOS.workflow_id or ""
    queue = str(request.get("queue", "none"))
    metrics.RUNS_STARTED.labels(queue).inc()
    metrics.ACTIVE_RUNS.inc()
    SETTINGS.active_runs.add(run_id)
    started = time.monotonic()
    try:
        definition = await DBOS.run_step_async({"name": "provision"}, _provision, request)
        flow = load_flow(definition)
        await DBOS.write_stream_async(EVENTS_STREAM, {"event": "run.started", "flow": flow.name, "at_ms": _now_ms()})
        try:
            # Enqueuers other than this package's client (the API, Flame Chorus) may not have checked inputs.
            try:
                inputs = validate_run_inputs(flow, request.get("inputs"))
            except FlowValidationError as err:
                raise RunFailedError(f"invalid run inputs: {err}") from None
            result = await _execute(flow, inputs, run_id)
        except RunFailedError as err:
            await DBOS.write_stream_async(EVENTS_STREAM, {"event": "run.failed", "error": str(err), "at_ms": _now_ms()})
            await DBOS.close_stream_async(EVENTS_STREAM)
            raise
        await DBOS.write_stream_async(EVENTS_STREAM, {"event": "run.finished", "at_ms": _now_ms()})
        await DBOS.close_stream_async(EVENTS_STREAM)
    except asyncio.CancelledError:
        SETTINGS.interrupted_runs.add(run_id)  # shutdown: not an outcome, the run is recovered later
        raise
    except BaseException:
        metrics.RUNS_FAILED.labels(queue).inc()
        raise
    else:
        metrics.RUNS_SUCCEEDED.labels(queue).inc()
        return result
    finally:
        metrics.RUN_DURATION.observe(time.monotonic() - started)
        metrics.ACTIVE_RUNS.dec()
        SETTINGS.active_runs.discard(run_id)
