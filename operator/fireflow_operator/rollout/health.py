"""What keeps a pool's pods from running, in the pods' own words (pure).

The kubelet and the controllers already say why a pod cannot start: a container waiting in
ImagePullBackOff or CrashLoopBackOff, a pod the scheduler cannot place, a pod the StatefulSet or Job
controller could not even create (a missing service account, a quota). The pool's conditions repeat their
reason and message, so `kubectl get ffwp` shows the problem within seconds instead of "Healthy".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

WAITING_PROBLEMS = (
    "ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull", "InvalidImageName", "CrashLoopBackOff",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "PreCreateHookError",
)  # fmt: skip
RECENT = timedelta(minutes=2)


@dataclass(frozen=True)
class PodProblem:
    reason: str
    message: str


def _one_line(text: str | None, limit: int = 400) -> str:
    return " ".join((text or "").split())[:limit]


def _last_exit(status: Any) -> str:
    terminated = status.last_state.terminated if status.last_state is not None else None
    if terminated is None:
        return ""
    said = _one_line(terminated.message)
    return f"; last exit code {terminated.exit_code}" + (f": {said}" if said else "")


def pod_problem(pod: Any) -> PodProblem | None:
    name = pod.metadata.name
    for status in (pod.status.init_container_statuses or []) + (pod.status.container_statuses or []):
        waiting = status.state.waiting if status.state is not None else None
        if waiting is not None and waiting.reason in WAITING_PROBLEMS:
            message = f"pod {name} container {status.name}: {_one_line(waiting.message) or waiting.reason}"
            return PodProblem(waiting.reason, message + _last_exit(status))
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == "Unschedulable":
            return PodProblem("Unschedulable", f"pod {name}: {_one_line(condition.message)}")
    return None


def first_pod_problem(pods: list[Any]) -> PodProblem | None:
    for pod in sorted(pods, key=lambda p: str(p.metadata.name)):
        if pod.metadata.deletion_timestamp is None and pod.status is not None:
            problem = pod_problem(pod)
            if problem is not None:
                return problem
    return None


def _when(event: Any) -> datetime | None:
    stamp: datetime | None = event.last_timestamp or event.event_time or event.first_timestamp
    if stamp is None:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def creation_problem(events: list[Any], missing_pods: dict[str, bool], now: datetime) -> PodProblem | None:
    """A recent FailedCreate of a controller (StatefulSet or Job, by name) that still lacks its pods."""
    recent = [e for e in events if e.reason == "FailedCreate" and (_when(e) or now) >= now - RECENT]
    for event in sorted(recent, key=lambda e: _when(e) or now, reverse=True):
        kind, name = event.involved_object.kind, event.involved_object.name
        if missing_pods.get(f"{kind}/{name}"):
            return PodProblem("FailedCreate", f"{kind} {name}: {_one_line(event.message)}")
    return None
