"""The baseline: a raw DBOS worker doing the benchmark flow's three steps, with none of the flow engine.

Run as `python -m benchmarks.baseline_worker`; the benchmark starts it as a subprocess exactly like a
`fireflow-worker`, on a database migrated with plain `dbos migrate`. It reads the worker's own variables
where they mean the same (`DATABASE_URL_EXECUTIONS`, `FIREFLOW_WORKER_ID`, `DBOS_WORKER_CONCURRENCY`,
`DBOS_QUEUE_POLLING_INTERVAL_MS`, `DBOS_SYSTEM_DATABASE_POOL_SIZE`, `FIREFLOW_APPLICATION_VERSION`,
`DBOS_LOG_LEVEL`) and `BENCH_QUEUES`, a comma-separated list of the queues it registers and listens to
(registered like the worker's: no global cap, the same worker concurrency and polling interval). Once its
queues are registered it creates the file `BENCH_READY_FILE`; SIGTERM stops it. `BENCH_BURN_ITERATIONS`
(default 0) has each step first spend that many iterations of a pure Python loop (`burn`): a known amount of
interpreter work per run, whose cost in the worker's CPU `benchmarks/thread_cpu.py` measures.

The workflow is a plain `@DBOS.workflow` calling three `@DBOS.step` functions (`benchmarks/effects.py`) that
compute what the flow's template -> transform -> template nodes compute (and what the `python` nodes of the
effectful flow call), and it returns the flow's result. What it leaves out is
exactly the engine: the provision step, flow and input validation, the node-event stream, the metrics and
the run-end trigger.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from dbos import DBOS, DBOSConfig

from benchmarks.effects import card_value, greet_text, summary_text
from benchmarks.workload import RAW_WORKFLOW_NAME

BURN_ITERATIONS = int(os.environ.get("BENCH_BURN_ITERATIONS", "0"))


def burn(iterations: int) -> int:
    """Interpreter work and nothing else: no call, no allocation past the loop's integers."""
    total = 0
    for index in range(iterations):
        total += index
    return total


def _burning(function: Callable[..., Any]) -> Callable[..., Any]:
    if not BURN_ITERATIONS:
        return function

    def burning(*args: Any) -> Any:
        burn(BURN_ITERATIONS)
        return function(*args)

    return burning


greet_step, card_step, summary_step = (_burning(f) for f in (greet_text, card_value, summary_text))
greet = DBOS.step(name="greet")(greet_step)
card = DBOS.step(name="card")(card_step)
summary = DBOS.step(name="summary")(summary_step)


def raw_flow(request: dict[str, Any]) -> dict[str, Any]:
    """The 1 or 3 steps (`request["nodes"]`), as a plain sync workflow (DBOS's usual form)."""
    who = str(request["inputs"]["who"])
    if request.get("nodes") == 1:
        return {"greet": greet(who)}
    return {"summary": summary(card(greet(who), who))}


async def raw_flow_async(request: dict[str, Any]) -> dict[str, Any]:
    """The same as an async workflow (the form FireFlow's engine has, for concurrent branches)."""
    who = str(request["inputs"]["who"])
    greeting = await DBOS.run_step_async({"name": "greet"}, greet_step, who)
    if request.get("nodes") == 1:
        return {"greet": greeting}
    value = await DBOS.run_step_async({"name": "card"}, card_step, greeting, who)
    return {"summary": await DBOS.run_step_async({"name": "summary"}, summary_step, value)}


def main() -> int:
    env = os.environ
    queues = [name for name in env.get("BENCH_QUEUES", "fireflow-executions").split(",") if name]
    polling = int(env.get("DBOS_QUEUE_POLLING_INTERVAL_MS", "50")) / 1000
    config: DBOSConfig = {
        "name": env.get("DBOS_APPLICATION_NAME", "fireflow"),
        "system_database_url": env["DATABASE_URL_EXECUTIONS"],
        "sys_db_pool_size": int(env.get("DBOS_SYSTEM_DATABASE_POOL_SIZE", "30")),
        "application_version": env.get("FIREFLOW_APPLICATION_VERSION", "bench-baseline"),
        "executor_id": env.get("FIREFLOW_WORKER_ID", "baseline"),
        "run_migrations": False,
        "log_level": env.get("DBOS_LOG_LEVEL", "INFO").upper(),
        # The worker's pool setting, so that the comparison is of the engine, not of a pool option.
        "db_engine_kwargs": {"pool_pre_ping": env.get("FIREFLOW_POOL_PRE_PING", "false").lower() == "true"},
    }
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    DBOS(config=config)
    DBOS.workflow(name=RAW_WORKFLOW_NAME)(raw_flow_async if env.get("BENCH_ASYNC") else raw_flow)
    DBOS.listen_queues(queues)
    DBOS.launch()
    for name in queues:
        DBOS.register_queue(
            name,
            worker_concurrency=int(env.get("DBOS_WORKER_CONCURRENCY", "50")),
            global_concurrency=None,
            polling_interval_sec=polling,
        )
    ready_file = env.get("BENCH_READY_FILE")
    if ready_file:
        Path(ready_file).touch()
    stop.wait()
    DBOS.destroy(workflow_completion_timeout_sec=5)
    # Like the worker: running workflow threads would otherwise keep the interpreter alive.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
