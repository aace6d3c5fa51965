"""The chart's own operator pod under the restricted Pod Security Standard, judged by the real
k8s.io/pod-security-admission library (tests/kube/psa-check): the Deployment's pod template for every value
scenario and for each security override a values file can make, at the latest policy and at Kubernetes 1.29's
(the oldest the chart installs on). What the chart accepts passes; what values.schema.json (or, for
podAnnotations, a template check) refuses would weaken the profile, but for the few values it refuses on
purpose although the profile would not (STRICTER)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart.chart import SCENARIOS, HelmError, Json, one, render
from tests.support.pod_security import restricted_verdicts

pytestmark = pytest.mark.usefixtures("helm_bin")

OLDEST = "v1.29"  # kube-version.yaml's minimum
LOCALHOST = {"type": "Localhost", "localhostProfile": "profiles/operator.json"}
# Each is merged into the chart's default (helm merges a values file into values.yaml; null removes a key).
CONTAINER = [
    {"runAsUser": 20000, "runAsGroup": 20000},
    {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}},
    {"seccompProfile": LOCALHOST},
    {"appArmorProfile": {"type": "RuntimeDefault"}},
    {"seLinuxOptions": {"type": "container_t", "level": "s0:c123,c456"}},
    {"readOnlyRootFilesystem": False},
    {"procMount": "Default"},
    {"privileged": True},
    {"allowPrivilegeEscalation": True},
    {"allowPrivilegeEscalation": None},
    {"capabilities": {"drop": ["NET_RAW"]}},
    {"capabilities": None},
    {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}},
    {"runAsNonRoot": False},
    {"runAsUser": 0},
    {"seccompProfile": {"type": "Unconfined"}},
    {"appArmorProfile": {"type": "Unconfined"}},
    {"procMount": "Unmasked"},
    {"seLinuxOptions": {"type": "spc_t"}},
    {"seLinuxOptions": {"user": "system_u"}},
    {"windowsOptions": {"hostProcess": True}},
]
POD = [
    {"runAsUser": 20000, "runAsGroup": 20000, "fsGroup": 20000, "supplementalGroups": [20001]},
    {"seccompProfile": LOCALHOST},
    {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]},
    {"appArmorProfile": {"type": "Localhost", "localhostProfile": "operator"}},
    {"fsGroupChangePolicy": "OnRootMismatch"},
    {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]},
    {"runAsNonRoot": False},
    {"runAsNonRoot": None},
    {"runAsUser": 0},
    {"seccompProfile": {"type": "Unconfined"}},
    {"seccompProfile": None},
    {"appArmorProfile": {"type": "Unconfined"}},
    {"seLinuxOptions": {"role": "sysadm_r"}},
    {"windowsOptions": {"hostProcess": True}},
]
ANNOTATIONS = [
    {"example.com/owner": "platform"},
    {"container.apparmor.security.beta.kubernetes.io/operator": "unconfined"},
    {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"},
]
# Refused by the schema although this Deployment would pass: the pod's own runAsNonRoot and seccomp profile
# are required even while the one container also sets them, so that no container can run without them; and
# seccomp annotations, which the profile no longer reads (the kubelet ignores them since Kubernetes 1.27).
STRICTER = {"podSecurityContext={'runAsNonRoot': None}", "podSecurityContext={'seccompProfile': None}",
            "podAnnotations={'seccomp.security.alpha.kubernetes.io/pod': 'unconfined'}"}  # fmt: skip


def _candidates() -> list[tuple[str, Json]]:
    found: list[tuple[str, Json]] = [(f"scenario {s.name}", s.values(["team-a", "team-b"])) for s in SCENARIOS]
    for key, overrides in (
        ("securityContext", CONTAINER),
        ("podSecurityContext", POD),
        ("podAnnotations", ANNOTATIONS),
    ):
        found += [(f"{key}={override}", {key: override}) for override in overrides]
    found.append(("both, widened within the profile", {"securityContext": CONTAINER[1], "podSecurityContext": POD[2]}))
    no_ids = {"runAsUser": None, "runAsGroup": None}  # OpenShift's restricted SCC assigns the uid itself
    found.append(
        ("uids left to the platform", {"securityContext": no_ids, "podSecurityContext": {**no_ids, "fsGroup": None}})
    )
    return found


def _pod_template(tmp_path: Path, values: Json, *, skip_schema: bool = False) -> Json:
    template: Json = one(render(tmp_path, values, skip_schema=skip_schema), "Deployment")["spec"]["template"]
    return template


def _forced(tmp_path: Path, values: Json, refusal: str) -> Json:
    """The pod template the chart would render but for its refusal (the schema's, or the template's own check
    of podAnnotations)."""
    if "podAnnotations may not set" in refusal:
        template = _pod_template(tmp_path, {})
        template["metadata"]["annotations"] = values["podAnnotations"]
        return template
    assert "values don't meet the specifications of the schema" in refusal, refusal
    return _pod_template(tmp_path, values, skip_schema=True)


def test_should_run_the_operator_pod_restricted_for_every_value_the_schema_accepts(tmp_path: Path) -> None:
    accepted: list[tuple[str, Json]] = []
    refused: dict[str, Json] = {}
    for name, values in _candidates():
        try:
            accepted.append((name, _pod_template(tmp_path, values)))
        except HelmError as err:
            refused[name] = _forced(tmp_path, values, str(err))
    assert len(accepted) >= len(SCENARIOS) + 12 and len(refused) >= 25  # both sides of the schema are in it
    for version in ("latest", OLDEST):
        verdicts = restricted_verdicts(accepted, version)
        assert not {name: why for name, why in verdicts.items() if why}, version
    # Every refusal is for a value the profile refuses too (at the oldest or the latest policy), but STRICTER.
    weakening = restricted_verdicts(list(refused.items()), OLDEST)
    latest = restricted_verdicts(list(refused.items()))
    admitted = {name for name in refused if weakening[name] is None and latest[name] is None}
    assert admitted == STRICTER


def test_the_checker_judges_the_chart_pod(tmp_path: Path) -> None:
    """The verdicts above are the library's: a default pod passes, one widened past the schema fails."""
    template: dict[str, Any] = _pod_template(tmp_path, {"securityContext": {"privileged": True}}, skip_schema=True)
    verdicts = restricted_verdicts([("default", _pod_template(tmp_path, {})), ("privileged", template)])
    assert verdicts == {"default": None, "privileged": 'privileged (container "operator" must not set '
                        "securityContext.privileged=true)"}  # fmt: skip
