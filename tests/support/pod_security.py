"""The restricted Pod Security Standard as the API server checks it, and a corpus of pool specs to check.

`restricted_verdicts` runs psa-check (tests/kube/psa-check/main.go: the real k8s.io/pod-security-admission
library at the control plane's release, built by tests/kube/build-control-plane.sh). `accepted_corpus` is a
generated set of pool specs the model (and so the CRD) accepts: the examples, each security field a pool
author can set at the values that matter, and their combinations, each also as the API server stores it
(with the CRD's defaults applied, which is where `capabilities: {}` came from).
"""

from __future__ import annotations

import copy
import itertools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fireflow_operator.api.crd import build_crd
from fireflow_operator.api.model import parse_spec
from fireflow_operator.children.builders import Pool, build_migration_job, build_statefulset
from tests.kube.tools import BUILD_SCRIPT, REPO_ROOT, psa_check_path

Json = dict[str, Any]
BASE: Json = {"image": "fireflow-worker:1", "database": {"secretRef": {"name": "db"}}}

# Values of each field a pool author can set that the restricted profile cares about, the refused ones
# included (the corpus keeps what the model accepts, so a rule that starts accepting one is checked).
LOCALHOST = {"type": "Localhost", "localhostProfile": "profiles/fireflow.json"}
SECCOMP = [{"type": "RuntimeDefault"}, LOCALHOST, {"type": "Localhost"}, {"type": "Unconfined"},
           {"type": "RuntimeDefault", "localhostProfile": "profiles/x.json"}]  # fmt: skip
CONTAINER_FIELDS: list[Json] = [
    {},
    {"capabilities": {}},
    {"capabilities": {"add": []}},
    {"capabilities": {"add": ["NET_BIND_SERVICE"]}},
    {"capabilities": {"drop": []}},
    {"capabilities": {"drop": ["NET_RAW"]}},
    {"capabilities": {"drop": ["ALL"]}},
    {"capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["CHOWN"]}},
    {"capabilities": {"add": ["SYS_ADMIN"]}},
    {"privileged": False},
    {"privileged": True},
    {"allowPrivilegeEscalation": False},
    {"allowPrivilegeEscalation": True},
    {"runAsNonRoot": True},
    {"runAsNonRoot": False},
    {"runAsUser": 0},
    {"runAsUser": 1},
    {"runAsUser": 20000, "runAsGroup": 0},
    {"readOnlyRootFilesystem": False},
    *({"seccompProfile": profile} for profile in SECCOMP),
]
POD_FIELDS: list[Json] = [
    {},
    {"runAsUser": 0},
    {"runAsUser": 20000},
    {"runAsNonRoot": False},
    {"runAsNonRoot": True, "runAsGroup": 0, "fsGroup": 0, "supplementalGroups": [0]},
    {"fsGroupChangePolicy": "Always"},
    {"sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]},
    *({"seccompProfile": profile} for profile in SECCOMP),
]
ANNOTATIONS: list[Json] = [
    {},
    {"example.com/owner": "platform"},
    {"container.apparmor.security.beta.kubernetes.io/worker": "unconfined"},
    {"container.apparmor.security.beta.kubernetes.io/migrate": "runtime/default"},
    {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"},
    {"container.seccomp.security.alpha.kubernetes.io/worker": "unconfined"},
]
# The rest of what reaches the pod template, cycled through the combinations above.
OTHERS: list[Json] = [
    {},
    {"imagePullSecrets": [{"name": "registry"}], "serviceAccountName": "workers"},
    {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}, "migration": {"resources": {"requests": {"cpu": 1}}}},
    {"tolerations": [{"operator": "Exists"}], "nodeSelector": {"kubernetes.io/os": "linux"}},
    {"podLabels": {"team": "a"}, "priorityClassName": "high", "dbos": {"workerProcesses": 3}},
    {"env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "t"}}}]},
]


def with_crd_defaults(schema: Json, value: Any) -> Any:
    """`value` with the CRD schema's defaults filled in where a property is absent, as the API server's
    structural defaulting does (recursively, into defaulted values too)."""
    if isinstance(value, dict) and schema.get("type") == "object":
        out = dict(value)
        for name, prop in (schema.get("properties") or {}).items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = with_crd_defaults(prop, out[name])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [with_crd_defaults(schema["items"], item) for item in value]
    return value


def spec_schema() -> Json:
    schema: Json = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def example_specs() -> Iterator[tuple[str, Json]]:
    for path in sorted((REPO_ROOT / "examples").glob("pool-*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "FireflowWorkerPool":
                yield f"{path.name}:{document['metadata']['name']}", document["spec"]


def candidate_specs() -> Iterator[tuple[str, Json]]:
    yield from example_specs()
    combinations = itertools.product(CONTAINER_FIELDS, POD_FIELDS, ANNOTATIONS)
    for index, (container, pod, pod_annotations) in enumerate(combinations):
        spec: Json = {**BASE, **OTHERS[index % len(OTHERS)]}
        for key, value in (
            ("securityContext", container),
            ("podSecurityContext", pod),
            ("podAnnotations", pod_annotations),
        ):
            if value:
                spec[key] = value
        yield f"combination-{index}", spec


def accepted_corpus() -> tuple[list[tuple[str, Json]], int]:
    """The candidates the model accepts, each as written and as stored; and how many it refused."""
    schema, accepted, refused = spec_schema(), [], 0
    for name, spec in candidate_specs():
        for variant, written in ((name, spec), (f"{name} (stored)", with_crd_defaults(schema, spec))):
            try:
                parse_spec(written)
            except ValidationError:
                refused += 1
                continue
            accepted.append((variant, written))
    return accepted, refused


def pod_templates(name: str, spec: Json) -> Iterator[tuple[str, Json]]:
    """Every pod template the operator builds for the pool: its workers' and both migration Jobs'."""
    pool = Pool("pool", "team", "uid", parse_spec(spec))
    statefulset = build_statefulset(pool, image="fireflow-worker:2", application_version="1", replicas=2)
    yield f"{name} StatefulSet", statefulset["spec"]["template"]
    for mode in ("plan", "apply"):
        job = build_migration_job(pool, mode=mode, image="fireflow-worker:2", target="t", round_=1, database_label="d")
        yield f"{name} Job {mode}", job["spec"]["template"]


def psa_check() -> Path:
    """The checker binary, built (once per release and source) when missing."""
    path = psa_check_path()
    if not path.exists():
        subprocess.run(["bash", str(BUILD_SCRIPT), "psa-check"], check=True, capture_output=True, timeout=1800)
    return path


def restricted_verdicts(templates: list[tuple[str, Json]], version: str = "latest") -> dict[str, str | None]:
    """name -> None when the restricted profile (of `version`: latest, or v1.<minor>) admits the template, else
    why not, in PSA's words."""
    payload = json.dumps([{"name": name, "template": template} for name, template in templates])
    argv = [str(psa_check()), "-version", version]
    result = subprocess.run(argv, input=payload, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [v["name"] for v in verdicts] == [name for name, _ in templates]
    return {v["name"]: None if v["allowed"] else v["forbidden"] for v in verdicts}
