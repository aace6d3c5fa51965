"""The chart rendered by `helm template` for every meaningful combination of values: lint, labels, the
operator's Deployment and settings, RBAC in both modes, metrics, CRD. The API server's own validation of the
same renders is in test_chart_cluster.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fireflow_operator.api import names
from fireflow_operator.api.model import parse_spec
from fireflow_operator.children.builders import Pool, build_migration_job, build_statefulset
from fireflow_operator.settings import OperatorSettings, load_settings
from tests.chart.chart import (
    CHART_DIR,
    CLUSTER_ONLY_RULES,
    CUSTOM_SETTINGS,
    NAMESPACED_RULES,
    SCENARIO_IDS,
    SCENARIOS,
    HelmError,
    Json,
    Scenario,
    by_kind,
    lint,
    one,
    render,
)

pytestmark = pytest.mark.usefixtures("helm_bin")

NAMESPACES = ["team-a", "team-b"]
RELEASE = "ff"
SELECTOR = {"app.kubernetes.io/name": "fireflow-operator", "app.kubernetes.io/instance": RELEASE}
STANDARD_LABELS = {"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
                   "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}  # fmt: skip
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}  # fmt: skip


def _render(tmp_path: Path, scenario: Scenario) -> list[Json]:
    return render(tmp_path, scenario.values(NAMESPACES), release=RELEASE)


def _flat_rules(role: Json) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def _container(objects: list[Json]) -> Json:
    containers = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    container: Json = containers[0]
    return container


def _env(objects: list[Json]) -> dict[str, str]:
    env: dict[str, str] = {}
    for var in _container(objects)["env"]:
        if var["name"] == "POD_NAME":  # the Lease holder's name, from the downward API
            assert var["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
            continue
        assert "valueFrom" not in var, f"{var['name']}: configuration is plain env, never a reference"
        env[var["name"]] = var["value"]
    return env


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_should_pass_helm_lint_strict_when_values_are(tmp_path: Path, scenario: Scenario) -> None:
    output = lint(tmp_path, scenario.values(NAMESPACES))
    assert "0 chart(s) failed" in output
    assert "[WARNING]" not in output and "[ERROR]" not in output


def test_should_document_every_value_with_a_helm_docs_comment() -> None:
    """Every value has a `# --` comment right above it; a documented object value (like `resources`) covers
    its keys, an undocumented mapping is a section whose keys must each be documented."""
    text = (CHART_DIR / "values.yaml").read_text()
    lines = text.splitlines()
    undocumented: list[str] = []

    def documented(line: int) -> bool:
        cursor = line - 1
        while cursor >= 0 and lines[cursor].strip().startswith("#"):
            if lines[cursor].strip().startswith("# --"):
                return True
            cursor -= 1
        return False

    def walk(node: yaml.Node, path: str) -> None:
        assert isinstance(node, yaml.MappingNode)
        for key, value in node.value:
            name = f"{path}{key.value}"
            if documented(key.start_mark.line):
                continue
            if isinstance(value, yaml.MappingNode) and value.value:
                walk(value, f"{name}.")
            else:
                undocumented.append(name)

    root = yaml.compose(text)
    assert root is not None
    walk(root, "")
    assert not undocumented, f"values without a `# --` comment: {undocumented}"


def test_should_have_a_schema_entry_for_every_value() -> None:
    schema = yaml.safe_load((CHART_DIR / "values.schema.json").read_text())
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())

    def walk(value: Any, node: Json, path: str) -> None:
        if "$ref" in node:
            node = schema["definitions"][node["$ref"].rsplit("/", 1)[-1]]
        if isinstance(value, dict) and "properties" in node:
            for key, sub in value.items():
                assert key in node["properties"], f"{path}{key} has no schema"
                walk(sub, node["properties"][key], f"{path}{key}.")

    walk(values, schema, "")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_should_label_every_object_and_select_only_name_and_instance(tmp_path: Path, scenario: Scenario) -> None:
    objects = _render(tmp_path, scenario)
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        assert set(labels) >= STANDARD_LABELS, f"{obj['kind']} {obj['metadata']['name']} labels: {labels}"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace"), f"{obj['kind']} has no explicit namespace"
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["selector"] == {"matchLabels": SELECTOR}
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert {k: pod_labels[k] for k in SELECTOR} == SELECTOR
    for service in by_kind(objects, "Service"):
        assert service["spec"]["selector"] == SELECTOR


def test_should_run_one_operator_replaced_by_a_rolling_update_with_secure_defaults(tmp_path: Path) -> None:
    objects = render(tmp_path, {}, release=RELEASE)
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    # The new pod starts as a candidate; the old leader hands the Lease over when it exits.
    rolling = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    assert deployment["spec"]["strategy"] == rolling
    assert not by_kind(objects, "PodDisruptionBudget") and "affinity" not in deployment["spec"]["template"]["spec"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = _container(objects)
    assert container["image"] == "fireflow-operator:0.1.0"
    assert container["command"] == ["fireflow-operator"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsNonRoot"] is True
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert container["resources"]["limits"]["memory"] == "512Mi"
    # /tmp is the only writable path, and it is an emptyDir: nothing is mounted from a ConfigMap or Secret.
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {}}]
    assert pod["serviceAccountName"] == f"{RELEASE}-fireflow-operator"
    assert one(objects, "ServiceAccount")["metadata"]["name"] == pod["serviceAccountName"]


def test_should_probe_kopf_liveness_endpoint_on_the_health_port(tmp_path: Path) -> None:
    objects = render(tmp_path, {}, release=RELEASE)
    container, env = _container(objects), _env(objects)
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": int(env["FIREFLOW_OPERATOR_HEALTH_PORT"])}
    # The metrics port is the only declared one (the process node hands the first declared port to the
    # image's port variable, FIREFLOW_OPERATOR_METRICS_PORT).
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]


def test_should_default_every_setting_to_the_operators_own_default(tmp_path: Path) -> None:
    env = _env(render(tmp_path, {}, release=RELEASE))
    aliases = {info.alias for info in OperatorSettings.model_fields.values() if info.alias}
    unset = {"FIREFLOW_OPERATOR_NAMESPACES", "FIREFLOW_OPERATOR_POOL_SELECTOR"}
    assert aliases - set(env) == unset, "cluster-wide mode and every pool leave only these unset"
    election = {"leader_election_namespace": "fireflow-system", "lease_name": f"{RELEASE}-fireflow-operator-leader"}
    expected = load_settings({}).model_copy(update=election)
    assert load_settings(env) == expected, "the chart's defaults are the operator's defaults, and it always elects"


def test_should_elect_a_leader_and_spread_two_or_more_replicas(tmp_path: Path) -> None:
    objects = render(tmp_path, {"replicaCount": 2}, release=RELEASE)
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = spread["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    lease = f"{RELEASE}-fireflow-operator-leader"
    (role,) = [r for r in by_kind(objects, "Role") if r["metadata"]["name"] == lease]
    assert role["metadata"]["namespace"] == "fireflow-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [lease],
         "verbs": ["get", "update"]},
    ]  # fmt: skip
    env = _env(objects)
    assert (env["FIREFLOW_OPERATOR_LEADER_ELECTION_NAMESPACE"], env["FIREFLOW_OPERATOR_LEASE_NAME"]) == (
        "fireflow-system",
        lease,
    )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_should_configure_the_operator_through_env_its_settings_accept(tmp_path: Path, scenario: Scenario) -> None:
    values = scenario.values(NAMESPACES)
    settings = load_settings(_env(render(tmp_path, values, release=RELEASE)))
    assert settings.namespaces == values.get("watchNamespaces", [])
    metrics = values.get("metrics", {})
    assert settings.metrics_port == (0 if metrics.get("enabled") is False else metrics.get("port", 8080))
    assert settings.health_port == values.get("operator", {}).get("healthPort", 8081)


def test_should_pass_custom_settings_image_and_resources_through(tmp_path: Path) -> None:
    scenario = next(s for s in SCENARIOS if s.name == "custom-image-resources-settings")
    values = scenario.values(NAMESPACES)
    objects = render(tmp_path, values, release=RELEASE)
    settings = load_settings(_env(objects))
    operator, metrics = CUSTOM_SETTINGS["operator"], CUSTOM_SETTINGS["metrics"]
    assert settings.log_level == operator["logLevel"]
    assert settings.log_format == operator["logFormat"]
    assert settings.resync_seconds == operator["resyncSeconds"]
    assert settings.database_timeout_seconds == operator["databaseTimeoutSeconds"]
    assert settings.migration_retry_seconds == operator["migrationRetrySeconds"]
    assert settings.health_port == operator["healthPort"]
    assert settings.metrics_port == metrics["port"]
    container = _container(objects)
    assert _env(objects)["TZ"] == "UTC"
    assert container["image"] == f"registry.example.com/platform/fireflow-operator@sha256:{'ab' * 32}"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == values["resources"]
    assert container["livenessProbe"]["httpGet"]["port"] == operator["healthPort"]
    assert container["ports"][0]["containerPort"] == metrics["port"]
    service = one(objects, "Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9999, "targetPort": "metrics", "protocol": "TCP"}]
    pod = one(objects, "Deployment")["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "platform"
    assert pod["metadata"]["annotations"] == {"example.com/owner": "platform"}
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pod["spec"]["serviceAccountName"] == "fireflow-operator-sa"
    account = one(objects, "ServiceAccount")
    assert account["metadata"]["name"] == "fireflow-operator-sa"
    assert account["metadata"]["annotations"] == {"example.com/role": "operator"}
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "fireflow-operator-sa"


def _pool_roles(objects: list[Json], kind: str) -> list[Json]:
    """The Roles or RoleBindings for pools (not the leader Lease's own)."""
    return [o for o in by_kind(objects, kind) if not o["metadata"]["name"].endswith("-leader")]


def test_should_grant_cluster_wide_rbac_when_no_namespace_is_watched(tmp_path: Path) -> None:
    objects = render(tmp_path, {}, release=RELEASE)
    assert not _pool_roles(objects, "Role") and not _pool_roles(objects, "RoleBinding")
    role = one(objects, "ClusterRole")
    assert _flat_rules(role) == NAMESPACED_RULES | CLUSTER_ONLY_RULES
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": role["metadata"]["name"]}  # fmt: skip
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{RELEASE}-fireflow-operator", "namespace": "fireflow-system"}
    ]
    assert "FIREFLOW_OPERATOR_NAMESPACES" not in _env(objects)


@pytest.mark.parametrize("watched", [NAMESPACES[:1], NAMESPACES], ids=["one", "two"])
def test_should_grant_roles_only_in_watched_namespaces_when_watch_namespaces_is_set(
    tmp_path: Path, watched: list[str]
) -> None:
    objects = render(tmp_path, {"watchNamespaces": watched}, release=RELEASE)
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    roles, bindings = _pool_roles(objects, "Role"), _pool_roles(objects, "RoleBinding")
    assert sorted(r["metadata"]["namespace"] for r in roles) == sorted(watched)
    assert sorted(b["metadata"]["namespace"] for b in bindings) == sorted(watched)
    for role in roles:
        assert _flat_rules(role) == NAMESPACED_RULES
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": f"{RELEASE}-fireflow-operator", "namespace": "fireflow-system"}
        ]
    assert _env(objects)["FIREFLOW_OPERATOR_NAMESPACES"] == ",".join(watched)


def test_should_hand_the_pool_selector_to_the_operator_as_labels(tmp_path: Path) -> None:
    selector = {"shard": "a", "fireflow.example.com/team": "payments"}
    env = _env(render(tmp_path, {"poolSelector": selector}, release=RELEASE))
    assert load_settings(env).pool_selector == selector
    with pytest.raises(HelmError, match="poolSelector"):
        render(tmp_path, {"poolSelector": {"shard": "not a label value"}}, release=RELEASE)


def test_should_use_the_given_account_and_no_rbac_when_both_come_from_elsewhere(tmp_path: Path) -> None:
    objects = render(tmp_path, {"serviceAccount": {"create": False, "name": "provided"}, "rbac": {"create": False}})
    kinds = {obj["kind"] for obj in objects}
    assert not kinds & {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "provided"


def test_should_refuse_to_bind_the_operators_rules_to_the_default_account(tmp_path: Path) -> None:
    with pytest.raises(HelmError) as refused:
        render(tmp_path, {"serviceAccount": {"create": False}})
    assert (
        "serviceAccount.create=false needs serviceAccount.name: the operator's rules would otherwise be bound to "
        "the namespace's default ServiceAccount, and every pod there would get them"
    ) in str(refused.value)


def test_should_pass_bind_addresses_and_pool_defaults_to_the_operator(tmp_path: Path) -> None:
    values = {"operator": {"healthHost": "::"}, "metrics": {"host": "10.0.0.1"},
              "pools": {"workerResources": {"limits": {"memory": "3Gi"}}}}  # fmt: skip
    settings = load_settings(_env(render(tmp_path, values)))
    assert (settings.health_host, settings.metrics_host) == ("::", "10.0.0.1")
    # Helm merges a value into the default (requests: null drops the default's).
    assert settings.worker_resources.model_dump(exclude_none=True) == {
        "requests": {"cpu": "250m", "memory": "256Mi"},
        "limits": {"memory": "3Gi"},
    }


def test_should_render_the_operators_network_policy_only_when_enabled(tmp_path: Path) -> None:
    assert not by_kind(render(tmp_path, {}), "NetworkPolicy")
    scrapers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    policy = one(render(tmp_path, {"networkPolicy": {"enabled": True, "metricsFrom": scrapers}}), "NetworkPolicy")
    assert policy["spec"]["ingress"] == [{"from": scrapers, "ports": [{"port": 8080, "protocol": "TCP"}]}]
    egress_ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]
    assert egress_ports == [53, 53, 443, 6443, 5432]
    closed = one(render(tmp_path, {"networkPolicy": {"enabled": True}}), "NetworkPolicy")
    assert closed["spec"]["ingress"] == []


def test_should_install_the_crd_with_the_keep_policy_unless_disabled(tmp_path: Path) -> None:
    crd = one(render(tmp_path, {}), "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "fireflowworkerpools.fireflow.persistent.ai"
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert not by_kind(render(tmp_path, {"crds": {"create": False}}), "CustomResourceDefinition")


def test_should_render_the_service_monitor_only_when_enabled(tmp_path: Path) -> None:
    assert not by_kind(render(tmp_path, {}), "ServiceMonitor")
    scenario = next(s for s in SCENARIOS if s.name == "service-monitor")
    objects = render(tmp_path, scenario.values(NAMESPACES), release=RELEASE)
    monitor = one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    service = one(objects, "Service")
    selected = monitor["spec"]["selector"]["matchLabels"]
    assert selected.items() <= service["metadata"]["labels"].items(), "the monitor must select the metrics Service"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert endpoint["path"] == "/metrics"
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s")
    assert endpoint["relabelings"] == [{"targetLabel": "team", "replacement": "fireflow"}]


def _template_labels(built: Json) -> dict[str, str]:
    labels: dict[str, str] = built["spec"]["template"]["metadata"]["labels"]
    return labels


@pytest.mark.parametrize("watched", [[], NAMESPACES], ids=["every-namespace", "watched-namespaces"])
def test_should_select_exactly_the_worker_pods_with_the_pod_monitor(tmp_path: Path, watched: list[str]) -> None:
    values = {"watchNamespaces": watched, "monitoring": {"podMonitor": {"enabled": True}}}
    spec = one(render(tmp_path, values, release=RELEASE), "PodMonitor")["spec"]
    assert list(spec["selector"]) == ["matchLabels"]
    selected = spec["selector"]["matchLabels"].items()
    pool = Pool("orders", "team-a", "uid-1", parse_spec({"image": "w:1", "database": {"secretRef": {"name": "db"}}}))
    assert selected <= names.common_labels(pool.name, names.WORKER_COMPONENT).items()
    for index in (0, 1, 2):  # every version's workers, the first one's (no version label) included
        sts = build_statefulset(pool, image="w:1", application_version="1", replicas=1, version_index=index)
        assert selected <= _template_labels(sts).items()
    for mode in ("plan", "apply"):  # never a migration Job's pod: it serves no metrics
        job = build_migration_job(pool, mode=mode, image="w:2", target="t", round_=1, database_label="d")
        assert not selected <= _template_labels(job).items()
    assert spec["namespaceSelector"] == ({"matchNames": watched} if watched else {"any": True})
    (endpoint,) = spec["podMetricsEndpoints"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert endpoint["port"] == names.HEALTH_PORT_NAME in [port["name"] for port in container["ports"]]
    assert endpoint["path"] == "/metrics"
    # Prometheus spells a pod label's name with every character but letters, digits and _ as _.
    pool_label = "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", names.LABEL_POOL)
    assert endpoint["relabelings"][0] == {"sourceLabels": [pool_label], "targetLabel": "pool"}


def test_should_name_every_alert_in_the_prometheus_rule_values_comment() -> None:
    rules = yaml.safe_load((CHART_DIR / "files" / "prometheus-rules.yaml").read_text())
    alerts = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    lines = (CHART_DIR / "values.yaml").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == "prometheusRule:")
    comment = []
    for line in lines[at + 1 :]:
        if not line.strip().startswith("#"):
            break
        comment.append(line.strip().lstrip("#").strip())
    described = " ".join(comment)
    assert [alert for alert in alerts if alert not in described] == []


def test_should_turn_the_metrics_endpoint_off_when_metrics_are_disabled(tmp_path: Path) -> None:
    objects = render(tmp_path, {"metrics": {"enabled": False}})
    assert not by_kind(objects, "Service")
    assert _env(objects)["FIREFLOW_OPERATOR_METRICS_PORT"] == "0"
    assert "ports" not in _container(objects)


def test_should_name_everything_after_fullname_override(tmp_path: Path) -> None:
    objects = render(tmp_path, {"fullnameOverride": "ffop"})
    names = {obj["metadata"]["name"] for obj in objects if obj["kind"] != "CustomResourceDefinition"}
    assert names == {"ffop", "ffop-metrics", "ffop-leader", "ffop-managed-objects", "ffop-restricted-pods"}
