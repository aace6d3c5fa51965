"""A pool's network surface, pure: where the workers' endpoint listens (spec.bindAddress) and what its
NetworkPolicy lets in and out (spec.networkPolicy)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from fireflow_operator.api.model import parse_spec
from fireflow_operator.children.builders import Pool, build_network_policy, build_statefulset

SPEC = {"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}}
MONITORING = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]


def _pool(**spec: object) -> Pool:
    return Pool(name="pool", namespace="ns", uid="uid-1", spec=parse_spec({**SPEC, **spec}))


def _env(pool: Pool) -> dict[str, Any]:
    container = build_statefulset(pool, image="i", application_version="1", replicas=1)["spec"]["template"]["spec"]
    return {e["name"]: e.get("value") for e in container["containers"][0]["env"]}


def test_should_bind_the_workers_endpoint_where_the_pool_says() -> None:
    # The worker's own default (every IPv4 address) is left to it: pods of older pools stay as they were.
    assert "FIREFLOW_HEALTH_HOST" not in _env(_pool())
    assert "FIREFLOW_HEALTH_HOST" not in _env(_pool(bindAddress="0.0.0.0"))
    assert _env(_pool(bindAddress="::"))["FIREFLOW_HEALTH_HOST"] == "::"
    for address in ("127.0.0.1", "::1", "10.0.0.1", "localhost"):  # probes reach the pod IP, unknown beforehand
        with pytest.raises(ValidationError, match="bindAddress"):
            _pool(bindAddress=address)


def test_should_let_nobody_in_and_only_dns_and_the_database_out_by_default() -> None:
    spec = build_network_policy(_pool(networkPolicy={"enabled": True}))["spec"]
    assert spec["podSelector"] == {"matchLabels": {"fireflow.persistent.ai/pool": "pool"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    assert spec["ingress"] == []  # not even the health port: the kubelet's probes are not subject to policies
    assert spec["egress"] == [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"ports": [{"port": 5432, "protocol": "TCP"}]},  # any address: no databaseTo
    ]


def test_should_open_the_health_port_to_metrics_from_and_add_the_extra_egress() -> None:
    api = {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    database = [{"podSelector": {"matchLabels": {"app": "postgres"}}}]
    policy = build_network_policy(_pool(networkPolicy={
        "enabled": True, "metricsFrom": MONITORING, "databaseTo": database, "databasePorts": [5432, 6432],
        "extraEgress": [api]}))  # fmt: skip
    assert policy["spec"]["ingress"] == [{"from": MONITORING, "ports": [{"port": 8080, "protocol": "TCP"}]}]
    assert policy["spec"]["egress"][1:] == [
        {"ports": [{"port": 5432, "protocol": "TCP"}, {"port": 6432, "protocol": "TCP"}], "to": database},
        api,
    ]
    assert policy["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
