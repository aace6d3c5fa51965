"""The typed status: what each writer puts in status parses as the model, an undeclared field is refused by
name, and the CRD's status schema is the model's, complete (no preserved unknown fields)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import ValidationError

import fireflow_operator as operator_package
from fireflow_contract.migration_summary import MigrationSummary
from fireflow_operator.api import conditions
from fireflow_operator.api.crd import build_crd
from fireflow_operator.api.pool_status import OWNERS, PoolStatus, parse_status
from fireflow_operator.capacity.budget import compute_budget
from fireflow_operator.database.facts import DatabaseFacts, Usage
from fireflow_operator.migration import machine
from fireflow_operator.rollout import progress, versions


def _facts() -> DatabaseFacts:
    return DatabaseFacts(
        server="pg-1", database="exec", role="app", superuser=False, max_connections=100, superuser_reserved=3,
        reserved=0, database_limit=-1, role_limit=-1, others=Usage(5, 5, 5), schema_version=125,
        foreign_applications=(),
    )  # fmt: skip


def _migration_statuses() -> list[dict[str, object]]:
    base = machine.MigrationInput(
        target="t2", current_target="t1", migration={}, plan_job=machine.ABSENT, apply_job=machine.ABSENT,
        stale_apply_running=None, database_apply_running=None, schema_version=100, pods_left=0, now=1000.0,
        spec_key="k",
    )  # fmt: skip
    planning = machine.next_step(base).migration
    behind = MigrationSummary("plan", migration_needed=True, current_version=100, required_version=125)
    draining = machine.next_step(
        machine.MigrationInput(**{**base.__dict__, "migration": planning, "pods_left": 2,
                                  "plan_job": machine.JobObservation("succeeded", behind)})
    ).migration  # fmt: skip
    apply_failed = MigrationSummary("apply", result="failed")
    failed = machine.next_step(
        machine.MigrationInput(**{**base.__dict__, "migration": {**draining, "phase": machine.APPLYING},
                                  "apply_job": machine.JobObservation("failed", apply_failed)})
    ).migration  # fmt: skip
    return [planning, {**draining, "replicasBefore": 3}, failed]


def test_should_parse_what_every_writer_puts_in_the_status() -> None:
    budget = compute_budget(_facts(), per_replica=11, headroom=5, other_pools=[], others=Usage(5, 5, 5))
    version = versions.Version("1", 0, "fireflow-worker:1", versions.CURRENT)
    retiring = versions.Version("0", 1, "fireflow-worker:0", versions.RETIRING, 2, 900.0, True)
    previous = {"currentTarget": "t1", "currentImage": "fireflow-worker:1", "currentApplicationVersion": "1"}
    rollout = progress.started("t2", "fireflow-worker:2", "2", previous, 1000.0)
    stuck = progress.check(rollout, ready=0, updated=0, desired=2, now=2000.0, deadline=60.0, auto_rollback=True)
    conds = conditions.set_condition([], conditions.READY, False, conditions.REASON_REPLICAS_NOT_READY, "0/2", 3)
    for migration in _migration_statuses():
        status = parse_status({
            "phase": "Migrating", "phaseReason": "DrainingForMigration", "observedGeneration": 3, "replicas": 0,
            "readyReplicas": 0, "desiredReplicas": 0, "selector": "a=b", "schemaVersion": 100,
            "requiredSchemaVersion": 125, "targetImage": "fireflow-worker:2", "currentTarget": "t1",
            "currentImage": "fireflow-worker:1", "currentApplicationVersion": "1", "latestVersion": "1",
            "recoveredRuns": 4, "conditions": conds, "migration": migration, "rollout": stuck.rollout,
            "versions": [{**version.as_status(), "statefulSet": "pool", "replicas": 2, "readyReplicas": 1},
                         {**retiring.as_status(), "runsLeft": {"pending": 1, "enqueued": 0}}],
            "connectionBudget": budget.as_status(desired=2, allowed=2, retiring=1), "networkPolicy": "pool",
        })  # fmt: skip
        assert status.migration is not None and status.migration.phase == migration["phase"]
    assert stuck.rollout["state"] == progress.ROLLED_BACK


def test_should_refuse_an_undeclared_field_by_name() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_status({"phase": "Running", "migration": {"phase": "Done", "newField": 1}})
    assert "migration.newField" in str(caught.value)


def test_should_generate_a_complete_status_schema_from_the_model() -> None:
    version = build_crd()["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert "x-kubernetes-preserve-unknown-fields" not in str(status)
    assert set(status["properties"]) == {field.alias for field in PoolStatus.model_fields.values()}
    budget = status["properties"]["connectionBudget"]
    assert {"needed", "allowedReplicas", "limitedBy"} <= set(budget["properties"])
    assert status["properties"]["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


# StatusDraft's writers of named fields: a call writes them in the caller's module (their own bodies do not).
DRAFT_WRITERS = {
    "set_current": ("currentTarget", "currentImage", "currentApplicationVersion"),
    "blocked": ("phase", "phaseReason"),
}
STATUS_DICTS = {"new", "status"}  # StatusDraft.new, and a status dict handed to a writer (children/netpol.py)


def _status_writes(tree: ast.Module) -> set[str]:
    """The status fields a module writes: `<draft>.new[key] = ...`, `status[KEY] = ...` (constants resolved),
    `.update(key=...)`, `.pop(key)`, `.setdefault(key, ...)`, and calls of StatusDraft's field writers."""
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def is_status(node: ast.expr) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr in STATUS_DICTS) or (
            isinstance(node, ast.Name) and node.id in STATUS_DICTS
        )

    def key(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return constants.get(node.id) if isinstance(node, ast.Name) else None

    skipped = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in DRAFT_WRITERS
        for inner in ast.walk(node)
    }
    written: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            for target in node.targets:
                targets += target.elts if isinstance(target, ast.Tuple) else [target]
        elif isinstance(node, ast.AugAssign):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Subscript) and is_status(target.value) and key(target.slice):
                written.add(str(key(target.slice)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            if method == "update" and is_status(owner):
                written |= {str(k.arg) for k in node.keywords if k.arg}
            if method in ("pop", "setdefault") and is_status(owner) and node.args and key(node.args[0]):
                written.add(str(key(node.args[0])))
            written |= set(DRAFT_WRITERS.get(method, ()))
    return written


def test_should_write_every_status_field_from_its_one_owner() -> None:
    package = Path(operator_package.__file__).parent
    aliases = {info.alias or name for name, info in PoolStatus.model_fields.items()}
    writers: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package).with_suffix("").parts)
        if module.startswith("kubectl_plugin"):  # reads statuses, never writes one
            continue
        for field in _status_writes(ast.parse(path.read_text())):
            writers.setdefault(field, set()).add(module)
    assert set(OWNERS) == aliases, "every status field has an owner in pool_status.OWNERS"
    writers = {field: modules for field, modules in writers.items() if field in aliases}  # not a version's keys
    wrong = {field: sorted(modules) for field, modules in writers.items() if modules != {OWNERS.get(field)}}
    assert not wrong, f"status fields written outside their owner (pool_status.OWNERS): {wrong}"
    assert set(writers) == aliases, f"fields no module writes: {sorted(aliases - set(writers))}"


def test_should_see_a_field_written_outside_its_owner() -> None:
    # The scan itself: a second writer of a field, in each form the operator writes, is found.
    forms = [
        'draft.new["rollout"] = {}',
        "draft.new.update(rollout={})",
        'KEY = "rollout"\ndef f(status):\n    status[KEY] = 1',
        "draft.set_current('t', 'i', 'v')",
        'draft.new["phase"], other = 1, 2',
    ]
    found = [_status_writes(ast.parse(code)) for code in forms]
    assert found == [{"rollout"}, {"rollout"}, {"rollout"}, set(DRAFT_WRITERS["set_current"]), {"phase"}]
