"""Callables for the `python` node in tests: each leaves a trace outside the database, so a test can tell
how many times a node's body really ran (the allow-list names this module)."""

from __future__ import annotations

from pathlib import Path


def record(path: str, label: str) -> dict[str, str]:
    with Path(path).open("a") as file:
        file.write(label + "\n")
    return {"recorded": label}


def add(a: float, b: float) -> float:
    return a + b
