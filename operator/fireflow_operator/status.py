"""The status one reconcile builds, and the events it posts; every message passes the URL redaction."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fireflow_operator.api import conditions
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
        """One event per transition (see `transition_events`). An act whose outcome is such a transition (going
        over budget, a migration's step, a rollback) posts no event of its own: this one is its event."""
        old_conditions = list(self.old.get("conditions") or [])
        new_conditions = list(self.new.get("conditions") or [])
        self.outcome.events.extend(transition_events(old_conditions, new_conditions))
        self.outcome.phase = str(self.new.get("phase", conditions.PENDING))


# Conditions that restate the pool's state as a whole (Ready, Progressing, Degraded=False): in a reconcile where
# another condition says what happened, their changes are its consequences, and join its event.
def _restates(cond: dict[str, Any]) -> bool:
    kind, status = str(cond["type"]), str(cond["status"])
    return kind in (conditions.READY, conditions.PROGRESSING) or (
        kind == conditions.DEGRADED_CONDITION and status != "True"
    )


def _bad(cond: dict[str, Any]) -> bool:
    """A change a user may have to act on: a Warning (a migration at work leaves SchemaReady False, normally)."""
    kind, status = str(cond["type"]), str(cond["status"])
    if kind == conditions.DEGRADED_CONDITION:
        return status == "True"
    return kind in (conditions.READY, conditions.CONNECTION_BUDGET) and status != "True"


def _summary_lead(changes: list[dict[str, Any]]) -> dict[str, Any]:
    """Which restating change names an event of its own: a rollout that started, else Ready, else the first."""
    started = [c for c in changes if c["type"] == conditions.PROGRESSING and c["status"] == "True"]
    ready = [c for c in changes if c["type"] == conditions.READY]
    return (started or ready or changes)[0]


def transition_events(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(type, reason, message) per transition between two reconciles' conditions. The conditions one cause
    changed share its event (one reason: Degraded=True and Ready=False for OverBudget; or a cause and what it
    moved: SchemaReady=False for a migration's plan with Progressing=True and Ready=False); the event names the
    conditions it changed and the cause's message. A condition joining a cause another one reported before and
    still reports (Ready=False once the rollout settles, for a ConnectionBudget=False OverBudget posted earlier)
    is no new transition."""
    changed = conditions.transitions(old, new)
    still = {str(c["reason"]) for c in new if c not in changed}
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for cond in changed:
        if str(cond["reason"]) not in still:
            by_reason.setdefault(str(cond["reason"]), []).append(cond)
    causes = [changes for changes in by_reason.values() if not all(_restates(c) for c in changes)]
    restating = [c for changes in by_reason.values() if all(_restates(c) for c in changes) for c in changes]
    if not restating:
        return [_event(changes) for changes in causes]
    if not causes:
        lead = _summary_lead(restating)
        return [_event([lead], [c for c in restating if c is not lead])]
    return [_event(causes[0], restating), *(_event(changes) for changes in causes[1:])]


def _event(own: list[dict[str, Any]], joined: Sequence[dict[str, Any]] = ()) -> tuple[str, str, str]:
    """The event of one cause: its reason, and the message of its most telling condition (Ready's counts
    replicas; another condition's says more about the cause)."""
    said = next((c for c in own if c["type"] != conditions.READY), own[0])
    states = ", ".join(f"{c['type']}={c['status']}" for c in [*own, *joined])
    return ("Warning" if any(_bad(c) for c in own) else "Normal", str(own[0]["reason"]), f"{states}: {said['message']}")
