"""The CRD is generated from the pydantic model; the committed copies must be that output, and the model
must accept exactly what the schema describes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from fireflow_operator.api.crd import build_crd, render_crd
from fireflow_operator.api.model import PoolSpec, parse_spec

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "fireflow.persistent.ai_fireflowworkerpools.yaml"
MINIMAL = {"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}}


def test_should_commit_exactly_the_generated_crd() -> None:
    assert CRD_FILE.read_text() == render_crd(), "regenerate: python -m fireflow_operator.api.crd --write"


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _undescribed(schema: dict[str, Any], path: str) -> list[str]:
    """The properties under `schema` (through objects, arrays and maps) that `kubectl explain` shows bare."""
    missing: list[str] = []
    for name, prop in schema.get("properties", {}).items():
        if not prop.get("description", "").strip():
            missing.append(f"{path}.{name}")
        missing += _undescribed(prop, f"{path}.{name}")
    for key, suffix in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(schema.get(key), dict):
            missing += _undescribed(schema[key], path + suffix)
    return missing


def test_should_describe_every_spec_and_status_property_of_the_committed_crd() -> None:
    root = yaml.safe_load(CRD_FILE.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _undescribed(root["properties"]["spec"], "spec") == []
    assert _undescribed(root["properties"]["status"], "status") == []


def _walk_defaults(schema: dict, model_defaults: dict, path: str = "") -> None:  # type: ignore[type-arg]
    for name, prop in schema.get("properties", {}).items():
        if "default" in prop and prop["default"] != {}:
            assert model_defaults[name] == prop["default"], f"{path}{name}"
        if prop.get("type") == "object" and "properties" in prop and isinstance(model_defaults.get(name), dict):
            _walk_defaults(prop, model_defaults[name], f"{path}{name}.")


def test_should_have_the_same_defaults_in_schema_and_model() -> None:
    defaults = parse_spec(MINIMAL).model_dump(by_alias=True, mode="json")
    _walk_defaults(_spec_schema(), defaults)
    assert defaults["dbos"]["workerConcurrency"] == 50
    assert defaults["dbos"]["pollingIntervalMs"] == 50
    assert defaults["dbos"]["systemDatabasePoolSize"] == 30
    assert defaults["dbos"]["shutdownDrainTimeoutMs"] == 25_000
    assert defaults["replicas"] is None


def test_should_have_the_same_fields_and_bounds_in_schema_and_model() -> None:
    def fields(model: type, schema: dict) -> None:  # type: ignore[type-arg]
        aliases = {info.alias or name: info for name, info in model.model_fields.items()}  # type: ignore[attr-defined]
        assert set(aliases) == set(schema["properties"]), model
        for alias, info in aliases.items():
            prop = schema["properties"][alias]
            for meta in info.metadata:
                for attr, key in (("ge", "minimum"), ("le", "maximum"), ("min_length", "minLength"),
                                  ("max_length", "maxLength")):  # fmt: skip
                    if hasattr(meta, attr):
                        expected = getattr(meta, attr)
                        actual = prop.get(key, prop.get("minItems" if key == "minLength" else "maxItems"))
                        assert actual == expected, f"{model.__name__}.{alias} {key}"
            sub = getattr(info.annotation, "model_fields", None)
            if sub is not None:
                fields(info.annotation, prop)

    fields(PoolSpec, _spec_schema())


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {**MINIMAL, "database": {"secretRef": {"name": "db"}, "url": "postgresql://u:p@h/d"}},
            "spec.database.url is not allowed",
        ),
        ({**MINIMAL, "terminationGracePeriodSeconds": 20}, "must be below spec.terminationGracePeriodSeconds"),
        (
            {**MINIMAL, "env": [{"name": "FIREFLOW_WORKER_ID", "value": "x"}]},
            "may not set a variable the operator manages",
        ),
        ({**MINIMAL, "queues": ["nope"]}, "spec.queues must be distinct names"),
        ({**MINIMAL, "replicas": -1}, "greater than or equal to 0"),
        ({**MINIMAL, "dbos": {"applicationName": "A"}}, "should match pattern"),
    ],
)
def test_should_reject_what_the_crd_rejects(spec: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValidationError, match=message):
        parse_spec(spec)


def test_should_parse_the_examples() -> None:
    for path in sorted((REPO / "examples").glob("*pool*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "FireflowWorkerPool":
                parse_spec(doc["spec"])
