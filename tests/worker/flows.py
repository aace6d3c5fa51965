"""Flow documents the worker tests run (dicts, as a client would send them)."""

from __future__ import annotations

from typing import Any


def sleep_flow(seconds: float, name: str = "sleepy") -> dict[str, Any]:
    return {"name": name, "nodes": {"nap": {"type": "sleep", "params": {"seconds": seconds}}}}


def side_effect_flow(trace_file: str, sleep_seconds: float) -> dict[str, Any]:
    """first -> nap -> last: two recorded side effects around a durable sleep."""
    record = "tests.worker.sideeffects:record"
    return {
        "name": "side-effects",
        "nodes": {
            "first": {
                "type": "python",
                "params": {"function": record, "kwargs": {"path": trace_file, "label": "first"}},
            },
            "nap": {"type": "sleep", "params": {"seconds": sleep_seconds}, "after": ["first"]},
            "last": {
                "type": "python",
                "params": {"function": record, "kwargs": {"path": trace_file, "label": "last"}},
                "after": ["nap"],
            },
        },
    }


def greet_flow() -> dict[str, Any]:
    return {
        "name": "greet",
        "inputs": {"who": {"type": "string"}},
        "nodes": {"hello": {"type": "template", "params": {"template": "Hello ${inputs.who}"}}},
    }


def failing_flow() -> dict[str, Any]:
    return {"name": "doomed", "nodes": {"boom": {"type": "fail", "params": {"message": "no luck"}}}}
