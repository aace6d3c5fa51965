"""Bad values are refused before anything is rendered, with a message that names the value and the problem:
by values.schema.json for single values, by the templates' own checks for combinations the schema cannot
express. helm applies both on install, upgrade, template and lint alike."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.chart.chart import HelmError, Json, render

pytestmark = pytest.mark.usefixtures("helm_bin")

SCHEMA_REJECTS = [
    ({"replicaCount": "x"}, "at '/replicaCount': got string, want integer"),
    ({"replicaCount": 11}, "at '/replicaCount': maximum: got 11, want 10"),
    ({"replicaCount": -1}, "at '/replicaCount': minimum: got -1, want 0"),
    ({"operator": {"logLevel": "TRACE"}},
     "at '/operator/logLevel': value must be one of 'DEBUG', 'INFO', 'WARNING', 'ERROR'"),
    ({"metrics": {"port": -1}}, "at '/metrics/port': minimum: got -1, want 1"),
    ({"operator": {"healthPort": 70000}}, "at '/operator/healthPort': maximum: got 70,000, want 65,535"),
    ({"operator": {"resyncSeconds": 0}}, "at '/operator/resyncSeconds': minimum: got 0, want 1"),
    ({"operator": {"databaseTimeoutSeconds": 61}}, "at '/operator/databaseTimeoutSeconds': maximum: got 61, want 60"),
    ({"watchNamespaces": "team-a"}, "at '/watchNamespaces': got string, want array"),
    ({"watchNamespaces": ["Team_A"]}, "at '/watchNamespaces/0': 'Team_A' does not match pattern"),
    ({"watchNamespaces": ["team-a", "team-a"]}, "at '/watchNamespaces': items at 0 and 1 are equal"),
    ({"watchNamespace": ["team-a"]}, "at '': additional properties 'watchNamespace' not allowed"),
    ({"crds": {"create": "yes"}}, "at '/crds/create': got string, want boolean"),
    ({"image": {"tag": 1.5}}, "at '/image/tag': got number, want string"),
    ({"image": {"digest": "sha256:123"}}, "at '/image/digest': 'sha256:123' does not match pattern"),
    ({"image": {"pullPolicy": "Sometimes"}}, "at '/image/pullPolicy': value must be one of"),
    ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "at '/metrics/serviceMonitor/interval'"),
    ({"resources": {"request": {"cpu": "1"}}}, "at '/resources': additional properties 'request' not allowed"),
    # The operator's pod stays within the restricted Pod Security Standard (test_chart_pod_security.py).
    ({"securityContext": {"privileged": True}}, "at '/securityContext/privileged': value must be false"),
    ({"securityContext": {"allowPrivilegeEscalation": None}},
     "at '/securityContext': missing property 'allowPrivilegeEscalation'"),
    ({"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}},
     "at '/securityContext/capabilities/drop': no items match contains schema"),
    ({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}},
     "at '/securityContext/capabilities/add/0': value must be 'NET_BIND_SERVICE'"),
    ({"podSecurityContext": {"runAsUser": 0}}, "at '/podSecurityContext/runAsUser': minimum: got 0, want 1"),
    ({"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}},
     "at '/podSecurityContext/seccompProfile/type': value must be one of 'RuntimeDefault', 'Localhost'"),
    ({"podSecurityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
     "at '/podSecurityContext/sysctls/0/name': value must be one of"),
]  # fmt: skip

TEMPLATE_REJECTS = [
    ({"metrics": {"port": 8081}}, "metrics.port and operator.healthPort must differ (both are 8081)"),
    ({"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}},
     "metrics.serviceMonitor.enabled needs metrics.enabled"),
    ({"podLabels": {"app.kubernetes.io/instance": "other"}}, "podLabels may not set app.kubernetes.io/instance"),
    ({"image": {"tag": "1.0", "digest": "sha256:" + "0" * 64}}, "set image.tag or image.digest, not both"),
    ({"serviceAccount": {"create": False, "name": "default"}}, "serviceAccount.name may not be default: the "
     "operator's rules would be bound to the namespace's default ServiceAccount, and every pod there would get them"),
    ({"serviceAccount": {"name": "default"}}, "serviceAccount.name may not be default"),
    ({"podAnnotations": {"container.apparmor.security.beta.kubernetes.io/operator": "unconfined"}},
     "podAnnotations may not set container.apparmor.security.beta.kubernetes.io/operator: choose AppArmor and "
     "seccomp profiles with appArmorProfile and seccompProfile in securityContext or podSecurityContext"),
]  # fmt: skip


def _id(message: str) -> str:
    """A readable test id: the value's path and the first words of the problem."""
    return re.sub(r"[^A-Za-z0-9./]+", "-", message.removeprefix("at '/").replace("':", ""))[:48].strip("-")


def _refusal(tmp_path: Path, values: Json) -> str:
    with pytest.raises(HelmError) as refused:
        render(tmp_path, values)
    return str(refused.value)


@pytest.mark.parametrize(("values", "message"), SCHEMA_REJECTS, ids=[_id(m) for _, m in SCHEMA_REJECTS])
def test_should_refuse_a_bad_value_with_its_path_and_problem_when_the_schema_forbids_it(
    tmp_path: Path, values: Json, message: str
) -> None:
    refusal = _refusal(tmp_path, values)
    assert "values don't meet the specifications of the schema" in refusal
    assert message in refusal


@pytest.mark.parametrize(("values", "message"), TEMPLATE_REJECTS, ids=[_id(m) for _, m in TEMPLATE_REJECTS])
def test_should_refuse_conflicting_values_with_one_line_when_the_templates_check_them(
    tmp_path: Path, values: Json, message: str
) -> None:
    assert message in _refusal(tmp_path, values)


def test_should_accept_fractional_seconds_and_an_empty_namespace_list(tmp_path: Path) -> None:
    objects = render(tmp_path, {"operator": {"resyncSeconds": 2.5}, "watchNamespaces": []})
    assert any(obj["kind"] == "ClusterRole" for obj in objects)
