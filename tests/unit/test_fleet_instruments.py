"""The fleet benchmark's parsers (benchmarks/fleet.py) and the audit log's (tests/kube/audit.py), on the text
the API server, the operator and PostgreSQL write."""

from __future__ import annotations

from datetime import UTC, datetime

from benchmarks.fleet import (
    new_connections,
    operator_bytes,
    reconcile_requests,
    reconciles,
    response_bytes,
    samples,
    status_writes,
)
from tests.kube.audit import Request, count, parse_event

EVENT = {
    "kind": "Event",
    "stage": "ResponseComplete",
    "verb": "patch",
    "user": {"username": "fireflow-operator-under-test", "groups": ["system:masters"]},
    "userAgent": "OpenAPI-Generator/37.0.2/python",
    "objectRef": {"resource": "fireflowworkerpools", "subresource": "status", "namespace": "ns", "name": "pool"},
    "responseStatus": {"code": 200},
    "requestReceivedTimestamp": "2026-12-04T21:00:00.123456Z",
}


def _request(user: str, verb: str, resource: str) -> Request:
    return Request(user, "agent", verb, resource, "ns", "pool", 200, datetime(2026, 12, 4, tzinfo=UTC))


def test_should_read_user_verb_subresource_and_time_of_an_audit_event() -> None:
    request = parse_event(EVENT)
    assert (request.user, request.verb, request.resource, request.name, request.code) == (
        "fireflow-operator-under-test", "patch", "fireflowworkerpools/status", "pool", 200,
    )  # fmt: skip
    assert request.mutating
    assert request.received == datetime(2026, 12, 4, 21, 0, 0, 123456, tzinfo=UTC)


def test_should_name_a_non_resource_request_by_its_url() -> None:
    event = {**EVENT, "verb": "get", "objectRef": None, "requestURI": "/apis"}
    request = parse_event(event)
    assert (request.resource, request.mutating) == ("/apis", False)
    assert count([request, request]) == {("fireflow-operator-under-test", "get", "/apis", 200): 2}


_SIZES = 'apiserver_response_sizes_sum{component="apiserver",group="",resource="pods",scope="namespace",'
METRICS = "\n".join(
    [
        "# HELP apiserver_response_sizes Response size distribution in bytes.",
        'apiserver_response_sizes_bucket{component="apiserver",resource="pods",verb="LIST",le="+Inf"} 9',
        _SIZES + 'subresource="",verb="LIST",version="v1"} 9000',
        _SIZES + 'subresource="",verb="GET",version="v1"} 100',
        _SIZES + 'subresource="status",verb="GET",version="v1"} 5',
        'fireflow_operator_reconciles_total{result="ok"} 40.0',
        'fireflow_operator_reconciles_total{result="error"} 2.0',
        'fireflow_operator_reconciles_created{result="ok"} 1.7e9',
    ]
)


def test_should_sum_response_bytes_per_verb_and_resource() -> None:
    assert response_bytes(METRICS) == {("list", "pods"): 9000, ("get", "pods"): 100, ("get", "pods/status"): 5}
    assert [value for _, value in samples(METRICS, "apiserver_response_sizes_bucket")] == [9]


def test_should_give_the_operator_its_share_of_each_kind_of_request() -> None:
    sizes = {("list", "pods"): 900.0, ("get", "secrets"): 50.0}
    everyone = [_request("op", "list", "pods"), _request("kcm", "list", "pods"), _request("kcm", "list", "pods")]
    everyone += [_request("op", "get", "secrets"), _request("op", "watch", "pods")]
    assert operator_bytes(sizes, everyone, "op") == 900 / 3 + 50


def test_should_count_operator_reconciles_of_every_result() -> None:
    assert reconciles(METRICS) == 42


def test_should_count_new_connections_per_application_name() -> None:
    log = (
        "2026-12-04 21:00:00 UTC [1] LOG:  connection received: host=127.0.0.1 port=5\n"
        "2026-12-04 21:00:00 UTC [1] LOG:  connection authorized: user=postgres database=f0 "
        "application_name=fireflow-operator\n"
        "2026-12-04 21:00:01 UTC [2] LOG:  connection authorized: user=postgres database=f0 "
        "application_name=fireflow-operator SSL enabled (protocol=TLSv1.3)\n"
        "2026-12-04 21:00:02 UTC [3] LOG:  connection authorized: user=postgres database=f1 "
        "application_name=dbos_transact_client\n"
    )
    assert new_connections(log) == {"fireflow-operator": 2, "dbos_transact_client": 1}


def test_should_count_reconcile_requests_by_trigger() -> None:
    text = "\n".join(
        [
            'fireflow_operator_reconcile_requests_total{trigger="timer"} 400.0',
            'fireflow_operator_reconcile_requests_total{trigger="child"} 12.0',
            'fireflow_operator_reconcile_requests_created{trigger="timer"} 1.7e9',
        ]
    )
    assert reconcile_requests(text) == {"timer": 400, "child": 12}


def test_should_count_the_status_fields_the_operators_writes_changed() -> None:
    log = (
        "2026-12-06T03:46:10.519Z INFO fireflow.operator: status of ns/pool written: migration.attempt (removed), "
        "replicas\n"
        "2026-12-06T03:46:11.143Z INFO kopf.objects: [ns/pool] Handler 'pod_changed' succeeded.\n"
        "2026-12-06T03:46:12.143Z INFO fireflow.operator: status of ns/other written: replicas\n"
    )
    assert status_writes(log) == {"replicas": 2, "migration.attempt (removed)": 1}
