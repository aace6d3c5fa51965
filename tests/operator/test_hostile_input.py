"""Hostile and careless pools against the real API server and operator: everything the CRD accepts is either
built or reported with an exact message, and nothing makes the operator loop on exceptions."""

from __future__ import annotations

import json
import random
import string
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CustomObjectsApi, PolicyV1Api
from kubernetes.client.exceptions import ApiException

from fireflow_operator.api.model import GROUP, MAX_POOL_NAME, PLURAL, VERSION
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_pool,
    create_secret,
    get_pool,
    patch_pool,
    pool_body,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)

RESTRICTED = "is not allowed: pool pods run under the restricted Pod Security Standard"


def _rejection(api: ApiClient, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as caught:
        CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    assert caught.value.status == 422, caught.value.body
    return str(json.loads(str(caught.value.body))["message"])


@pytest.mark.parametrize(
    ("name", "spec", "expected"),
    [
        ("p" * (MAX_POOL_NAME + 1), {}, f"metadata.name must be at most {MAX_POOL_NAME} characters"),
        ("team.pool", {}, "the pool's StatefulSet, Service and pods are named after it"),
        ("1pool", {}, "start with a letter"),
        ("pool-v2", {}, "must not end in -v and a number: a pool's later application versions run in"),
        ("p", {"resources": {"limits": {"cpu": "lots"}}}, "spec.resources.limits.cpu in body should match"),
        ("p", {"resources": {"limits": {"not a resource!": "1"}}}, "every key must be a resource name"),
        ("p", {"tolerations": [{"key": "k", "operator": "Sometimes"}]},
         'spec.tolerations[0].operator: Unsupported value: "Sometimes"'),
        ("p", {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]},
         "a toleration with operator Exists takes no value"),
        ("p", {"nodeSelector": {"zone": "zürich"}}, "spec.nodeSelector.zone in body should match"),
        ("p", {"nodeSelector": {"ünïcode/key": "a"}}, "every key must be a label key"),
        ("p", {"podAnnotations": {"bad key": "a"}}, "every key must be a annotation key"),
        ("p", {"env": [{"name": "BAD=NAME", "value": "x"}]}, "spec.env[0].name in body should match"),
        ("p", {"env": [{"name": "BIG", "value": "x" * 300_000}]}, "spec.env[0].value: Too long"),
        ("p", {"env": [{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
         "set value or valueFrom, not both"),
        ("p", {"env": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}}]},
         "spec.env[0].valueFrom.fieldRef.fieldPath in body should match"),
        ("p", {"env": [{"name": "DBOS_SYSTEM_DATABASE_POOL_SIZE", "value": "500"}]},
         "spec.env may not set a variable the operator manages"),
        ("p", {"env": [{"name": "FIREFLOW_LOCAL_MODE", "value": "true"}]},
         "spec.env may not set a variable the operator manages"),
        ("p", {"securityContext": {"privileged": True}}, f"privileged: true {RESTRICTED}"),
        ("p", {"securityContext": {"runAsUser": 0}}, f"runAsUser: 0 {RESTRICTED}"),
        ("p", {"podSecurityContext": {"runAsNonRoot": False}}, f"runAsNonRoot: false {RESTRICTED}"),
        ("p", {"securityContext": {"allowPrivilegeEscalation": True}}, f"allowPrivilegeEscalation: true {RESTRICTED}"),
        ("p", {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
         'spec.securityContext.capabilities.add[0]: Unsupported value: "SYS_ADMIN"'),
        ("p", {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}},
         'spec.podSecurityContext.seccompProfile.type: Unsupported value: "Unconfined"'),
        ("p", {"serviceAccountName": "Deployer!"}, "spec.serviceAccountName in body should match"),
        ("p", {"migration": {"maxAttempts": 0}}, "spec.migration.maxAttempts in body should be greater than or equal"),
    ],
)  # fmt: skip
def test_should_reject_what_the_operator_could_not_build(
    kube_api: ApiClient, kube_namespace: str, name: str, spec: dict[str, Any], expected: str
) -> None:
    body = pool_body(name)
    body["spec"].update(spec)
    assert expected in _rejection(kube_api, kube_namespace, body)


def test_should_build_no_host_access_whatever_the_pool_asks(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    body = pool_body("pool", replicas=1)
    body["spec"].update(hostNetwork=True, hostPID=True, volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    body["spec"]["podSecurityContext"] = {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}]}
    CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    pod = AppsV1Api(kube_api).read_namespaced_stateful_set("pool", kube_namespace).spec.template.spec
    assert not pod.host_network and not pod.host_pid and not pod.security_context.sysctls
    assert [v.host_path for v in pod.volumes] == [None]
    assert pod.automount_service_account_token is False


def _settled_version(api: ApiClient, namespace: str, name: str, quiet: float = 3.0) -> str:
    """The pool's resourceVersion once it has not changed for `quiet` seconds."""
    version, since = get_pool(api, namespace, name)["metadata"]["resourceVersion"], time.monotonic()
    deadline = since + 120
    while time.monotonic() - since < quiet:
        assert time.monotonic() < deadline, "the pool kept changing for two minutes"
        time.sleep(0.5)
        now = get_pool(api, namespace, name)["metadata"]["resourceVersion"]
        if now != version:
            version, since = now, time.monotonic()
    return str(version)


def test_should_report_a_child_the_api_server_refuses_without_a_retry_storm(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    terms = [{"matchExpressions": [{"key": "zone", "operator": "Sometimes"}]}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    create_pool(kube_api, kube_namespace, "pool", replicas=1, affinity=affinity)
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "InvalidSpec",
                         lambda p: condition(p, "Degraded").get("reason") == "InvalidSpec")  # fmt: skip
    message = condition(pool, "Degraded")["message"]
    # The plan Job is the first child built with the pod fields: the API server's own words name it.
    assert message.startswith("the API server refused the pool's Job: Job.batch \"pool-plan-")
    assert 'Invalid value: "Sometimes": not a valid selector operator' in message
    # The reconcile that reported it may still be ending (kopf records the handled spec after the status write,
    # later on a loaded machine): the pool as it stands once that is done, then two resyncs with no new write.
    settled = _settled_version(kube_api, kube_namespace, "pool")
    time.sleep(12)  # two resyncs: the same message, no exception, no new write
    assert get_pool(kube_api, kube_namespace, "pool")["metadata"]["resourceVersion"] == settled
    assert "Traceback" not in operator.output()
    patch_pool(kube_api, kube_namespace, "pool", {"affinity": None})
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")


def test_should_follow_pod_disruption_budget_changes(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    create_pool(kube_api, kube_namespace, "pool", replicas=3)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    policy = PolicyV1Api(kube_api)
    assert policy.read_namespaced_pod_disruption_budget("pool", kube_namespace).spec.max_unavailable == 1
    patch_pool(kube_api, kube_namespace, "pool", {"podDisruptionBudget": {"maxUnavailable": 2}})
    wait_until(
        "the PDB updated",
        lambda: policy.read_namespaced_pod_disruption_budget("pool", kube_namespace).spec.max_unavailable == 2,
    )
    patch_pool(kube_api, kube_namespace, "pool", {"podDisruptionBudget": {"enabled": False}})
    wait_until("the PDB removed", lambda: not policy.list_namespaced_pod_disruption_budget(kube_namespace).items)


def test_should_reconcile_a_large_spec(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    env = [{"name": f"BLOB_{i}", "value": "x" * 30_000} for i in range(12)]  # 360 KB: past an annotation's 256 KiB
    create_pool(kube_api, kube_namespace, "pool", replicas=1, env=env)
    wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    patch_pool(kube_api, kube_namespace, "pool", {"env": [*env, {"name": "ONE_MORE", "value": "y"}]})
    apps = AppsV1Api(kube_api)

    def env_names() -> set[str]:
        return {
            e.name
            for e in apps.read_namespaced_stateful_set("pool", kube_namespace).spec.template.spec.containers[0].env
        }

    wait_until("the change rolled out", lambda: "ONE_MORE" in env_names())
    assert "Traceback" not in operator.output()


def _hostile_string(rng: random.Random) -> str:
    pools = [string.printable, "üñïçødé🔥\u202e\x00", "../../etc/passwd", "${nodes.x}", "'; DROP TABLE x; --"]
    return "".join(rng.choice(rng.choice(pools)) for _ in range(rng.choice([0, 1, 5, 64, 300])))


def _hostile_spec(rng: random.Random) -> dict[str, Any]:
    """A pool with a few fields set to something odd: wrong types, hostile strings, deep nesting."""
    odd: list[Any] = [_hostile_string(rng), -1, 2**63, 1.5, None, [], {}, {"a": {"b": {"c": [1, {"d": "e"}]}}}, True]
    fields = ["image", "replicas", "resources", "nodeSelector", "tolerations", "affinity", "podAnnotations",
              "podLabels", "priorityClassName", "env", "queues", "topologySpreadConstraints",
              "imagePullSecrets"]  # fmt: skip
    spec: dict[str, Any] = {}
    for field in rng.sample(fields, rng.randint(1, 3)):
        spec[field] = rng.choice(odd)
    if rng.random() < 0.3:
        spec["env"] = [{"name": _hostile_string(rng) or "X", "value": _hostile_string(rng)}]
    return spec


@pytest.fixture
def own_operator(kube_cluster: Any, kube_namespace: str) -> Iterator[OperatorProcess]:
    """An operator watching only this test's namespace: its log is about this corpus and nothing else."""
    process = OperatorProcess(kube_cluster, FIREFLOW_OPERATOR_NAMESPACES=kube_namespace).start()
    yield process
    process.stop()


def test_should_answer_every_pool_of_a_hostile_corpus_without_looping(
    kube_api: ApiClient, kube_namespace: str, own_operator: OperatorProcess, pool_database: str
) -> None:
    operator = own_operator
    create_secret(kube_api, kube_namespace, pool_database)
    rng = random.Random(20261130)
    accepted = []
    for index in range(40):
        body = pool_body(f"h{index}", replicas=0)
        body["spec"].update(_hostile_spec(rng))
        try:
            CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, body)
        except ApiException as err:
            assert err.status in (400, 422), err.body  # rejected, with a message, never a server error
            continue
        accepted.append(f"h{index}")
    for name in accepted:  # each answered: rolled out (at zero replicas) or reported
        wait_for_pool(
            kube_api,
            kube_namespace,
            name,
            f"{name} answered",
            lambda p: p.get("status", {}).get("phase") in ("Running", "Degraded"),
        )
    output = operator.output()
    first = min((at for at in (output.find("Traceback"), output.find("failed; retrying")) if at >= 0), default=-1)
    assert first < 0, output[max(0, first - 500) : first + 4000]  # the first failure and its traceback
