"""The status one reconcile builds, and the events it posts; every message passes the URL redaction."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fireflow_operator.api import conditions, names
from fireflow_operator.database.dsn import redact


@dataclass
class Outcome:
    """What a reconcile did, for the handler to report: events to post, and when to look again."""

    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type Normal|Warning, reason, message)
    phase: str = conditions.PENDING
    requeue_seconds: float | None = None
    allowed_replicas: int | None = None  # what the connection budget allows, when it was computed
    recovered_runs: int = 0
    status: dict[str, Any] = field(default_factory=dict)  # the status written (the pool's metrics)


def first_error(err: ValidationError) -> str:
    first = err.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"spec.{where}: {message}" if where else message


@dataclass
class StatusDraft:
    """The status being built in one reconcile; conditions and events redact the database URL's secret."""

    namespace: str
    name: str
    old: dict[str, Any]
    new: dict[str, Any]
    generation: int
    outcome: Outcome = field(default_factory=Outcome)
    url: str | None = None

    @classmethod
    def start(cls, body: dict[str, Any]) -> StatusDraft:
        meta = body["metadata"]
        old = dict(body.get("status") or {})
        old.pop("kopf", None)
        new = json.loads(json.dumps(old))
        new["observedGeneration"] = int(meta.get("generation", 0))
        new["selector"] = ",".join(f"{k}={v}" for k, v in names.selector_labels(meta["name"]).items())
        return cls(meta["namespace"], meta["name"], old, new, new["observedGeneration"])

    def cond(self, kind: str, ok: bool | None, reason: str, message: str) -> None:
        current = list(self.new.get("conditions") or [])
        self.new["conditions"] = conditions.set_condition(
            current, kind, ok, reason, redact(message, self.url), self.generation
        )

    def set_current(self, target: str, image: str, application_version: str) -> None:
        """The target the current version runs: the one place currentTarget, currentImage and
        currentApplicationVersion are written (by the gate's roll-out and by the fleet's rollback)."""
        self.new.update(currentTarget=target, currentImage=image, currentApplicationVersion=application_version)

    def event(self, kind: str, reason: str, message: str) -> None:
        self.outcome.events.append((kind, reason, redact(message, self.url)))

    def blocked(self, reason: str, message: str, *, not_ready: bool = True) -> None:
        """The pool cannot proceed: Degraded with `reason`, and nothing else is touched."""
        self.cond(conditions.DEGRADED_CONDITION, True, reason, message)
        if not_ready:
            self.cond(conditions.READY, False, reason, message)
        self.new["phase"], self.new["phaseReason"] = conditions.DEGRADED, reason

    def transition_events(self) -> None:
        """One event per transition: the conditions whose status or reason changed, those changed by one cause
        (one reason: Degraded=True and Ready=False for OverBudget) in one event. An act whose outcome is such a
        transition (going over budget, a failed or abandoned migration, a rollback) posts no event of its own:
        this one is its event."""
        old_conditions = list(self.old.get("conditions") or [])
        new_conditions = list(self.new.get("conditions") or [])
        changed = conditions.transitions(old_conditions, new_conditions)
        by_reason: dict[str, list[dict[str, Any]]] = {}
        for cond in changed:
            by_reason.setdefault(str(cond["reason"]), []).append(cond)
        # A condition joining a cause another one reported before and still reports (Ready=False once the rollout
        # settles, for a ConnectionBudget=False OverBudget posted earlier) is no new transition.
        still = {str(c["reason"]) for c in new_conditions if c not in changed}
        for reason, changes in by_reason.items():
            if reason in still:
                continue
            good = all(
                c["type"] == conditions.PROGRESSING
                or ((c["status"] == "True") != (c["type"] == conditions.DEGRADED_CONDITION))
                for c in changes
            )
            # Ready's message counts replicas; another condition's says more about the cause.
            said = next((c for c in changes if c["type"] != conditions.READY), changes[0])
            states = ", ".join(f"{c['type']}={c['status']}" for c in changes)
            self.outcome.events.append(("Normal" if good else "Warning", reason, f"{states}: {said['message']}"))
        self.outcome.phase = str(self.new.get("phase", conditions.PENDING))
