"""Restricted by construction, checked by the real k8s.io/pod-security-admission library and on the real API
server: every pod the operator builds, for every spec the CRD accepts, passes the restricted profile; what
would weaken it is refused with a message; a default pool starts where the namespace enforces `restricted`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient, BatchV1Api, CoreV1Api, CustomObjectsApi
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from fireflow_operator.api.model import GROUP, PLURAL, VERSION, parse_spec
from fireflow_operator.children.builders import Pool, build_migration_job, build_statefulset
from tests.support.pod_security import (
    ANNOTATIONS,
    BASE,
    CONTAINER_FIELDS,
    POD_FIELDS,
    accepted_corpus,
    pod_templates,
    restricted_verdicts,
)
from tests.support.pools import (
    OperatorProcess,
    condition,
    create_secret,
    list_events,
    pool_body,
    wait_for_condition,
)

RESTRICTED = "pool pods run under the restricted Pod Security Standard"


def _spec(**fields: Any) -> Any:
    return parse_spec({**BASE, **fields})


def _worker(spec: Any) -> dict[str, Any]:
    template: dict[str, Any] = build_statefulset(Pool("p", "ns", "u", spec), image="i", application_version="1",
                                                 replicas=1)["spec"]["template"]  # fmt: skip
    return template


def test_should_admit_every_pod_it_builds_for_every_accepted_spec_under_the_restricted_profile() -> None:
    corpus, refused = accepted_corpus()
    assert len(corpus) > 300 and refused > 1000  # both sides of every rule are in it
    assert any("(stored)" in name and "capabilities" in json.dumps(spec) for name, spec in corpus)
    templates = [template for name, spec in corpus for template in pod_templates(name, spec)]
    verdicts = restricted_verdicts(templates)
    forbidden = {name: why for name, why in verdicts.items() if why is not None}
    assert not forbidden, (
        f"{len(forbidden)} of {len(verdicts)} pod templates refused, e.g. {next(iter(forbidden.items()))}"
    )


def test_the_checker_refuses_what_the_restricted_profile_refuses() -> None:
    """The library really judges: the builders' output with what the model refuses forced into it fails."""
    good = _worker(_spec())
    loose = json.loads(json.dumps(good))
    loose["spec"]["containers"][0]["securityContext"]["capabilities"] = {}
    apparmor = json.loads(json.dumps(good))
    apparmor["metadata"]["annotations"] = {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}
    verdicts = restricted_verdicts([("good", good), ("loose", loose), ("apparmor", apparmor)])
    assert verdicts["good"] is None
    assert verdicts["loose"] == (
        'unrestricted capabilities (container "worker" must set securityContext.capabilities.drop=["ALL"])'
    )
    assert verdicts["apparmor"] is not None and verdicts["apparmor"].startswith("forbidden AppArmor profile")


@pytest.mark.parametrize(
    "capabilities",
    [{}, {"add": ["NET_BIND_SERVICE"]}, {"drop": ["NET_RAW"]}, {"drop": []}, {"add": [], "drop": ["ALL"]}],
)
def test_should_drop_every_capability_whatever_the_pool_says(capabilities: dict[str, Any]) -> None:
    spec = _spec(securityContext={"capabilities": capabilities, "runAsUser": 20000})
    pool = Pool("p", "ns", "u", spec)
    job = build_migration_job(pool, mode="plan", image="i", target="t", round_=1, database_label="d")
    for template in (_worker(spec), job["spec"]["template"]):
        security = template["spec"]["containers"][0]["securityContext"]
        added = capabilities.get("add")
        assert security["capabilities"] == {"drop": ["ALL"], **({"add": added} if added else {})}
        assert security["runAsUser"] == 20000 and security["allowPrivilegeEscalation"] is False


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"podAnnotations": {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}},
         "spec.podAnnotations may not set AppArmor or seccomp annotations"),
        ({"podAnnotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}},
         "spec.podAnnotations may not set AppArmor or seccomp annotations"),
        ({"securityContext": {"seccompProfile": {"type": "Localhost"}}},
         "a seccompProfile of type Localhost needs localhostProfile"),
        ({"podSecurityContext": {"seccompProfile": {"type": "RuntimeDefault", "localhostProfile": "x.json"}}},
         "a seccompProfile of type Localhost needs localhostProfile, and only that type takes one"),
    ],
)  # fmt: skip
def test_should_refuse_what_would_weaken_the_profile_with_one_sentence(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _spec(**fields)


def test_should_give_workers_and_migration_jobs_default_resources_a_pool_can_override() -> None:
    default_pool = Pool("p", "ns", "u", _spec(resources={}))  # what the CRD stores for an absent section
    job = build_migration_job(default_pool, mode="apply", image="i", target="t", round_=1, database_label="d")
    assert _worker(default_pool.spec)["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    own = _spec(resources={"limits": {"cpu": "2"}}, migration={"resources": {"requests": {"memory": "1Gi"}}})
    job = build_migration_job(Pool("p", "ns", "u", own), mode="plan", image="i", target="t", round_=1,
                              database_label="d")  # fmt: skip
    assert _worker(own)["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "2"}}
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == {"requests": {"memory": "1Gi"}}


def _dry_run(api: ApiClient, namespace: str, spec: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The API server's refusal (None: accepted) and the spec as it would store it (pruned, defaulted)."""
    body = pool_body("candidate")
    body["spec"] = {**body["spec"], **spec}
    try:
        stored: Any = CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All"
        )
    except ApiException as err:
        assert err.status == 422, err.body
        return str(json.loads(str(err.body))["message"]), {}
    return None, dict(stored["spec"])


def _model_accepts(spec: dict[str, Any]) -> bool:
    try:
        parse_spec(spec)
    except ValidationError:
        return False
    return True


def test_should_accept_at_the_api_server_exactly_what_the_model_accepts(
    kube_api: ApiClient, kube_namespace: str
) -> None:
    """The corpus stands for "every spec the CRD accepts": on each field, what the API server stores the model
    accepts, and what the model accepts the API server does (fields outside the schema are pruned, not refused)."""
    candidates = [{"securityContext": c} for c in CONTAINER_FIELDS] + [{"podSecurityContext": p} for p in POD_FIELDS]
    candidates += [{"podAnnotations": a} for a in ANNOTATIONS]
    for fields in candidates:
        refusal, stored = _dry_run(kube_api, kube_namespace, fields)
        if refusal is None:
            assert _model_accepts(stored), (fields, stored)
        assert refusal is None or not _model_accepts({**pool_body("x")["spec"], **fields}), (fields, refusal)
    annotation = {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"}
    refusal, _ = _dry_run(kube_api, kube_namespace, {"podAnnotations": annotation})
    assert refusal is not None and "may not set AppArmor or seccomp annotations" in refusal and RESTRICTED in refusal


def test_should_start_a_default_pool_where_the_namespace_enforces_restricted(
    kube_api: ApiClient, kube_namespace: str, operator: OperatorProcess, pool_database: str
) -> None:
    core = CoreV1Api(kube_api)
    labels = {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }
    core.patch_namespace(kube_namespace, {"metadata": {"labels": labels}})
    container = {"name": "c", "image": "i", "securityContext": {"privileged": True}}
    privileged: Any = {"metadata": {"name": "probe"}, "spec": {"containers": [container]}}
    with pytest.raises(ApiException) as refused:  # the PodSecurity admission plugin is on and enforcing here
        core.create_namespaced_pod(kube_namespace, privileged, dry_run="All")
    assert 'violates PodSecurity "restricted:latest"' in json.loads(str(refused.value.body))["message"]
    create_secret(kube_api, kube_namespace, pool_database)
    CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, pool_body("pool", replicas=2)
    )
    pool = wait_for_condition(kube_api, kube_namespace, "pool", "Ready")
    assert pool["status"]["readyReplicas"] == 2 and condition(pool, "Degraded")["status"] == "False"
    jobs = BatchV1Api(kube_api).list_namespaced_job(kube_namespace).items
    plans = [j for j in jobs if j.metadata.labels.get("app.kubernetes.io/component") == "migration-plan"]
    events = list_events(kube_api, kube_namespace)
    assert not [e.message for e in events if e.reason == "FailedCreate"]
    assert plans or any(e.involved_object.kind == "Job" and e.reason == "SuccessfulCreate" for e in events)
