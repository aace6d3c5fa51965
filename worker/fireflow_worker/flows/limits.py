"""Limits that keep a flow document and the data flowing through a run bounded, and how data is measured.

The nesting depth is fixed: a flow is configuration, and nothing legitimate nests 64 levels deep. The node
count per flow is the worker's `FIREFLOW_MAX_FLOW_NODES`; a client validating a flow before enqueue reads
the same variable from its own environment (default 1000) and the worker checks again before a run starts.
"""

from __future__ import annotations

import json
import os
from typing import Any

MAX_NESTING_DEPTH = 64
# The JSON string encoder json.dumps(ensure_ascii=False) uses (C when available).
_json_string = json.encoder.encode_basestring
# Compact JSON as stored, made once: json.dumps with arguments builds an encoder at every call.
_compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
MAX_FLOW_NODES_ENV = "FIREFLOW_MAX_FLOW_NODES"
DEFAULT_MAX_FLOW_NODES = 1000
MAX_FLOW_NODES_RANGE = (1, 100_000)


def max_flow_nodes() -> int:
    """`FIREFLOW_MAX_FLOW_NODES` of this process; raises ValueError naming the variable when it is bad."""
    raw = os.environ.get(MAX_FLOW_NODES_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_FLOW_NODES
    low, high = MAX_FLOW_NODES_RANGE
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise ValueError(f"invalid {MAX_FLOW_NODES_ENV}={raw!r}; accepted: an integer from {low} to {high}")
    return int(raw)


def nesting_problem(value: Any, limit: int = MAX_NESTING_DEPTH, where: str = "the value") -> str | None:
    """Why `value` nests lists/objects deeper than `limit`, or None. Iterative: any depth is safe to check."""
    if not isinstance(value, dict | list):
        return None
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return f"{where} is nested more than {limit} levels deep"
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def json_bytes(value: Any) -> int:
    """The size of a value as stored: its compact JSON text in UTF-8."""
    if isinstance(value, str):  # the common case (a template's output), without the encoder's set-up
        return len(_json_string(value).encode())
    return len(_compact_json(value).encode())


def format_bytes(size: int) -> str:
    """1048576 -> '1 MiB', 1536 -> '1.5 KiB', 10 -> '10 bytes'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"
