"""Before a pool goes: stop its workers, then hand their PENDING runs back to the queue (I/O).

The URL comes from the user's Secret or, when that went first (deleted together with the pool, or with the
namespace), from the operator's copy (connection.py). When neither exists the runs cannot be reached: the
pool stays, with a condition and an event saying what to do, rather than strand them silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from fireflow_operator.api import conditions, names
from fireflow_operator.api.model import parse_spec
from fireflow_operator.children import connection
from fireflow_operator.children.builders import Pool
from fireflow_operator.database import recovery
from fireflow_operator.database.dsn import redact
from fireflow_operator.database.kept_connections import DatabaseQueryError, DatabaseUnreachableError
from fireflow_operator.kube import Kube
from fireflow_operator.settings import OperatorSettings


@dataclass(frozen=True)
class Waiting:
    """The finalizer cannot finish yet: what it waits for, and whether a person has to act."""

    message: str
    blocked: bool = False  # True: only a user can unblock it (reported as a condition and a Warning event)
    retry_seconds: float = 2.0


def _abandon_hint(namespace: str, pool_name: str) -> str:
    return (
        f"or abandon the runs with: kubectl -n {namespace} patch fireflowworkerpool {pool_name} --type=json "
        f'-p=\'[{{"op":"remove","path":"/metadata/finalizers"}}]\''
    )


def _secret_gone_message(namespace: str, pool_name: str, secret: str) -> str:
    return (
        f"cannot hand back the PENDING runs of pool {pool_name!r}: Secret {secret!r} and the operator's copy "
        f"{names.connection_secret_name(pool_name)!r} are both gone. Recreate Secret {secret!r} in namespace "
        f"{namespace} with the database URL to let the finalizer finish, {_abandon_hint(namespace, pool_name)}"
    )


def finalize(kube: Kube, settings: OperatorSettings, body: dict[str, Any]) -> Waiting | None:
    """None when done (the caller lets the pool go), else what it is still waiting for. Called again after
    it succeeded (kopf may), it finds the work done and changes nothing."""
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if names.ANNOTATION_RUNS_HANDED_BACK in kube.pool_annotations(namespace, name):
        connection.release_copy(kube, namespace, name)  # a no-op when an earlier call released it
        return None
    # Every version's StatefulSet: reconcile does nothing for a pool being deleted, and the garbage
    # collector waits for the pool itself, so nothing else would ever scale them down.
    for sts in kube.pool_statefulsets(namespace, name):
        if sts.spec.replicas and not sts.metadata.deletion_timestamp:
            kube.scale_to_zero(namespace, str(sts.metadata.name))
    left = sorted(kube.list_pod_names(namespace, names.selector_labels(name)))
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        return Waiting(f"waiting for the workers to drain and exit before their runs are handed back: {shown}")
    try:
        spec = parse_spec(body.get("spec") or {})
    except ValidationError:
        connection.release_copy(kube, namespace, name)
        return None  # an invalid pool never ran workers
    ever_ran = "currentTarget" in (body.get("status") or {})
    pool = Pool(name=name, namespace=namespace, uid=meta["uid"], spec=spec)
    source = connection.resolve(kube, pool, keep_copy=False)  # nothing new in a namespace being deleted
    if source.url is None:
        if not ever_ran:
            return None
        return Waiting(_secret_gone_message(namespace, name, spec.database.secret_ref.name), blocked=True)
    timeout = settings.database_timeout_seconds
    try:
        executors = recovery.pool_pending_executors(source.url, namespace, name, timeout_seconds=timeout)
        recovery.resume_runs_of(source.url, spec.dbos.application_name, executors, timeout_seconds=timeout)
    except (DatabaseUnreachableError, DatabaseQueryError) as err:
        if not ever_ran:
            connection.release_copy(kube, namespace, name)
            return None  # no worker of this pool ever started, so none can own a run
        message = (
            f"cannot reach the database to hand back the PENDING runs: {redact(str(err), source.url)}; the pool "
            f"goes once it is reachable, {_abandon_hint(namespace, name)}"
        )
        return Waiting(message, retry_seconds=settings.resync_seconds)
    # Recorded before the copy goes: a later call must not mistake the missing copy for a lost database URL.
    kube.annotate_pool(namespace, name, {names.ANNOTATION_RUNS_HANDED_BACK: str(len(executors))})
    connection.release_copy(kube, namespace, name)
    return None


def waiting_status(status: dict[str, Any], waiting: Waiting, generation: int) -> dict[str, Any]:
    """The pool's status once it says why its deletion waits: Ready=False, and Degraded=True with
    RunsNotRecovered when only a person can help (pure)."""
    old = list(status.get("conditions") or [])
    if waiting.blocked:
        reason = conditions.REASON_RUNS_NOT_RECOVERED
        new = conditions.set_condition(old, conditions.DEGRADED_CONDITION, True, reason, waiting.message, generation)
    else:
        reason, new = conditions.REASON_DELETING, old
    new = conditions.set_condition(new, conditions.READY, False, reason, waiting.message, generation)
    return {**status, "conditions": new}


def report_waiting(kube: Kube, body: dict[str, Any], waiting: Waiting) -> tuple[bool, dict[str, Any]]:
    """Say on the pool, as conditions, why its deletion waits; whether that changed what the pool said, and
    the status it now has (for the pool's series, which the alert on RunsNotRecovered reads)."""
    meta = body["metadata"]
    status = dict(body.get("status") or {})
    after = waiting_status(status, waiting, int(meta.get("generation", 0)))
    old, new = list(status.get("conditions") or []), after["conditions"]
    changed = kube.write_status(meta["namespace"], meta["name"], {"conditions": old}, {"conditions": new})
    return changed, after
