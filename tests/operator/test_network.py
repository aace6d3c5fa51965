"""A pool's network surface on the real API server, kept by the real operator: its NetworkPolicy created as
spec.networkPolicy says (ingress to the health port from metricsFrom, egress to DNS, the database and
extraEgress), replaced when that changes, deleted when it is switched off; and spec.bindAddress reaching the
workers (the process node here binds every pod to loopback: tests/worker/test_bind_address.py binds IPv6)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, CustomObjectsApi, NetworkingV1Api
from kubernetes.client.exceptions import ApiException

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.kube import rawapi
from tests.support.pools import OperatorProcess, create_secret, pool_body, wait_until

MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
PROMETHEUS = [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]
API = {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"port": 443, "protocol": "TCP"}]}


def _policy(api: ApiClient, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = rawapi.call(NetworkingV1Api(api).read_namespaced_network_policy, "pool", namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise
    return found


def _ingress_from(api: ApiClient, namespace: str) -> Any:
    policy = _policy(api, namespace)
    return policy["spec"]["ingress"][0]["from"] if policy and policy["spec"].get("ingress") else None


def _patch_pool(api: ApiClient, namespace: str, spec: dict[str, Any]) -> None:
    CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "pool", {"spec": spec})


def test_should_keep_the_pools_network_policy_as_its_spec_says(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    ns = kube_namespace
    create_secret(kube_api, ns, pool_database)
    network = {"enabled": True, "metricsFrom": MONITORING, "extraEgress": [API]}
    body = pool_body("pool", replicas=1, networkPolicy=network)
    CustomObjectsApi(kube_api).create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    wait_until("the NetworkPolicy", lambda: _policy(kube_api, ns) is not None)
    created = _policy(kube_api, ns)
    assert created is not None
    assert created["spec"]["podSelector"] == {"matchLabels": {"fireflow.persistent.ai/pool": "pool"}}
    assert created["spec"]["ingress"] == [{"from": MONITORING, "ports": [{"port": 8080, "protocol": "TCP"}]}]
    assert created["spec"]["egress"] == [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"ports": [{"port": 5432, "protocol": "TCP"}]},
        API,
    ]

    # A changed spec replaces it in place (the same object, a new content).
    _patch_pool(kube_api, ns, {"networkPolicy": {"metricsFrom": PROMETHEUS, "extraEgress": None}})
    wait_until("the NetworkPolicy replaced", lambda: _ingress_from(kube_api, ns) == PROMETHEUS)
    replaced = _policy(kube_api, ns)
    assert replaced is not None and replaced["metadata"]["uid"] == created["metadata"]["uid"]
    assert replaced["spec"]["egress"] == created["spec"]["egress"][:2]

    # Switched off, it goes; nothing else of the pool does.
    _patch_pool(kube_api, ns, {"networkPolicy": {"enabled": False}})
    wait_until("the NetworkPolicy deleted", lambda: _policy(kube_api, ns) is None)
    assert rawapi.call(CoreV1Api(kube_api).read_namespaced_service, "pool-workers", ns)["spec"]["clusterIP"] == "None"
    assert not rawapi.call(NetworkingV1Api(kube_api).list_namespaced_network_policy, ns)["items"]


def _env(api: ApiClient, namespace: str) -> dict[str, Any]:
    sts = rawapi.call(AppsV1Api(api).read_namespaced_stateful_set, "pool", namespace)
    return {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_should_bind_the_workers_where_the_pool_says_and_refuse_an_address_no_probe_reaches(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    ns = kube_namespace
    create_secret(kube_api, ns, pool_database)
    custom = CustomObjectsApi(kube_api)
    for address in ("127.0.0.1", "10.0.0.1", "localhost"):
        with pytest.raises(ApiException) as refused:
            body = pool_body("refused", bindAddress=address)
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body, dry_run="All")
        assert refused.value.status == 422
        assert 'spec.bindAddress: Unsupported value: "' + address in json.loads(str(refused.value.body))["message"]
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, pool_body("pool", replicas=1))
    wait_until("the StatefulSet", lambda: bool(AppsV1Api(kube_api).list_namespaced_stateful_set(ns).items))
    assert "FIREFLOW_HEALTH_HOST" not in _env(kube_api, ns)  # the worker's own 0.0.0.0
    _patch_pool(kube_api, ns, {"bindAddress": "::"})
    wait_until("the workers bound to ::", lambda: _env(kube_api, ns).get("FIREFLOW_HEALTH_HOST") == "::")
