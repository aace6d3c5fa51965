"""`template`: a string built from references, e.g. `template: "Hello ${inputs.who}"`.

The engine interpolates the references before the node runs, so the node returns its param as is.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from fireflow_worker.flows.nodetype import NodeContext, NodeType
from fireflow_worker.flows.refs import as_text


class TemplateParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    template: str

    @field_validator("template", mode="before")
    @classmethod
    def _as_text(cls, value: Any) -> Any:
        # `template: "${inputs.count}"` keeps the input's type; a template always renders to text.
        return value if value is None else as_text(value)


class TemplateNode(NodeType[TemplateParams]):
    name = "template"
    Params = TemplateParams
    pure = True  # its param, as is

    def run(self, params: TemplateParams, ctx: NodeContext) -> str:
        return params.template
