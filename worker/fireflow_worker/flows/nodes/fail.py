"""`fail`: fails on purpose, always or only for the first N attempts, to exercise retries and failures."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fireflow_worker.flows.nodetype import NodeContext, NodeError, NodeType


class FailParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = "failed on purpose"
    # None: every attempt fails. N: attempts 1..N fail and attempt N+1 succeeds.
    fail_attempts: int | None = Field(default=None, ge=0)


class FailNode(NodeType[FailParams]):
    name = "fail"
    Params = FailParams

    def run(self, params: FailParams, ctx: NodeContext) -> dict[str, int]:
        if params.fail_attempts is None or ctx.attempt <= params.fail_attempts:
            raise NodeError(f"{params.message} (attempt {ctx.attempt})")
        return {"succeeded_on_attempt": ctx.attempt}
