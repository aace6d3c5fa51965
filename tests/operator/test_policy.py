"""What a pool author may get (pure): restricted pods, shared Secrets only, allowed service accounts, URLs
DBOS can use, one set of queue settings per database, and pod problems in the pods' own words."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace as Obj
from typing import Any

import pytest
from pydantic import ValidationError

from fireflow_operator.admission import policy, queue_settings, shards
from fireflow_operator.api import names
from fireflow_operator.api.model import parse_spec
from fireflow_operator.children.builders import Pool, build_statefulset
from fireflow_operator.rollout import health
from fireflow_operator.settings import SettingsError, load_settings

BASE = {"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}}


def _spec(**fields: Any) -> Any:
    return parse_spec({**BASE, **fields})


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"securityContext": {"privileged": True}}, "privileged: true is not allowed"),
        ({"securityContext": {"runAsUser": 0}}, "runAsUser: 0 is not allowed"),
        ({"podSecurityContext": {"runAsUser": 0}}, "runAsUser: 0 is not allowed"),
        ({"securityContext": {"runAsNonRoot": False}}, "runAsNonRoot: false is not allowed"),
        ({"securityContext": {"allowPrivilegeEscalation": True}}, "allowPrivilegeEscalation: true is not allowed"),
        ({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "NET_BIND_SERVICE"),
        ({"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, "RuntimeDefault"),
        ({"podSecurityContext": {"sysctls": [{"name": "kernel.x", "value": "1"}]}}, "Extra inputs are not permitted"),
        ({"hostNetwork": True}, "Extra inputs are not permitted"),
        ({"resources": {"limits": {"cpu": "lots"}}}, "'lots' is not a quantity"),
        ({"tolerations": [{"key": "k", "operator": "Maybe"}]}, "'Exists' or 'Equal'"),
        ({"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}, "operator Exists takes no value"),
        ({"nodeSelector": {"zone": "zürich"}}, "is not a label value"),
        ({"nodeSelector": {"bad key!": "a"}}, "is not a valid label key"),
        ({"env": [{"name": "BAD=NAME", "value": "x"}]}, "String should match pattern"),
        ({"env": [{"name": "BIG", "value": "x" * 40_000}]}, "at most 32768 characters"),
        ({"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
         "set value or valueFrom, not both"),
        ({"env": [{"name": "A", "valueFrom": {}}]}, "exactly one of fieldRef"),
        ({"env": [{"name": "DBOS_SYSTEM_DATABASE_POOL_SIZE", "value": "999"}]}, "may not set a variable"),
        ({"serviceAccountName": "Not_A_Name"}, "String should match pattern"),
        ({"imagePullSecrets": [{"name": "x", "extra": 1}]}, "Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_should_refuse_what_would_not_build_or_not_be_restricted(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _spec(**fields)


def test_should_build_restricted_pods_without_a_token() -> None:
    spec = _spec(securityContext={"runAsUser": 20000}, resources={"limits": {"cpu": "500m", "memory": 2**30}})
    pod = build_statefulset(Pool("p", "ns", "u", spec), image="i", application_version="1", replicas=1)["spec"][
        "template"
    ]["spec"]
    container = pod["containers"][0]
    assert container["securityContext"]["runAsUser"] == 20000
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"] == {"limits": {"cpu": "500m", "memory": 2**30}}
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostNetwork" not in pod and "volumes" in pod and all("hostPath" not in v for v in pod["volumes"])


def test_should_use_only_secrets_their_owner_shared() -> None:
    spec = _spec(env=[{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "t"}}}])
    assert policy.secrets_used(spec) == ["db", "api"]
    shared = {policy.SHARED_SECRET_LABEL: "true"}
    assert policy.unshared_secret(spec, "team", {"db": shared, "api": shared}) is None
    refusal = policy.unshared_secret(spec, "team", {"db": shared, "api": {}})
    assert refusal is not None and refusal.reason == "SecretNotShared"
    assert refusal.message == (
        "Secret 'api' is not shared with pools: whoever may write Secrets in namespace team shares it with: "
        "kubectl -n team label secret api fireflow.persistent.ai/usable-by-pools=true"
    )


def test_should_treat_a_missing_secret_as_not_shared_but_the_databases_as_missing() -> None:
    """Pods start without an optional env Secret or a pull Secret: one created later, unlabelled, would be
    theirs. The database URL's Secret is reported as SecretMissing where it is read (nothing starts without it)."""
    optional = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "t", "optional": True}}}
    spec = _spec(env=[optional], imagePullSecrets=[{"name": "registry"}])
    shared = {policy.SHARED_SECRET_LABEL: "true"}
    assert policy.unshared_secret(spec, "team", {"db": None, "api": shared, "registry": shared}) is None
    for missing in ("api", "registry"):
        refusal = policy.unshared_secret(spec, "team", {"db": shared, "api": shared, "registry": shared, missing: None})
        assert refusal is not None and refusal.reason == "SecretNotShared"
        assert refusal.message == (
            f"Secret {missing!r} does not exist in namespace team, so it is not shared with pools: create it and "
            f"share it with: kubectl -n team label secret {missing} fireflow.persistent.ai/usable-by-pools=true "
            "(or remove it from the pool's spec)"
        )


def test_should_use_only_pull_secrets_their_owner_shared() -> None:
    spec = _spec(imagePullSecrets=[{"name": "registry"}, {"name": "db"}])
    assert policy.secrets_used(spec) == ["db", "registry"]
    refusal = policy.unshared_secret(spec, "team", {"db": {policy.SHARED_SECRET_LABEL: "true"}, "registry": {}})
    assert refusal is not None and refusal.message.startswith("Secret 'registry' is not shared with pools: ")


def test_should_allow_only_the_service_accounts_the_installer_allowed() -> None:
    assert policy.service_account_refusal(_spec(), []) is None
    assert policy.service_account_refusal(_spec(serviceAccountName="default"), []) is None
    assert policy.service_account_refusal(_spec(serviceAccountName="workers"), ["workers"]) is None
    refusal = policy.service_account_refusal(_spec(serviceAccountName="deployer"), [])
    assert refusal is not None and refusal.message == (
        "spec.serviceAccountName 'deployer' is not allowed: this operator lets pools run as none but the "
        "namespace's default (the Helm value security.allowedServiceAccounts)"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("hunter2 is my password", "is not a PostgreSQL URL or key=value connection string"),
        ("host=db password=hunter2 dbname=x", "must be a postgresql:// URL"),
        ("postgresql://u:hunter2@a:5432,b:5432/db", "names 2 hosts"),
        ("postgresql://u:hunter2@/db?host=a,b,c", "names 3 hosts"),
        ("postgresql://u:hunter2@x@db/exec", "is ambiguous: libpq and SQLAlchemy would read different"),
        ("postgresql://u:hunter2/x@db/exec", "percent-encode special characters"),
    ],
)
def test_should_refuse_urls_dbos_cannot_use_without_echoing_them(url: str, message: str) -> None:
    refusal = policy.url_refusal(url, "db", "url")
    assert refusal is not None and message in refusal.message
    assert "hunter2" not in refusal.message and refusal.message.startswith("Secret 'db' key 'url' ")
    assert policy.url_refusal("postgres://u:p@db:5432/x?sslmode=require", "db", "url") is None


def test_should_refuse_a_younger_pool_that_disagrees_on_a_shared_queue() -> None:
    older = queue_settings.PoolOnDatabase("a", "pool-a", "2026-01-01T00:00:00Z", _spec(dbos={"workerConcurrency": 2}))
    younger = queue_settings.PoolOnDatabase(
        "b", "pool-b", "2026-02-01T00:00:00Z", _spec(dbos={"workerConcurrency": 40})
    )
    refusal = queue_settings.conflict(younger, [older])
    assert refusal is not None and refusal.reason == "QueueSettingsConflict"
    assert refusal.message.startswith(
        "pool a/pool-a on this database sets workerConcurrency 2 for fireflow-executions, this pool 40: "
    )
    assert queue_settings.conflict(older, [younger]) is None  # the older pool's settings stand
    sandbox_only = queue_settings.PoolOnDatabase("c", "c", "2026-03-01T00:00:00Z", _spec(queues=["fireflow-sandbox"]))
    assert queue_settings.conflict(sandbox_only, [older]) is None  # no queue in common


def test_should_read_a_pool_selector_as_labels_and_refuse_what_is_not_one() -> None:
    sharded = load_settings({"FIREFLOW_OPERATOR_POOL_SELECTOR": " shard=a , example.com/team=payments"})
    assert sharded.pool_selector == {"shard": "a", "example.com/team": "payments"}
    assert sharded.selects({"shard": "a", "example.com/team": "payments", "other": "x"})
    assert not sharded.selects({"shard": "b", "example.com/team": "payments"})
    assert not sharded.selects(None)
    assert load_settings({}).selects(None)  # no selector: every pool
    # One finalizer per shard, each recognised as a pool's: kopf drops its own from pools it does not select.
    shard_a, shard_b = names.pool_finalizer({"shard": "a"}), names.pool_finalizer({"shard": "b"})
    assert names.pool_finalizer({}) == names.FINALIZER and shard_a != shard_b
    assert shard_a == names.pool_finalizer({"shard": "a"}) and len(shard_a.split("/")[1]) <= 63
    assert all(map(names.is_pool_finalizer, (names.FINALIZER, shard_a))) and not names.is_pool_finalizer("kopf/x")
    for bad in ("shard", "shard=a,shard=b", "shard=zürich", "-x=a", "shard!=a"):
        with pytest.raises(SettingsError, match="is not a label key=value"):
            load_settings({"FIREFLOW_OPERATOR_POOL_SELECTOR": bad})


SERVER = "7300000000000000001"


def _pool_on(namespace: str, name: str, labels: dict[str, str], server: str, created: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels, "creationTimestamp": created},
        "status": {"connectionBudget": {"server": server, "database": name}},
    }


def test_should_refuse_the_younger_of_two_shards_pools_on_one_server_and_let_the_older_stand() -> None:
    shard_a = load_settings({"FIREFLOW_OPERATOR_POOL_SELECTOR": "shard=a"})
    shard_b = load_settings({"FIREFLOW_OPERATOR_POOL_SELECTOR": "shard=b"})
    older = _pool_on("a", "older", {"shard": "a"}, SERVER, "2026-12-01T10:00:00Z")
    younger = _pool_on("b", "younger", {"shard": "b"}, SERVER, "2026-12-01T10:00:05Z")
    elsewhere = _pool_on("c", "elsewhere", {"shard": "b"}, "7300000000000000002", "2026-11-01T00:00:00Z")
    fleet = [older, younger, elsewhere]

    def refused(pool: dict[str, Any], settings: Any) -> Any:
        return shards.shard_conflict(pool["metadata"], SERVER, fleet, settings.selects, settings.pool_selector)

    # Both report the server (the younger ran in shard a before it was relabelled): only the younger is refused.
    assert refused(older, shard_a) is None
    refusal = refused(younger, shard_b)
    assert refusal is not None and refusal.reason == "ServerSharedAcrossShards"
    assert "pool a/older, older than this one and on the same PostgreSQL server" in refusal.message
    assert "FIREFLOW_OPERATOR_POOL_SELECTOR=shard=b" in refusal.message
    # Created in the same second: namespace and name decide, the same way in every operator.
    twin = _pool_on("a", "twin", {"shard": "b"}, SERVER, "2026-12-01T10:00:00Z")
    assert shards.shard_conflict(twin["metadata"], SERVER, [older, twin], shard_b.selects, {"shard": "b"})
    assert not shards.shard_conflict(older["metadata"], SERVER, [older, twin], shard_a.selects, {"shard": "a"})
    unreconciled = {"metadata": {"namespace": "b", "name": "new", "labels": {}, "creationTimestamp": "2020-01-01"}}
    assert shards.shard_conflict(younger["metadata"], SERVER, [unreconciled], shard_b.selects, {"shard": "b"}) is None


def test_should_report_a_pool_another_operator_still_selects_and_not_one_moved_between_shards() -> None:
    sharded = shards.claim(load_settings({"FIREFLOW_OPERATOR_POOL_SELECTOR": "shard=a,team=x",
                                          "FIREFLOW_OPERATOR_LEADER_ELECTION_NAMESPACE": "ops"}))  # fmt: skip
    assert sharded == {"lease": "ops/fireflow-operator", "poolSelector": "shard=a,team=x", "namespaces": []}
    unsharded = {"lease": "other/fireflow-operator", "poolSelector": "", "namespaces": []}
    labels = {"shard": "a", "team": "x"}
    assert shards.other_claimant(unsharded, sharded, "apps", labels) == unsharded  # selects every pool
    assert shards.other_claimant(None, sharded, "apps", labels) is None
    assert shards.other_claimant(sharded, sharded, "apps", labels) is None
    moved = {"lease": "ops-b/fireflow-operator", "poolSelector": "shard=b", "namespaces": []}
    assert shards.other_claimant(moved, sharded, "apps", labels) is None  # its selector no longer matches
    elsewhere = {"lease": "ns/fireflow-operator", "poolSelector": "", "namespaces": ["team-b"]}
    assert shards.other_claimant(elsewhere, sharded, "apps", labels) is None
    upgraded = {**sharded, "poolSelector": "shard=a"}  # the same release before a helm upgrade
    assert shards.other_claimant(upgraded, sharded, "apps", labels) is None
    message = shards.overlap_message(unsharded, sharded)
    assert "Lease other/fireflow-operator (FIREFLOW_OPERATOR_POOL_SELECTOR: every pool" in message
    assert "give the releases disjoint poolSelector (or watchNamespaces) values" in message


def _pod(name: str, waiting: tuple[str, str] | None = None, unschedulable: str | None = None) -> Any:
    state = Obj(waiting=Obj(reason=waiting[0], message=waiting[1]) if waiting else None, terminated=None)
    last = Obj(terminated=Obj(exit_code=2, message="error: invalid DBOS_LOG_LEVEL='loud'\n"))
    status = Obj(name="worker", state=state, last_state=last)
    scheduled = [Obj(type="PodScheduled", status="False", reason="Unschedulable", message=unschedulable)]
    return Obj(
        metadata=Obj(name=name, deletion_timestamp=None),
        status=Obj(
            init_container_statuses=None, container_statuses=[status], conditions=scheduled if unschedulable else []
        ),
    )


def test_should_report_pod_problems_in_the_pods_own_words() -> None:
    pulling = _pod("pool-1", ("ImagePullBackOff", 'Back-off pulling image "nope:1"'))
    problem = health.first_pod_problem([_pod("pool-0"), pulling])
    assert problem == health.PodProblem(
        "ImagePullBackOff",
        'pod pool-1 container worker: Back-off pulling image "nope:1"; last exit code 2: error: invalid '
        "DBOS_LOG_LEVEL='loud'",
    )
    unplaced = _pod("pool-0", unschedulable="0/3 nodes are available: 3 Insufficient cpu.")
    assert health.first_pod_problem([unplaced]) == health.PodProblem(
        "Unschedulable", "pod pool-0: 0/3 nodes are available: 3 Insufficient cpu."
    )
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    failed = Obj(reason="FailedCreate", message='pods "pool-0" is forbidden: error looking up service account ns/x',
                 involved_object=Obj(kind="StatefulSet", name="pool"), last_timestamp=now - timedelta(seconds=5),
                 event_time=None, first_timestamp=None)  # fmt: skip
    stale = Obj(**{**failed.__dict__, "last_timestamp": now - timedelta(hours=1)})
    assert health.creation_problem([failed], {"StatefulSet/pool": True}, now) == health.PodProblem(
        "FailedCreate", 'StatefulSet pool: pods "pool-0" is forbidden: error looking up service account ns/x'
    )
    assert health.creation_problem([failed], {"StatefulSet/pool": False}, now) is None  # its pods exist now
    assert health.creation_problem([stale], {"StatefulSet/pool": True}, now) is None
