"""A namespace's Pods and Jobs (and, when asked, StatefulSets and ControllerRevisions) as watch events, ordered by
resourceVersion, and the operator's promises checked on them afterwards.

One etcd gives one revision counter, so resourceVersions of different kinds order every change in the
namespace. The checks are about what a user relies on: no worker runs while an apply Job does, one apply
Job at a time, and a worker of an image starts only once the schema is ready for it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import watch
from kubernetes.client import ApiClient, AppsV1Api, BatchV1Api, CoreV1Api


@dataclass(frozen=True)
class Change:
    rv: int
    kind: str  # "Pod", "Job", "StatefulSet" or "ControllerRevision"
    type: str  # ADDED, MODIFIED, DELETED
    name: str
    component: str  # worker, migration-plan, migration-apply
    image: str
    finished: str  # Jobs: "Complete", "Failed" or ""
    summary: dict[str, Any] = field(default_factory=dict)  # a migration Job pod's termination line
    exit_codes: tuple[int, ...] = ()  # a Pod's containers that terminated, now or last time
    owner: str = ""  # a ControllerRevision's StatefulSet


def _summary(message: str | None) -> dict[str, Any]:
    for line in reversed((message or "").splitlines()):
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            return parsed
    return {}


def _pod_change(rv: int, kind: str, event_type: str, obj: Any) -> Change:
    labels = obj.metadata.labels or {}
    summary: dict[str, Any] = {}
    exits: list[int] = []
    for status in obj.status.container_statuses or []:
        for state in (status.state, status.last_state):
            terminated = state.terminated if state is not None else None
            if terminated is not None:
                exits.append(int(terminated.exit_code))
                summary = summary or _summary(terminated.message)
    return Change(
        rv, kind, event_type, obj.metadata.name, labels.get("app.kubernetes.io/component", ""),
        obj.spec.containers[0].image, "", summary, tuple(exits),
    )  # fmt: skip


def _job_change(rv: int, kind: str, event_type: str, obj: Any) -> Change:
    labels = obj.metadata.labels or {}
    done = [c.type for c in obj.status.conditions or [] if c.status == "True" and c.type in ("Complete", "Failed")]
    image = obj.spec.template.spec.containers[0].image
    return Change(rv, kind, event_type, obj.metadata.name, labels.get("app.kubernetes.io/component", ""), image,
                  done[0] if done else "")  # fmt: skip


def _statefulset_change(rv: int, kind: str, event_type: str, obj: Any) -> Change:
    labels = obj.metadata.labels or {}
    image = obj.spec.template.spec.containers[0].image
    return Change(rv, kind, event_type, obj.metadata.name, labels.get("app.kubernetes.io/component", ""), image, "")


def _revision_change(rv: int, kind: str, event_type: str, obj: Any) -> Change:
    owner = next((o.name for o in obj.metadata.owner_references or [] if o.kind == "StatefulSet"), "")
    return Change(rv, kind, event_type, obj.metadata.name, "", "", "", owner=owner)


class Recorder:
    """Lists first (synchronously), then watches from the list's resourceVersion: nothing is missed, however
    late the watch threads get going on a busy machine."""

    def __init__(self, api: ApiClient, namespace: str, kinds: tuple[str, ...] = ("Pod", "Job")) -> None:
        self.changes: list[Change] = []
        self._stop = threading.Event()
        self._threads = []
        apps = AppsV1Api(api)
        sources = {
            "Pod": (CoreV1Api(api).list_namespaced_pod, _pod_change),
            "Job": (BatchV1Api(api).list_namespaced_job, _job_change),
            "StatefulSet": (apps.list_namespaced_stateful_set, _statefulset_change),
            "ControllerRevision": (apps.list_namespaced_controller_revision, _revision_change),
        }
        for kind in kinds:
            lister, build = sources[kind]
            listed: Any = lister(namespace)
            self.changes += [build(int(o.metadata.resource_version), kind, "ADDED", o) for o in listed.items]
            args = (lister, build, namespace, kind, listed.metadata.resource_version)
            self._threads.append(threading.Thread(target=self._watch, args=args, daemon=True))
        for thread in self._threads:
            thread.start()

    def _watch(self, lister: Any, build: Any, namespace: str, kind: str, since: str) -> None:
        stream = watch.Watch()
        try:
            for event in stream.stream(lister, namespace, resource_version=since, timeout_seconds=3600):
                obj = event["object"]
                self.changes.append(build(int(obj.metadata.resource_version), kind, event["type"], obj))
                if self._stop.is_set():
                    stream.stop()
        except Exception:
            if not self._stop.is_set():  # after close() the API server may go away under the watch
                raise

    def close(self) -> None:
        self._stop.set()

    def ordered(self) -> list[Change]:
        return sorted(self.changes, key=lambda c: c.rv)


def worker_pods(changes: list[Change]) -> list[Change]:
    return [c for c in changes if c.kind == "Pod" and c.component == "worker"]


class PodEvent(Protocol):
    @property
    def rv(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...


def fewest_alive(pods: Iterable[PodEvent], start: int, end: int) -> int:
    """The fewest of these pods that existed at any moment between resourceVersions `start` and `end` (`pods`:
    their watch events in resourceVersion order)."""
    live: set[str] = set()
    fewest: int | None = None
    for event in pods:
        if event.rv > end:
            break
        if event.rv >= start:
            fewest = len(live) if fewest is None else min(fewest, len(live))
        if event.type == "DELETED":
            live.discard(event.name)
        else:
            live.add(event.name)
    return len(live) if fewest is None else min(fewest, len(live))


def violations(changes: list[Change], *, online: bool = False) -> list[str]:
    """Every place where the recorded history breaks one of the migration gate's promises. `online`: the
    pool keeps serving during an apply (only a new target's workers wait for it)."""
    problems: list[str] = []
    live_workers: dict[str, str] = {}  # pod -> image
    running_applies: set[str] = set()
    latest_plan: dict[str, tuple[int, bool]] = {}  # image -> (rv, migration needed)
    applied_at: list[int] = []  # rvs at which an apply Job completed successfully
    seen_complete: set[str] = set()
    job_summaries: dict[str, dict[str, Any]] = {}
    for change in changes:
        if change.kind == "Pod" and change.component.startswith("migration-") and change.summary:
            job_summaries[change.name.rsplit("-", 1)[0]] = change.summary  # a Job's pod: <job>-<suffix>
        if change.kind == "Job":
            if change.component == "migration-apply":
                active = change.type != "DELETED" and not change.finished
                if change.finished == "Complete" and change.name not in seen_complete:
                    seen_complete.add(change.name)  # also when first seen already finished
                    applied_at.append(change.rv)
                if active and change.name not in running_applies:
                    if running_applies:
                        problems.append(f"rv {change.rv}: apply {change.name} while {sorted(running_applies)} run")
                    if live_workers and not online:
                        problems.append(f"rv {change.rv}: apply {change.name} while workers {sorted(live_workers)}")
                    running_applies.add(change.name)
                elif not active and change.name in running_applies:
                    running_applies.discard(change.name)
            elif (
                change.component == "migration-plan"
                and change.finished == "Complete"
                and change.name not in seen_complete
            ):
                seen_complete.add(change.name)  # its later events (the deletion too) say nothing new
                # A plan whose answer was not seen counts as "behind": the stricter reading.
                needed = bool(job_summaries.get(change.name, {}).get("migration_needed", True))
                latest_plan[change.image] = (change.rv, needed)
            continue
        if change.kind != "Pod" or change.component != "worker":
            continue
        if change.type == "DELETED":
            live_workers.pop(change.name, None)
            continue
        if change.name in live_workers:
            continue
        live_workers[change.name] = change.image
        if running_applies and not online:
            problems.append(f"rv {change.rv}: worker {change.name} added while {sorted(running_applies)} run")
        plan = latest_plan.get(change.image)
        if plan is None:
            problems.append(f"rv {change.rv}: worker {change.name} of {change.image} before any plan for it")
        elif plan[1] and not any(plan[0] < rv < change.rv for rv in applied_at):
            problems.append(f"rv {change.rv}: worker {change.name} of {change.image} before the migration it needs")
    return problems
