"""Versioned rollouts (pure): one StatefulSet per DBOS application version, the old ones retired by the runs
the database says they still have.

DBOS lets a worker execute only runs of its own application version, and hands version-less runs to the
latest registered version only. So when `spec.dbos.applicationVersion` changes, the new version gets its own
StatefulSet (its own pod names, so executor ids never collide), new runs go to it, and every older version
keeps a StatefulSet sized to what its own PENDING/ENQUEUED runs need — at least one worker while any are
left, at most its size when it was current — until the database shows none: then it is deleted. With
`spec.rollout.retireAfterSeconds`, what is still left after that long is forked onto the current version.
An image change within one application version stays a rolling update of the current StatefulSet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

CURRENT = "Current"
RETIRING = "Retiring"


@dataclass(frozen=True)
class Version:
    """One application version of a pool, as status.versions records it."""

    application_version: str
    index: int
    image: str
    state: str  # CURRENT or RETIRING
    max_replicas: int = 0  # a retiring version's size when it stopped being current
    retiring_since: float | None = None
    forked: bool = False

    def as_status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "applicationVersion": self.application_version, "index": self.index, "image": self.image,
            "state": self.state,
        }  # fmt: skip
        if self.state == RETIRING:
            status.update(maxReplicas=self.max_replicas, retiringSince=self.retiring_since, forked=self.forked)
        return status

    @classmethod
    def from_status(cls, status: dict[str, Any]) -> Version:
        return cls(
            application_version=str(status["applicationVersion"]),
            index=int(status["index"]),
            image=str(status["image"]),
            state=str(status["state"]),
            max_replicas=int(status.get("maxReplicas") or 0),
            retiring_since=status.get("retiringSince"),
            forked=bool(status.get("forked")),
        )


def switch_to(
    versions: list[Version], *, application_version: str, image: str, current_replicas: int, now: float
) -> list[Version]:
    """The versions once `application_version` (with `image`) becomes current.

    The previous current version starts retiring at the size it had; a version that comes back (a rollback
    to an application version that is still retiring) becomes current again on its own StatefulSet.
    """
    result: list[Version] = []
    back = next((v for v in versions if v.application_version == application_version), None)
    for version in versions:
        if version is back:
            continue
        if version.state == CURRENT:
            result.append(Version(
                version.application_version, version.index, version.image, RETIRING,
                max_replicas=current_replicas, retiring_since=now,
            ))  # fmt: skip
        else:
            result.append(version)
    index = back.index if back is not None else 1 + max((v.index for v in versions), default=-1)
    return [Version(application_version, index, image, CURRENT), *result]


@dataclass(frozen=True)
class RetirementPlan:
    replicas: int | None  # None: delete the StatefulSet (no run left)
    fork: bool = False  # fork what is left onto the current version now
    events: list[tuple[str, str]] = field(default_factory=list)


def plan_retirement(
    version: Version, *, pending: int, enqueued: int, worker_concurrency: int, now: float, retire_after: float | None
) -> RetirementPlan:
    """How a retiring version is sized: by its own runs, never above its old size, at least one while any."""
    left = pending + enqueued
    if left == 0:
        message = f"application version {version.application_version!r} has no run left: retired"
        return RetirementPlan(None, events=[("VersionRetired", message)])
    replicas = min(max(1, version.max_replicas), max(1, math.ceil(left / max(1, worker_concurrency))))
    since = version.retiring_since if version.retiring_since is not None else now
    if retire_after is not None and not version.forked and now - since >= retire_after:
        message = (
            f"application version {version.application_version!r} still had {left} run(s) ({pending} PENDING, "
            f"{enqueued} ENQUEUED) after spec.rollout.retireAfterSeconds ({int(retire_after)} s): forking them "
            f"onto the current version from their last completed step"
        )
        return RetirementPlan(replicas, fork=True, events=[("VersionForked", message)])
    message = (
        f"application version {version.application_version!r} blocks retirement: {left} run(s) left "
        f"({pending} PENDING, {enqueued} ENQUEUED), {replicas} worker(s) kept"
    )
    return RetirementPlan(replicas, events=[("VersionRetiring", message)])
