"""Claiming on notification (dispatcher.py): a worker whose safety poll is a minute away still claims a run
enqueued, re-enqueued or released at once; it never takes more than its concurrency; and after a database
outage it listens again and loses nothing.

"At once" here means long before the minute-long safety poll: these tests tell a notified claim from a polled
one, they do not time the worker (the benchmark does)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fireflow_local.postgres import LocalPostgres
from fireflow_worker import migrate
from fireflow_worker.client import FireflowClient
from tests.support import flows, sideeffects
from tests.support.proc import WorkerProcess, wait_for

StartWorker = Callable[..., WorkerProcess]
SLOW_SAFETY_POLL = {"FIREFLOW_IDLE_POLL_INTERVAL_MS": "60000"}
# Far below the safety poll above: a run claimed within this was claimed because of a notification.
NOTIFIED_WITHIN = 20.0


def _rows(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, args)
        return cursor.fetchall() if cursor.description is not None else []


def test_should_claim_an_enqueued_run_without_waiting_for_the_safety_poll(
    client: FireflowClient, start_worker: StartWorker
) -> None:
    start_worker(**SLOW_SAFETY_POLL)
    time.sleep(1.0)  # the start-up claim is over: only a notification can wake the claimer now
    for who in ("a", "b", "c"):
        run_id = client.enqueue(flows.greet_flow(), inputs={"who": who})
        assert client.result(run_id, timeout_seconds=NOTIFIED_WITHIN) == {"hello": f"Hello {who}"}


def test_should_claim_a_resumed_run_and_honour_a_changed_queue_row_at_once(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker(**SLOW_SAFETY_POLL)
    # Hold the queue through its row (every worker reloads it when notified of the change).
    _rows(migrated_url, "UPDATE dbos.queues SET worker_concurrency = 0 WHERE name = 'fireflow-executions'")
    time.sleep(1.0)
    held = client.enqueue(flows.greet_flow(), inputs={"who": "held"})
    time.sleep(1.5)
    assert client.status(held).status == "ENQUEUED"
    _rows(migrated_url, "UPDATE dbos.queues SET worker_concurrency = 50 WHERE name = 'fireflow-executions'")
    assert client.result(held, timeout_seconds=NOTIFIED_WITHIN) == {"hello": "Hello held"}
    # A cancelled run resumed goes back to ENQUEUED (an UPDATE, not an INSERT): it is claimed at once too.
    asleep = client.enqueue(flows.sleep_flow(3600, name="nap"))
    wait_for(lambda: client.status(asleep).status == "PENDING", "the sleep to start")
    client.cancel(asleep)
    time.sleep(1.0)
    assert client.resume(asleep) == asleep
    wait_for(lambda: client.status(asleep).status == "PENDING", "the resumed run's claim", timeout=NOTIFIED_WITHIN)


def test_should_never_run_more_than_its_worker_concurrency(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    start_worker(DBOS_WORKER_CONCURRENCY="2")
    run_ids = [client.enqueue(flows.sleep_flow(0.4)) for _ in range(8)]
    most = 0
    while any(client.status(run_id).status != "SUCCESS" for run_id in run_ids):
        pending = _rows(migrated_url, "SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING'")[0][0]
        most = max(most, int(pending))
        time.sleep(0.02)
    assert most == 2  # every freed slot refilled, never a third run at once


def test_should_fill_a_freed_slot_with_a_run_another_enqueuer_sent_without_naming_its_queue(
    migrated_url: str, start_worker: StartWorker
) -> None:
    from dbos import DBOSClient  # noqa: PLC0415

    from fireflow_worker.engine import WORKFLOW_NAME  # noqa: PLC0415

    start_worker(DBOS_WORKER_CONCURRENCY="1", **SLOW_SAFETY_POLL)
    raw = DBOSClient(system_database_url=migrated_url)
    try:
        # The API's request carries no "queue": a run's end must still refill its queue's only slot.
        handles: list[Any] = [
            raw.enqueue(
                {"queue_name": "fireflow-executions", "workflow_name": WORKFLOW_NAME}, {"flow": flows.sleep_flow(0.2)}
            )
            for _ in range(4)
        ]
        for handle in handles:
            handle.get_result(polling_interval_sec=0.1)
    finally:
        raw.destroy()


def test_should_share_a_global_cap_between_workers_and_fill_freed_slots(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    capped = {"DBOS_QUEUE_CONCURRENCY": "1", "DBOS_WORKER_CONCURRENCY": "1", **SLOW_SAFETY_POLL}
    start_worker("worker-a", **capped)
    start_worker("worker-b", **capped)
    run_ids = [client.enqueue(flows.sleep_flow(0.3)) for _ in range(4)]
    for run_id in run_ids:  # each slot freed by either worker is taken on the run-end notification
        client.result(run_id, timeout_seconds=4 * NOTIFIED_WITHIN)
    starts = _rows(
        migrated_url,
        "SELECT started_at_epoch_ms, completed_at FROM dbos.workflow_status ORDER BY started_at_epoch_ms",
    )
    assert all(later[0] >= earlier[1] - 5 for earlier, later in itertools.pairwise(starts))


def _payloads_until_the_run_ends(listener: psycopg.Connection[Any], run_id: str) -> list[str]:
    """Every notification until `run_id`'s run-end announcement, and those sent in the same commit (the
    generator is never left early: notifications it read but did not hand out yet would be lost)."""
    payloads: list[str] = []
    deadline, ended = time.monotonic() + 60, float("inf")
    while time.monotonic() < min(deadline, ended + 0.5):
        for notify in listener.notifies(timeout=0.2):
            payloads.append(notify.payload)
            if notify.channel == "ff_workflow_terminal" and run_id in notify.payload:
                ended = min(ended, time.monotonic())
    return payloads


def test_should_wake_claimers_at_a_run_end_only_on_a_queue_with_a_global_cap(
    client: FireflowClient, start_worker: StartWorker, migrated_url: str
) -> None:
    # Every notification wakes every worker's listener: without a cap nobody waits for a run's end.
    listener = psycopg.connect(migrated_url, autocommit=True)
    try:
        listener.execute("LISTEN ff_workflow_terminal")
        listener.execute("LISTEN dbos_notifications_channel")
        start_worker()
        uncapped = client.enqueue(flows.greet_flow(), inputs={"who": "free"})
        assert "ff-run-ended" not in _payloads_until_the_run_ends(listener, uncapped)
        _rows(migrated_url, "UPDATE dbos.queues SET concurrency = 5 WHERE name = 'fireflow-executions'")
        capped = client.enqueue(flows.greet_flow(), inputs={"who": "capped"})
        assert "ff-run-ended" in _payloads_until_the_run_ends(listener, capped)
    finally:
        listener.close()


@pytest.fixture
def own_server() -> Iterator[LocalPostgres]:
    """A server of this test's own, to take away and bring back."""
    server = LocalPostgres(max_connections=100).start()
    yield server
    server.stop()


def test_should_finish_every_run_and_listen_again_after_a_database_outage(
    own_server: LocalPostgres, tmp_path: Path
) -> None:
    url = own_server.create_database("outage")
    assert migrate.apply(url).result == "ok"
    effects = {"FIREFLOW_PYTHON_NODE_MODULES": sideeffects.__name__}
    worker = WorkerProcess(url, "worker-a", **SLOW_SAFETY_POLL, **effects).start().wait_ready()
    trace = tmp_path / "trace.txt"
    try:
        with FireflowClient(url) as client:
            before = [client.enqueue(flows.sleep_flow(2)) for _ in range(3)]
            # Pure and effectful nodes around a sleep the outage falls into.
            mixed = client.enqueue(flows.mixed_flow(str(trace), sleep_seconds=2, branches=True), inputs={"who": "Li"})
            wait_for(lambda: all(client.status(r).status == "PENDING" for r in [*before, mixed]), "the runs to start")
        own_server.halt()  # mid-run: DBOS blocks and retries; its listener loses its connection
        time.sleep(3)
        own_server.start()
        with FireflowClient(url) as client:
            # Enqueued at once, most likely before DBOS's listener is back (its notification is then lost):
            # the worker claims it when the listener reconnects, long before the safety poll.
            during = client.enqueue(flows.greet_flow(), inputs={"who": "early"})
            for run_id in before:
                assert client.result(run_id, timeout_seconds=120) == {"nap": {"slept_seconds": 2}}
            assert client.result(mixed, timeout_seconds=120) == {
                "out": "first for Li; last after first",
                "aside": "aside Li",
            }
            assert trace.read_text().splitlines() == ["first", "last after first"]  # each effect once
            assert client.result(during, timeout_seconds=NOTIFIED_WITHIN) == {"hello": "Hello early"}
            # The listener is back, our wake-up still registered: a new run is claimed long before the safety poll.
            after = client.enqueue(flows.greet_flow(), inputs={"who": "back"})
            assert client.result(after, timeout_seconds=NOTIFIED_WITHIN) == {"hello": "Hello back"}
        assert worker.get("/readyz")[0] == 200
    finally:
        worker.stop()
