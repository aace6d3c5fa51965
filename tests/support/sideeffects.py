"""Callables for the `python` node in tests: each leaves a trace outside the database, so a test can tell
how many times a node's body really ran (the allow-list names this module)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from subprocess import getoutput  # noqa: F401 - imported on purpose: the allow-list must not expose it

_BASE_EXCEPTIONS: dict[str, BaseException] = {
    "SystemExit": SystemExit(3),
    "KeyboardInterrupt": KeyboardInterrupt(),
    "GeneratorExit": GeneratorExit(),
    "BaseException": BaseException("a bare BaseException"),
}


def record(path: str, label: str) -> dict[str, str]:
    with Path(path).open("a") as file:
        file.write(label + "\n")
    return {"recorded": label}


def add(a: float, b: float) -> float:
    return a + b


def raise_base(kind: str) -> None:
    """Raise what a careless or hostile function may raise: not an Exception."""
    raise _BASE_EXCEPTIONS[kind]


def exit_process(path: str) -> None:
    """Record the attempt, then end the worker process on the spot, as a crash or the OOM killer would."""
    record(path, "attempt")
    os._exit(9)


def break_event_loop() -> None:
    """Stop DBOS's event loop from a node: the worker's own machinery breaking under it."""
    from fireflow_worker import dbos_internals  # noqa: PLC0415 - only in the worker's process

    loop, _ = dbos_internals.event_loop(dbos_internals.instance())
    assert loop is not None
    loop.call_soon_threadsafe(loop.stop)
    time.sleep(0.5)


def record_then_sleep(path: str, label: str, seconds: float) -> dict[str, str]:
    record(path, label)
    time.sleep(seconds)
    return {"recorded": label}


class Greeter:
    """A class in an allowed module: calling it would construct an object, not run a function."""

    def __init__(self, who: str = "x") -> None:
        self.who = who


greeter = Greeter()
shout = str.upper  # a builtin method bound under an allowed module's name


def shut_down_thread_pool() -> None:
    """Shut DBOS's thread pool down from a node: no step could run any more."""
    from fireflow_worker import dbos_internals  # noqa: PLC0415 - only in the worker's process

    pool = dbos_internals.thread_pool(dbos_internals.instance())
    assert pool is not None
    pool.shutdown(wait=False)


def record_then_fail(path: str, label: str, seconds: float) -> None:
    """Record the attempt, take `seconds`, then fail (a node whose retry policy would try it again)."""
    record(path, label)
    time.sleep(seconds)
    raise RuntimeError(f"{label} failed on purpose")


def fail_unless_exists(path: str, trace: str) -> dict[str, str]:
    """Fail until the file at `path` exists: a failure that a later resume can get past."""
    record(trace, "flaky")
    if not Path(path).exists():
        raise RuntimeError(f"{path} does not exist yet")
    return {"found": path}


def big_string(size: int) -> str:
    return "x" * size


def overlap(path: str, seconds: float) -> bool:
    """Record when this call started and ended (monotonic clock), to count how many ran at once."""
    started = time.monotonic()
    time.sleep(seconds)
    with Path(path).open("a") as file:
        file.write(f"{started} {time.monotonic()}\n")
    return True


def wait_for(path: str, seconds: float = 120.0) -> dict[str, str]:
    """Wait until the file at `path` exists (a gate the test opens), then return; fail after `seconds`."""
    deadline = time.monotonic() + seconds
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {seconds} s")
        time.sleep(0.05)
    return {"opened": path}
