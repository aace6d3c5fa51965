"""`sleep`: waits durably; a worker that restarts mid-sleep waits only for what is left."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from fireflow_worker.flows.nodetype import NodeContext, NodeType

_THIRTY_DAYS = 30 * 24 * 3600


class SleepParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seconds: float = Field(ge=0, le=_THIRTY_DAYS)


class SleepNode(NodeType[SleepParams]):
    name = "sleep"
    Params = SleepParams
    # Runs in the workflow, not as a step, so that ctx.sleep is the workflow's durable sleep.
    durable = True

    def run(self, params: SleepParams, ctx: NodeContext) -> dict[str, float]:
        ctx.sleep(params.seconds)
        return {"slept_seconds": params.seconds}
