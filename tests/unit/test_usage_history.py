"""Others' connection usage over the window: samples recorded from the operator's reconcile threads at once are
all kept and read consistently (a reconcile once failed with `deque mutated during iteration`)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest

from fireflow_operator.capacity.usage import UsageHistory
from fireflow_operator.database.facts import Usage


@pytest.fixture
def frequent_switches() -> Iterator[None]:
    """Threads handed the interpreter's lock every microsecond: a race shows within a few thousand calls."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_should_record_from_many_threads_at_once(frequent_switches: None) -> None:
    history = UsageHistory(window_seconds=1000.0)
    failures: list[BaseException] = []

    def record(thread: int) -> None:
        try:
            for index in range(400):
                seen = history.record("server/db/role", Usage(thread, index, 1), now=float(index))
                assert seen.high.role == 1
        except BaseException as err:  # reported below
            failures.append(err)

    threads = [threading.Thread(target=record, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    final = history.record("server/db/role", Usage(0, 0, 1), now=400.0)
    assert final.high.server == 7  # every thread's samples within the window were kept


def test_should_keep_the_newest_sample_older_than_the_window() -> None:
    history = UsageHistory(window_seconds=10.0)
    history.record("k", Usage(9, 9, 9), now=0.0)
    history.record("k", Usage(1, 1, 1), now=5.0)
    seen = history.record("k", Usage(2, 2, 2), now=12.0)  # the window starts at 2: what held then was 9
    assert (seen.high.server, seen.low.server, seen.full_window) == (9, 1, True)
    seen = history.record("k", Usage(3, 3, 3), now=16.0)  # it starts at 6: 1 held then, 9 is gone
    assert (seen.high.server, seen.low.server, seen.full_window) == (3, 1, True)
