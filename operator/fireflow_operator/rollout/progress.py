"""A rollout's progress deadline, and the rollback it may trigger (pure).

Every new target the gate rolls out (image or application version) starts a rollout, recorded in
status.rollout with the target it replaced. It completes once every worker of the current version runs the
new target and is ready. If it is still not complete after `spec.rollout.progressDeadlineSeconds`, it is
stuck (Progressing=False, RolloutStuck); with `spec.rollout.autoRollback` the previous target is restored
and the stuck one is not tried again until the spec names another target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PROGRESSING = "Progressing"
COMPLETE = "Complete"
STUCK = "Stuck"
ROLLED_BACK = "RolledBack"


def started(
    target: str, image: str, application_version: str, previous: dict[str, Any] | None, now: float
) -> dict[str, Any]:
    """status.rollout for a target that was just rolled out, replacing `previous` (currentTarget, ...)."""
    rollout: dict[str, Any] = {"target": target, "image": image, "applicationVersion": application_version,
                               "startedAt": now, "state": PROGRESSING}  # fmt: skip
    if previous and previous.get("currentTarget") and previous["currentTarget"] != target:
        rollout["previous"] = {
            "target": previous["currentTarget"],
            "image": previous["currentImage"],
            "applicationVersion": previous["currentApplicationVersion"],
        }
    return rollout


@dataclass(frozen=True)
class Verdict:
    rollout: dict[str, Any]
    stuck: str | None = None  # the message, while the rollout is stuck or was rolled back
    roll_back: bool = False  # restore rollout["previous"] now


def check(
    rollout: dict[str, Any],
    *,
    ready: int,
    updated: int,
    desired: int,
    now: float,
    deadline: float,
    auto_rollback: bool,
) -> Verdict:
    state = rollout.get("state")
    if state in (COMPLETE, None):
        return Verdict(rollout)
    if state == ROLLED_BACK:
        return Verdict(rollout, stuck=str(rollout.get("message", "")))
    if desired and ready >= desired and updated >= desired:
        return Verdict({**rollout, "state": COMPLETE})
    if now - float(rollout.get("startedAt", now)) < deadline:
        return Verdict(rollout)
    message = (
        f"{min(ready, updated)}/{desired} workers of {rollout.get('image')} (application version "
        f"{rollout.get('applicationVersion')!r}) ready within spec.rollout.progressDeadlineSeconds ({int(deadline)} s)"
    )
    previous = rollout.get("previous")
    if auto_rollback and previous:
        message += (
            f"; rolled back to {previous['image']} (application version {previous['applicationVersion']!r}) until "
            f"spec.image or spec.dbos.applicationVersion changes"
        )
        return Verdict({**rollout, "state": ROLLED_BACK, "message": message}, stuck=message, roll_back=True)
    return Verdict({**rollout, "state": STUCK, "message": message}, stuck=message)


def held_back(rollout: dict[str, Any], target: str) -> bool:
    """Whether the spec still names a target that was rolled back (the gate leaves it alone)."""
    return rollout.get("state") == ROLLED_BACK and rollout.get("target") == target
