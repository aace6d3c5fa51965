"""Flow documents the worker tests run (dicts, as a client would send them)."""

from __future__ import annotations

from typing import Any


def sleep_flow(seconds: float, name: str = "sleepy") -> dict[str, Any]:
    return {"name": name, "nodes": {"nap": {"type": "sleep", "params": {"seconds": seconds}}}}


def side_effect_flow(trace_file: str, sleep_seconds: float) -> dict[str, Any]:
    """first -> nap -> last: two recorded side effects around a durable sleep."""
    record = "tests.support.sideeffects:record"
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


def mixed_flow(trace_file: str, sleep_seconds: float, *, branches: bool = False) -> dict[str, Any]:
    """Pure and effectful nodes in one flow: greet (template) -> first (python) -> shape (transform) -> nap
    (sleep) -> last (python, given the transform's value) -> out (template). With `branches`, a pure node
    `aside` besides them (no inputs but the run's), which makes the flow a graph, not a chain."""
    record = "tests.support.sideeffects:record"
    nodes: dict[str, Any] = {
        "greet": {"type": "template", "params": {"template": "first for ${inputs.who}"}},
        "first": {
            "type": "python",
            "params": {"function": record, "kwargs": {"path": trace_file, "label": "first"}},
            "after": ["greet"],
        },
        "shape": {
            "type": "transform",
            "params": {"value": {"said": "${nodes.greet}", "got": "${nodes.first.recorded}"}, "ops": [{"get": "got"}]},
        },
        "nap": {"type": "sleep", "params": {"seconds": sleep_seconds}, "after": ["shape"]},
        "last": {
            "type": "python",
            "params": {"function": record, "kwargs": {"path": trace_file, "label": "last after ${nodes.shape}"}},
            "after": ["nap"],
        },
        "out": {"type": "template", "params": {"template": "${nodes.greet}; ${nodes.last.recorded}"}},
    }
    if branches:
        nodes["aside"] = {"type": "template", "params": {"template": "aside ${inputs.who}"}}
    return {"name": "mixed", "inputs": {"who": {"type": "string"}}, "nodes": nodes}


def greet_flow() -> dict[str, Any]:
    return {
        "name": "greet",
        "inputs": {"who": {"type": "string"}},
        "nodes": {"hello": {"type": "template", "params": {"template": "Hello ${inputs.who}"}}},
    }


def failing_flow() -> dict[str, Any]:
    return {"name": "doomed", "nodes": {"boom": {"type": "fail", "params": {"message": "no luck"}}}}
