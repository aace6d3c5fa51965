"""No confused deputy: a person who may manage pools, but not read Secrets or create privileged pods, gets
neither through the operator. The pools are created as such a person (impersonated, RBAC enforced)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_secret,
    list_events,
    pool_body,
    wait_for_pool,
)

POOL_AUTHOR = "pool-author@example.com"
SECRET_CONTENT = "hunter2-is-someone-elses"


@pytest.fixture
def as_pool_author(kube_api: ApiClient, kube_namespace: str) -> Iterator[ApiClient]:
    """An API client for a user who may manage pools in the namespace, and read nothing else."""
    rbac = RbacAuthorizationV1Api(kube_api)
    rule = {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch", "create", "update", "patch"]}
    role: Any = {"metadata": {"name": "pool-author"}, "rules": [rule]}
    rbac.create_namespaced_role(kube_namespace, role)
    subject = {"kind": "User", "name": POOL_AUTHOR, "apiGroup": "rbac.authorization.k8s.io"}
    binding: Any = {"metadata": {"name": "pool-author"}, "subjects": [subject],
               "roleRef": {"kind": "Role", "name": "pool-author", "apiGroup": "rbac.authorization.k8s.io"}}  # fmt: skip
    rbac.create_namespaced_role_binding(kube_namespace, binding)
    client = ApiClient(kube_api.configuration)
    client.set_default_header("Impersonate-User", POOL_AUTHOR)
    with pytest.raises(ApiException) as refused:
        CoreV1Api(client).read_namespaced_secret("anything", kube_namespace)
    assert refused.value.status == 403  # the author really may not read Secrets
    yield client
    client.close()


def _create_as(author: ApiClient, namespace: str, name: str, **spec: Any) -> None:
    CustomObjectsApi(author).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, pool_body(name, **spec))


def _nothing_leaked(api: ApiClient, namespace: str, operator: OperatorProcess) -> None:
    pools: Any = CustomObjectsApi(api).list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    texts = [json.dumps(p.get("status")) for p in pools["items"]]
    texts += [f"{e.reason} {e.message}" for e in list_events(api, namespace)] + [operator.output()]
    for text in texts:
        assert SECRET_CONTENT not in text and "hunter2" not in text


def _other_teams_secret(api: ApiClient, namespace: str, *, shared: bool) -> None:
    labels = {"fireflow.persistent.ai/usable-by-pools": "true"} if shared else {}
    body: Any = {"metadata": {"name": "other-team", "labels": labels},
                 "data": {"url": base64.b64encode(f"password {SECRET_CONTENT}".encode()).decode()}}  # fmt: skip
    CoreV1Api(api).create_namespaced_secret(namespace, body)


def test_should_not_use_a_secret_its_owner_did_not_share(
    kube_api: ApiClient, kube_namespace: str, as_pool_author: ApiClient, operator: OperatorProcess
) -> None:
    _other_teams_secret(kube_api, kube_namespace, shared=False)
    _create_as(as_pool_author, kube_namespace, "pool", replicas=1, database={"secretRef": {"name": "other-team"}})
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "refused",
                         lambda p: condition(p, "Degraded").get("reason") == "SecretNotShared")  # fmt: skip
    assert condition(pool, "Degraded")["message"].startswith("Secret 'other-team' is not shared with pools: ")
    assert (
        not CoreV1Api(kube_api)
        .list_namespaced_secret(kube_namespace, label_selector="app.kubernetes.io/managed-by=fireflow-operator")
        .items
    )  # no copy
    _nothing_leaked(kube_api, kube_namespace, operator)


def test_should_not_start_a_pool_on_a_secret_that_does_not_exist_yet(
    kube_api: ApiClient, kube_namespace: str, as_pool_author: ApiClient, operator: OperatorProcess, pool_database: str
) -> None:
    """An optional env Secret or a pull Secret that does not exist would not stop the pods, and whoever
    creates it later, unlabelled, would hand it to them: it counts as not shared, until it is."""
    create_secret(kube_api, kube_namespace, pool_database)
    optional = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "later", "key": "t", "optional": True}}}
    _create_as(as_pool_author, kube_namespace, "pool", replicas=1, env=[optional])
    _create_as(as_pool_author, kube_namespace, "pulls", replicas=1, imagePullSecrets=[{"name": "registry"}])
    for name, secret in (("pool", "later"), ("pulls", "registry")):
        pool = wait_for_pool(kube_api, kube_namespace, name, "refused",
                             lambda p: condition(p, "Degraded").get("reason") == "SecretNotShared")  # fmt: skip
        assert condition(pool, "Degraded")["message"] == (
            f"Secret {secret!r} does not exist in namespace {kube_namespace}, so it is not shared with pools: "
            f"create it and share it with: kubectl -n {kube_namespace} label secret {secret} "
            "fireflow.persistent.ai/usable-by-pools=true (or remove it from the pool's spec)"
        )
    assert not AppsV1Api(kube_api).list_namespaced_stateful_set(kube_namespace).items
    # Created unlabelled, it is still not the pool's.
    unlabelled: Any = {"metadata": {"name": "later"}, "stringData": {"t": "token"}}
    CoreV1Api(kube_api).create_namespaced_secret(kube_namespace, unlabelled)
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "refused as unshared",
                         lambda p: "is not shared" in condition(p, "Degraded").get("message", ""))  # fmt: skip
    assert condition(pool, "Degraded")["reason"] == "SecretNotShared"
    assert not AppsV1Api(kube_api).list_namespaced_stateful_set(kube_namespace).items


def test_should_never_echo_what_a_secret_holds(
    kube_api: ApiClient, kube_namespace: str, as_pool_author: ApiClient, operator: OperatorProcess
) -> None:
    _other_teams_secret(kube_api, kube_namespace, shared=True)
    _create_as(as_pool_author, kube_namespace, "pool", replicas=1, database={"secretRef": {"name": "other-team"}})
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "refused",
                         lambda p: condition(p, "Degraded").get("reason") == "InvalidDatabaseURL")  # fmt: skip
    assert condition(pool, "Degraded")["message"] == (
        "Secret 'other-team' key 'url' is not a PostgreSQL URL or key=value connection string"
    )
    _nothing_leaked(kube_api, kube_namespace, operator)


def test_should_not_lend_another_service_account(
    kube_api: ApiClient, kube_namespace: str, as_pool_author: ApiClient, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    account: Any = {"metadata": {"name": "deployer"}}
    CoreV1Api(kube_api).create_namespaced_service_account(kube_namespace, account)
    _create_as(as_pool_author, kube_namespace, "pool", replicas=1, serviceAccountName="deployer")
    pool = wait_for_pool(kube_api, kube_namespace, "pool", "refused",
                         lambda p: condition(p, "Degraded").get("reason") == "ServiceAccountNotAllowed")  # fmt: skip
    assert "spec.serviceAccountName 'deployer' is not allowed" in condition(pool, "Degraded")["message"]
    assert not AppsV1Api(kube_api).list_namespaced_stateful_set(kube_namespace).items


def test_should_refuse_privileged_and_root_pods_at_the_api_server(
    kube_namespace: str, as_pool_author: ApiClient
) -> None:
    for spec in ({"securityContext": {"privileged": True}}, {"podSecurityContext": {"runAsUser": 0}}):
        with pytest.raises(ApiException) as refused:
            _create_as(as_pool_author, kube_namespace, "pool", replicas=1, **spec)
        assert "is not allowed: pool pods run under the restricted Pod Security Standard" in str(refused.value.body)
