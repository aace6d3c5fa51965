"""What an allowed module may hold besides its own functions: the `python` node must call only the latter."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from os import system as run_shell  # noqa: F401 - a builtin under another name
from subprocess import getoutput  # noqa: F401 - imported, not defined here: must stay out of reach
from typing import Any


def greet(who: str) -> str:
    return f"hello {who}"


def returns_a_set() -> set[int]:
    return {1, 2}


def raises_system_exit() -> None:
    raise SystemExit(4)


def raises_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


class Job:
    def __init__(self) -> None:
        self.done = True


class _Callable:
    def __call__(self) -> str:
        return "called"


callable_object = _Callable()
partial_greet = functools.partial(greet, "partial")
shout = str.upper
lambda_greet = lambda: "lambda"  # noqa: E731 - a lambda is a function defined here: allowed


async def coroutine() -> str:
    return "never awaited"


def generator() -> Iterator[int]:
    yield 1


async def async_generator() -> AsyncIterator[int]:
    yield 1


def any_kwargs(**kwargs: Any) -> dict[str, Any]:
    return kwargs
