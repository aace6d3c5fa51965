"""Invalid pools: rejected by the API server (OpenAPI + CEL) with their exact message, or reported by the
operator in a condition, never crash-looping it."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from kubernetes.client import ApiClient, AppsV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from fireflow_operator.api.model import GROUP, PLURAL, VERSION
from tests.support.pools import (
    OPERATOR_BIN,
    OperatorProcess,
    condition,
    create_secret,
    pool_body,
    pool_gone,
    wait_for_condition,
    wait_for_pool,
    wait_until,
)


def _create(api: ApiClient, namespace: str, body: dict[str, Any]) -> None:
    CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def _rejection(api: ApiClient, namespace: str, body: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as caught:
        _create(api, namespace, body)
    assert caught.value.status == 422
    return str(json.loads(str(caught.value.body))["message"])


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"image": None}, "spec.image: Required value"),
        (
            {"replicas": -1},
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        ({"replicas": 5000}, "spec.replicas in body should be less than or equal to 1000"),
        (
            {"database": {"secretRef": {"name": "db"}, "url": "postgresql://u:pw@db/x"}},
            "spec.database: Invalid value: spec.database.url is not allowed: put the URL in a Secret and "
            "reference it with spec.database.secretRef",
        ),
        (
            {"terminationGracePeriodSeconds": 20, "dbos": {"shutdownDrainTimeoutMs": 25000}},
            "spec: Invalid value: spec.dbos.shutdownDrainTimeoutMs must be below "
            "spec.terminationGracePeriodSeconds (in ms), or pods are killed mid-drain",
        ),
        (
            {"env": [{"name": "DATABASE_URL_EXECUTIONS", "value": "postgresql://x"}]},
            "spec.env may not set a variable the operator manages",
        ),
        ({"queues": ["fireflow-nope"]}, 'spec.queues[0]: Unsupported value: "fireflow-nope"'),
        ({"dbos": {"logLevel": "loud"}}, 'spec.dbos.logLevel: Unsupported value: "loud"'),
        ({"dbos": {"applicationName": "Not Valid"}}, "spec.dbos.applicationName in body should match"),
        (
            {"dbos": {"pollingIntervalMs": 0}},
            "spec.dbos.pollingIntervalMs in body should be greater than or equal to 1",
        ),
        (
            {"dbos": {"systemDatabasePoolSize": 1}},
            "spec.dbos.systemDatabasePoolSize in body should be greater than or equal to 2",
        ),
        (
            {"migration": {"lockTimeoutMs": 10}},
            "spec.migration.lockTimeoutMs in body should be greater than or equal to 100",
        ),
        ({"imagePullPolicy": "Sometimes"}, 'spec.imagePullPolicy: Unsupported value: "Sometimes"'),
        # The URL written inline: the refusal says why and what to do, not only that secretRef is missing.
        ({"database": {"url": "postgresql://u:pw@db/x"}}, "spec.database.url is not allowed: put the URL in a Secret"),
        ({"database": {}}, "spec.database.secretRef is required: the name (and key, default url) of a Secret"),
    ],
)
def test_should_reject_an_invalid_pool_with_its_exact_message(
    kube_api: ApiClient, kube_namespace: str, spec: dict[str, Any], expected: str
) -> None:
    body = pool_body("bad")
    body["spec"].update(spec)
    body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
    assert expected in _rejection(kube_api, kube_namespace, body)


def test_should_refuse_to_change_the_application_name(kube_api: ApiClient, kube_namespace: str) -> None:
    _create(
        kube_api,
        kube_namespace,
        pool_body("pool", dbos={"applicationName": "fireflow", "shutdownDrainTimeoutMs": 3000}),
    )
    with pytest.raises(ApiException) as caught:
        CustomObjectsApi(kube_api).patch_namespaced_custom_object(
            GROUP, VERSION, kube_namespace, PLURAL, "pool", {"spec": {"dbos": {"applicationName": "other"}}}
        )
    assert "applicationName is immutable" in json.loads(str(caught.value.body))["message"]


def test_should_report_a_missing_secret_in_a_condition_keep_running_and_let_the_pool_go(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess
) -> None:
    _create(kube_api, kube_namespace, pool_body("pool", replicas=1))
    pool = wait_for_pool(
        kube_api,
        kube_namespace,
        "pool",
        "SecretMissing",
        lambda p: condition(p, "Degraded").get("reason") == "SecretMissing",
    )
    assert condition(pool, "Degraded")["message"] == (
        f"Secret 'fireflow-db' with key 'url' not found in namespace {kube_namespace}"
    )
    assert pool["status"]["phase"] == "Degraded"
    create_secret(kube_api, kube_namespace, "postgresql://fireflow:pw@127.0.0.1:9/none")
    pool = wait_for_pool(
        kube_api,
        kube_namespace,
        "pool",
        "DatabaseUnreachable",
        lambda p: condition(p, "Degraded").get("reason") == "DatabaseUnreachable",
    )
    assert condition(pool, "ConnectionBudget")["status"] == "Unknown"
    assert "pw@" not in json.dumps(pool["status"])
    assert operator.process is not None and operator.process.poll() is None
    # No worker of it ever started, so no run can be its to hand back: the unreachable database does not hold it.
    CustomObjectsApi(kube_api).delete_namespaced_custom_object(GROUP, VERSION, kube_namespace, PLURAL, "pool")
    wait_until("the pool gone", lambda: pool_gone(kube_api, kube_namespace))


def test_should_exit_2_with_one_line_when_an_operator_setting_is_bad() -> None:
    env = {**os.environ, "FIREFLOW_OPERATOR_RESYNC_SECONDS": "never"}
    result = subprocess.run([OPERATOR_BIN], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: invalid FIREFLOW_OPERATOR_RESYNC_SECONDS='never': Input should be a valid number, "
        "unable to parse string as a number"
    ]


def test_should_refuse_to_roll_out_a_second_application_name_on_one_database(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    create_secret(kube_api, kube_namespace, pool_database)
    _create(kube_api, kube_namespace, pool_body("first", replicas=1))
    wait_for_condition(kube_api, kube_namespace, "first", "Ready")
    other = pool_body("second", replicas=1)
    other["spec"]["dbos"]["applicationName"] = "someone-else"
    _create(kube_api, kube_namespace, other)
    pool = wait_for_pool(
        kube_api, kube_namespace, "second", "the conflict",
        lambda p: condition(p, "Degraded").get("reason") == "ApplicationNameConflict",
    )  # fmt: skip
    assert condition(pool, "Degraded")["message"] == (
        "the database's fireflow queues belong to application(s) fireflow, not 'someone-else'; every pool on one "
        "database must use the same spec.dbos.applicationName. Nothing was rolled out."
    )
    assert AppsV1Api(kube_api).list_namespaced_stateful_set(kube_namespace).items[0].metadata.name == "first"
