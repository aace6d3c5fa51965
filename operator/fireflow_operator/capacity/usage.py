"""Others' connection usage, smoothed over a window so a burst does not remove a worker (pure).

Growing the pool is decided on the highest usage seen in the window (a burst may come back); shrinking it
below its current size on the lowest (only usage that lasted the whole window counts). Until a window has
been observed in this process, usage alone never shrinks a pool.

The operator's reconcile threads record at the same time (pools on one database share a key): the samples
are read and changed under one lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fireflow_operator.database.facts import Usage


@dataclass(frozen=True)
class UsageRange:
    high: Usage
    low: Usage
    full_window: bool  # samples span the whole window


def _combine(samples: list[Usage], pick: Callable[[Iterable[int]], int]) -> Usage:
    return Usage(pick(s.server for s in samples), pick(s.database for s in samples), pick(s.role for s in samples))


class UsageHistory:
    def __init__(self, window_seconds: float) -> None:
        self.window = window_seconds
        self._samples: dict[str, deque[tuple[float, Usage]]] = {}
        self._lock = threading.Lock()

    def record(self, key: str, usage: Usage, now: float) -> UsageRange:
        with self._lock:
            samples = self._samples.setdefault(key, deque())
            samples.append((now, usage))
            # Keep the newest sample older than the window: it says what held at the window's start.
            while len(samples) > 1 and samples[1][0] <= now - self.window:
                samples.popleft()
            full = samples[0][0] <= now - self.window
            values = [u for _, u in samples]
        return UsageRange(high=_combine(values, max), low=_combine(values, min), full_window=full)
