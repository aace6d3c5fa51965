"""A steady stream of runs through a pool while it is upgraded, and what the database says about it afterwards:
every run's end, and the longest gap between two consecutive claims; and what it says of given runs (shared by
the upgrade tests on the local cluster, the upgrade e2e scenarios and benchmarks/bench_upgrade.py)."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass
from typing import Any

import psycopg

from fireflow_worker.client import FireflowClient

TICK = {"name": "tick", "nodes": {"tick": {"type": "template", "params": {"template": "tick"}}}}


@dataclass(frozen=True)
class Claims:
    runs: int
    unfinished: list[tuple[str, str]]  # (run id, status) of every run that did not succeed
    longest_gap_seconds: float  # between two consecutive claims while the traffic ran
    versions: dict[str, int]  # runs per application version that executed them


class Traffic:
    """Enqueues `flow` every `interval` seconds until stopped; all through one client."""

    def __init__(self, url: str, interval: float = 0.2, flow: dict[str, Any] | None = None) -> None:
        self.url = url
        self.interval = interval
        self.flow = flow or TICK
        self.runs: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._enqueue, daemon=True)
        self._thread.start()

    def _enqueue(self) -> None:
        with FireflowClient(self.url) as client:
            while not self._stop.wait(self.interval):
                self.runs.append(client.enqueue(self.flow))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def claims(self) -> Claims:
        with psycopg.connect(self.url) as conn:
            rows = conn.execute(
                "SELECT workflow_uuid, status, started_at_epoch_ms, application_version FROM dbos.workflow_status "
                "WHERE workflow_uuid = ANY(%s)",
                (self.runs,),
            ).fetchall()
        starts = sorted(int(r[2]) for r in rows if r[2] is not None)
        gaps = [(b - a) / 1000 for a, b in itertools.pairwise(starts)]
        versions: dict[str, int] = {}
        for row in rows:
            versions[str(row[3])] = versions.get(str(row[3]), 0) + 1
        unfinished = [(str(r[0]), str(r[1])) for r in rows if r[1] != "SUCCESS"]
        unfinished += [(run, "LOST") for run in set(self.runs) - {str(r[0]) for r in rows}]
        return Claims(len(self.runs), unfinished, max(gaps, default=0.0), versions)


def run_rows(url: str, runs: list[str]) -> dict[str, tuple[str, str, str]]:
    """run id -> (status, application version, executor id)"""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT workflow_uuid, status, application_version, executor_id FROM dbos.workflow_status "
            "WHERE workflow_uuid = ANY(%s)",
            (runs,),
        ).fetchall()
    return {str(r[0]): (str(r[1]), str(r[2]), str(r[3])) for r in rows}


def statuses(url: str, runs: list[str]) -> set[str]:
    return {status for status, _, _ in run_rows(url, runs).values()}


def versions(url: str, runs: list[str]) -> set[str]:
    return {version for _, version, _ in run_rows(url, runs).values()}
