"""What one run may take from its worker: the size of each node's output, the total stored for the run, and
how many of its nodes run at once.

Every node output is stored in the database (its step's checkpoint) and held in memory until the run ends,
so an unbounded output is unbounded memory and database growth for everyone on the worker. Sizes are the
compact JSON text in UTF-8 (what is stored, give or take DBOS's encoding).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fireflow_worker.flows.limits import MAX_NESTING_DEPTH, format_bytes, json_bytes
from fireflow_worker.flows.nodetype import NodeError, output_nesting_error

NODE_OUTPUT_ENV = "FIREFLOW_MAX_NODE_OUTPUT_BYTES"
RUN_OUTPUT_ENV = "FIREFLOW_MAX_RUN_OUTPUT_BYTES"
PARALLEL_NODES_ENV = "FIREFLOW_MAX_PARALLEL_NODES"


@dataclass(frozen=True)
class RunLimits:
    """The worker's per-run limits (defaults protect a 512 MiB pod running a few runs at their limits)."""

    max_node_output_bytes: int = 4 * 1024 * 1024
    max_run_output_bytes: int = 16 * 1024 * 1024
    max_parallel_nodes: int = 8


# The least JSON text of a value nested deeper than the limit: an opening and a closing bracket a level.
_SHORTEST_TOO_DEEP = 2 * (MAX_NESTING_DEPTH + 1)


def checked_output_size(output: Any, limits: RunLimits, size: int | None = None) -> int:
    """The stored size of a node's output (`size` when already measured); a NodeError (not retried) when it
    is too big or too deep."""
    # Unmeasured, the nesting is checked first: the encoder cannot measure what nests past its recursion.
    if (size is None or size >= _SHORTEST_TOO_DEEP) and (too_deep := output_nesting_error(output)):
        raise too_deep
    if size is None:
        size = json_bytes(output)
    if size > limits.max_node_output_bytes:
        raise NodeError(
            f"the output is {format_bytes(size)}, more than the {format_bytes(limits.max_node_output_bytes)} "
            f"a node may produce ({NODE_OUTPUT_ENV})",
            retryable=False,
        )
    return size


class OutputBudget:
    """The outputs one run has stored so far, against its limit. Thread-safe: node steps run in threads."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._by_node: dict[str, int] = {}
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @property
    def sizes(self) -> Mapping[str, int]:
        """Each counted node's output size (its compact JSON in UTF-8, as json_bytes measures it)."""
        return self._by_node

    def reserve(self, node_id: str, size: int) -> None:
        """Count a new output, or raise a NodeError (not retried) when the run's total would pass the limit."""
        with self._lock:
            if node_id in self._by_node:
                return
            if self._used + size > self._limit:
                raise NodeError(
                    f"the run's stored outputs would reach {format_bytes(self._used + size)}, more than the "
                    f"{format_bytes(self._limit)} a run may store ({RUN_OUTPUT_ENV})",
                    retryable=False,
                )
            self._by_node[node_id] = size
            self._used += size

    def record(self, node_id: str, size: int) -> None:
        """Count an output recorded by an earlier execution of this run (a replayed step), whatever its size."""
        if node_id in self._by_node:  # reserved by this execution's attempt: the usual case, no lock needed
            return
        with self._lock:
            if node_id not in self._by_node:
                self._by_node[node_id] = size
                self._used += size
