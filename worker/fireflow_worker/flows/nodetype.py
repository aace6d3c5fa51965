"""The node-type interface: what a built-in or plugin node type implements, and how the engine calls it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from fireflow_worker.flows.limits import MAX_NESTING_DEPTH, json_bytes, nesting_problem
from fireflow_worker.flows.model import NodeSpec, RetryPolicy


class NodeError(Exception):
    """A node failed; `message` is what the engine records.

    `retryable=False` marks failures that another attempt cannot fix (bad params, a missing reference),
    so an engine that checks before its retrying step can fail the node at once.
    """

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable

    def __reduce__(self) -> tuple[Any, ...]:
        # DBOS stores a failed step's exception by pickling it; keep `retryable` across the copy.
        return (_node_error, (self.message, self.retryable))


def _node_error(message: str, retryable: bool) -> NodeError:
    return NodeError(message, retryable=retryable)


@dataclass(frozen=True)
class NodeContext:
    """What a running node may know and do, provided by the engine."""

    run_id: str
    node_id: str
    # The engine's durable sleep (DBOS.sleep in a workflow); time.sleep outside one.
    sleeper: Callable[[float], None]
    # 1-based; 1 when the engine cannot tell.
    attempt: int = 1

    def sleep(self, seconds: float) -> None:
        self.sleeper(seconds)


P = TypeVar("P", bound=BaseModel)


class NodeType(ABC, Generic[P]):
    """A kind of node. Subclasses set the class attributes and implement `run`.

    Instances are created per run with no arguments and hold no state.
    """

    # Unique across the registry; what a flow's `type:` names.
    name: ClassVar[str]
    # The pydantic model that params are validated against; should be P and should forbid extra fields.
    Params: ClassVar[type[BaseModel]]
    # Used when the flow does not give the node its own `retry`.
    retry: ClassVar[RetryPolicy] = RetryPolicy()
    # True: run in the workflow itself (it calls ctx.sleep), not as one retried step.
    durable: ClassVar[bool] = False
    # True: the output is a function of the params alone - deterministic, no I/O, no clock, no random state,
    # no ctx.sleep. The engine then computes it in the workflow instead of checkpointing it as a DBOS step:
    # a recovered run computes it again from the recorded outputs before it, which gives the same value.
    # A type that reads or changes anything outside its params must leave this False.
    pure: ClassVar[bool] = False

    @abstractmethod
    def run(self, params: P, ctx: NodeContext) -> Any:
        """Do the work and return a JSON-serialisable output; raise NodeError on failure."""


AnyNodeType = type[NodeType[Any]]


# The validation context of params resolved for an attempt: a validator may leave to the node's `run` what it
# checks again there (the `python` node's allow-list, read from the environment).
AT_RUN: Mapping[str, Any] = {"at_run": True}


def parse_params(node_type: AnyNodeType, params: Mapping[str, Any]) -> BaseModel:
    """Validate resolved params (no references left) against the node type's Params model."""
    try:
        return node_type.Params.model_validate(dict(params), context=AT_RUN)
    except ValidationError as exc:
        details = "; ".join(
            f"params.{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise NodeError(f"bad params for node type {node_type.name!r}: {details}", retryable=False) from exc


def run_node(node_type: AnyNodeType, params: BaseModel, ctx: NodeContext) -> Any:
    """Run one node and check that its output can be recorded as JSON.

    Exceptions other than NodeError pass through unchanged: in a durable node they may be the engine's
    own control flow (a cancelled workflow), which must not be turned into a node failure here.
    """
    return run_node_sized(node_type, params, ctx)[0]


def run_node_sized(node_type: AnyNodeType, params: BaseModel, ctx: NodeContext) -> tuple[Any, int]:
    """run_node, and the output's size as stored (its compact JSON in UTF-8), from the one encoding that
    checks it."""
    output = node_type().run(params, ctx)
    try:
        return output, json_bytes(output)
    except RecursionError:  # nested deeper than the encoder goes, so far deeper than the limit
        raise output_nesting_error(output) or NodeError("the output is nested too deeply", retryable=False) from None
    except (TypeError, ValueError) as exc:
        raise NodeError(f"output of node type {node_type.name!r} is not JSON: {exc}", retryable=False) from exc


def output_nesting_error(output: Any) -> NodeError | None:
    """The failure (not retried) of a node whose output nests deeper than MAX_NESTING_DEPTH, or None."""
    problem = nesting_problem(output, where="the output")
    return None if problem is None else NodeError(f"{problem} (the limit is {MAX_NESTING_DEPTH})", retryable=False)


def retry_policy(node_type: AnyNodeType, node: NodeSpec) -> RetryPolicy:
    """The node's own policy when the flow gives one, else its type's default."""
    return node.retry if node.retry is not None else node_type.retry
