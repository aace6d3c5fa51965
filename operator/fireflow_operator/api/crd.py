"""Build the FireflowWorkerPool CRD from the pydantic model, so schema and model cannot drift.

`python -m fireflow_operator.api.crd` prints it; `python -m fireflow_operator.api.crd --write` (from the repository
root) updates the copies in `crds/` and the Helm chart, and tests regenerate it and compare.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from fireflow_operator.api.k8s_types import cel_string
from fireflow_operator.api.model import (
    GROUP,
    KIND,
    MAX_POOL_NAME,
    PLURAL,
    POOL_NAME,
    SHORT_NAME,
    VERSION,
    VERSIONED_NAME,
    PoolSpec,
)
from fireflow_operator.api.pool_status import PoolStatus

_KEEP = {
    "type", "description", "default", "minimum", "maximum", "minLength", "maxLength", "pattern", "enum",
    "items", "properties", "required", "additionalProperties", "minItems", "maxItems",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations", "x-kubernetes-list-type",
    "x-kubernetes-int-or-string", "maxProperties", "format", "x-kubernetes-list-map-keys",
}  # fmt: skip


def _structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's JSON schema -> a Kubernetes structural schema: refs inlined, `X | None` as X, no titles."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        assert len(options) == 1, f"only `X | None` unions map to a structural schema: {schema}"
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return _structural({**options[0], **rest}, defs)
    out: dict[str, Any] = {}
    if "const" in schema:  # a one-value Literal
        out["enum"] = [schema["const"]]
    for key, value in schema.items():
        if (
            key not in _KEEP
            or (key == "default" and value is None)
            or (isinstance(value, bool) and key == "additionalProperties")
        ):
            continue
        if key == "properties":
            out[key] = {name: _structural(prop, defs) for name, prop in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields") and "type" not in out:
        out["type"] = "object"
    if (
        out.get("type") == "object"
        and "properties" in out
        and not {"default", "required", "x-kubernetes-validations"} & out.keys()
    ):
        # An absent section still gets its fields' defaults from the API server.
        out["default"] = {}
    return out


# Every child is named after the pool; the longest child name must still be valid (model.MAX_POOL_NAME).
NAME_RULE = {
    "rule": f"self.metadata.name.size() <= {MAX_POOL_NAME} && self.metadata.name.matches({cel_string(POOL_NAME)})",
    "message": f"metadata.name must be at most {MAX_POOL_NAME} characters of a-z, 0-9 and '-', start with a letter "
    "and end with a letter or digit: the pool's StatefulSet, Service and pods are named after it",
}
# Version N's StatefulSet is `<pool>-vN`: a pool named so would share its StatefulSet and executor ids with that
# version of another pool.
VERSION_SUFFIX_RULE = {
    "rule": f"!self.metadata.name.matches({cel_string(VERSIONED_NAME)})",
    "message": "metadata.name must not end in -v and a number: a pool's later application versions run in "
    "StatefulSets named <pool>-v<N>; choose another name",
}


def _without_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """The operator writes the status whole: no API-server defaults in it."""
    out = {key: value for key, value in schema.items() if key != "default"}
    if "properties" in out:
        out["properties"] = {name: _without_defaults(prop) for name, prop in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _without_defaults(out["items"])
    return out


def status_schema() -> dict[str, Any]:
    """The status subresource's schema, from pool_status.PoolStatus."""
    schema = PoolStatus.model_json_schema(by_alias=True)
    return _without_defaults(_structural(schema, schema.get("$defs", {})))


# `kubectl get fireflow`: DESIRED is what was asked for, READY what runs; PHASE and REASON say why they differ.
PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas",
     "description": "Workers asked for (spec.replicas)"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas",
     "description": "Workers Ready"},
    {"name": "Version", "type": "string", "jsonPath": ".status.currentApplicationVersion",
     "description": "The DBOS application version the workers run"},
    {"name": "Schema", "type": "integer", "jsonPath": ".status.schemaVersion",
     "description": "The database's DBOS schema version"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.phaseReason",
     "description": "Why the pool is in its phase"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Image", "type": "string", "jsonPath": ".status.currentImage", "priority": 1},
    {"name": "Message", "type": "string", "priority": 1,
     "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"},
]  # fmt: skip


def build_crd() -> dict[str, Any]:
    schema = PoolSpec.model_json_schema(by_alias=True)
    spec_schema = _structural(schema, schema.get("$defs", {}))
    spec_schema.pop("default", None)  # spec itself is required
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": [SHORT_NAME, "ffpool"],
                "categories": ["fireflow"],  # `kubectl get fireflow`
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A pool of FireFlow workers running flows as durable DBOS workflows.",
                            "x-kubernetes-validations": [NAME_RULE, VERSION_SUFFIX_RULE],
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema(),
                            },
                        }
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def render_crd() -> str:
    header = (
        "# Generated by `python -m fireflow_operator.api.crd` from fireflow_operator/api/model.py and "
        "pool_status.py; do not edit.\n"
    )
    return header + yaml.safe_dump(build_crd(), sort_keys=False, width=120)


# The CRD's committed copies: for `kubectl apply -f crds/` and inside the Helm chart (which cannot read
# files outside its own directory). Tests check both equal `render_crd()`.
CRD_COPIES = (
    Path("crds/fireflow.persistent.ai_fireflowworkerpools.yaml"),
    Path("charts/fireflow-operator/files/fireflow.persistent.ai_fireflowworkerpools.yaml"),
)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        for copy in CRD_COPIES:
            copy.write_text(render_crd())
            print(f"wrote {copy}")
    else:
        sys.stdout.write(render_crd())
