"""The Kubernetes types a pool's spec passes through to its pods, modelled tightly enough that whatever the
CRD accepts, the API server also accepts in a StatefulSet, and restricted-compatible by construction.

Each rule the API server enforces on a Pod is repeated here as a schema constraint or a CEL rule with a
message, and as the same check in pydantic (for objects that predate a CRD upgrade). Fields that would
break out of the restricted Pod Security Standard (privileged, root, added capabilities, host namespaces,
host paths, sysctls, unconfined seccomp, AppArmor and seccomp annotations) are refused with a message, or
not part of the spec at all; what the CRD defaults (`capabilities: {}`) the builders keep restricted.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic.alias_generators import to_camel

QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
# A label or annotation key: an optional DNS-subdomain prefix and a name of at most 63 characters.
QUALIFIED_NAME = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONFIG_KEY = r"^[-._a-zA-Z0-9]+$"
ENV_NAME = r"^[!-<>-~]+$"  # printable ASCII but "=" and space, as the API server's relaxed env rule
RESTRICTED = "pool pods run under the restricted Pod Security Standard"


class K8sModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def cel(rule: str, message: str) -> dict[str, Any]:
    return {"rule": rule, "message": message}


def cel_string(text: str) -> str:
    """A CEL string literal (CEL's escapes are JSON's for what our patterns hold)."""
    return json.dumps(text)


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, str) and not re.fullmatch(QUANTITY, value):
        raise ValueError(f"{value!r} is not a quantity (such as 500m, 2, 1.5Gi)")
    return value


Quantity = Annotated[
    int | str,
    AfterValidator(_check_quantity),
    WithJsonSchema({"x-kubernetes-int-or-string": True, "pattern": QUANTITY}),
]


_SUFFIXES = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}  # fmt: skip


def cpu_cores(quantity: int | str) -> float:
    """A CPU quantity ("500m", "2", "1.5") in cores."""
    if isinstance(quantity, int):
        return float(quantity)
    number = re.match(r"^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?", quantity, re.I)
    value = float(number.group(0)) if number else 0.0
    return value * _SUFFIXES.get(quantity[number.end() :] if number else "", 1.0)


def _keys_match(pattern: str, what: str, max_length: int = 316) -> Any:
    def check(mapping: dict[str, Any] | None) -> dict[str, Any] | None:
        for key in mapping or {}:
            if len(key) > max_length or not re.fullmatch(pattern, key):
                raise ValueError(f"{key!r} is not a valid {what}")
        return mapping

    return AfterValidator(check)


def keyed_map(
    value_schema: dict[str, Any], *, what: str, max_properties: int, key_pattern: str = QUALIFIED_NAME
) -> Any:
    """The JSON schema of a map whose keys must be `what` (checked by CEL: schemas cannot match keys)."""
    return {
        "type": "object",
        "maxProperties": max_properties,
        "additionalProperties": value_schema,
        "x-kubernetes-validations": [
            cel(f"self.all(k, k.size() <= 316 && k.matches({cel_string(key_pattern)}))", f"every key must be a {what}")
        ],
    }


def _label_value(value: str) -> str:
    if len(value) > 63 or not re.fullmatch(LABEL_VALUE, value):
        raise ValueError(f"{value!r} is not a label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)")
    return value


LabelMap = Annotated[
    dict[str, Annotated[str, AfterValidator(_label_value)]],
    _keys_match(QUALIFIED_NAME, "label key"),
    WithJsonSchema(
        keyed_map({"type": "string", "maxLength": 63, "pattern": LABEL_VALUE}, what="label key", max_properties=32)
    ),
]
# Annotations that choose a pod's AppArmor or seccomp profile: the security context sets those (and the
# restricted profile checks the annotations too), so a pool's own annotations may not.
PROFILE_ANNOTATION_PREFIXES = (
    "container.apparmor.security.beta.kubernetes.io/",
    "apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)
PROFILE_ANNOTATION_MESSAGE = (
    "spec.podAnnotations may not set AppArmor or seccomp annotations ("
    + ", ".join(p + "*" for p in PROFILE_ANNOTATION_PREFIXES)
    + "): "
    + RESTRICTED
)


def _no_profile_annotations(mapping: dict[str, str] | None) -> dict[str, str] | None:
    if any(key.startswith(PROFILE_ANNOTATION_PREFIXES) for key in mapping or {}):
        raise ValueError(PROFILE_ANNOTATION_MESSAGE)
    return mapping


_PROFILE_ANNOTATION_RULE = (
    "self.all(k, " + " && ".join(f"!k.startsWith({cel_string(p)})" for p in PROFILE_ANNOTATION_PREFIXES) + ")"
)
_POD_ANNOTATION_SCHEMA = keyed_map({"type": "string", "maxLength": 4096}, what="annotation key", max_properties=32)
_POD_ANNOTATION_SCHEMA["x-kubernetes-validations"].append(cel(_PROFILE_ANNOTATION_RULE, PROFILE_ANNOTATION_MESSAGE))
PodAnnotationMap = Annotated[
    dict[str, Annotated[str, Field(max_length=4096)]],
    _keys_match(QUALIFIED_NAME, "annotation key"),
    AfterValidator(_no_profile_annotations),
    WithJsonSchema(_POD_ANNOTATION_SCHEMA),
]
ResourceMap = Annotated[
    dict[str, Quantity],
    _keys_match(QUALIFIED_NAME, "resource name"),
    WithJsonSchema(
        keyed_map({"x-kubernetes-int-or-string": True, "pattern": QUANTITY}, what="resource name", max_properties=16)
    ),
]
ObjectName = Annotated[str, Field(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]


class ResourceRequirements(K8sModel):
    limits: ResourceMap | None = Field(None, description="Most of each resource the worker may use.")
    requests: ResourceMap | None = Field(None, description="What the scheduler reserves for the worker.")


class Toleration(K8sModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                    "a toleration with operator Exists takes no value",
                ),
                cel(
                    "has(self.key) || (has(self.operator) && self.operator == 'Exists')",
                    "a toleration without a key must use operator Exists",
                ),
            ]
        }
    )

    key: str | None = Field(
        None,
        max_length=316,
        pattern=QUALIFIED_NAME,
        description="The taint key the toleration applies to. Empty matches all taint keys; then operator must be "
        "Exists.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        None,
        description="How the key relates to the value: Exists (any value) or Equal. Unset: Equal.",
    )
    value: str | None = Field(
        None,
        max_length=63,
        pattern=LABEL_VALUE,
        description="The taint value the toleration matches; empty with operator Exists.",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="The taint effect to match: NoSchedule, PreferNoSchedule or NoExecute. Unset: all effects."
    )
    toleration_seconds: int | None = Field(
        None,
        ge=0,
        le=31_536_000,
        description="How long, in seconds, a pod stays bound to a node after a NoExecute taint it tolerates is "
        "added. Unset: forever.",
    )

    @model_validator(mode="after")
    def _rules(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("a toleration with operator Exists takes no value")
        if self.key is None and self.operator != "Exists":
            raise ValueError("a toleration without a key must use operator Exists")
        return self


class LocalObjectReference(K8sModel):
    name: ObjectName = Field(description="Name of the Secret in the pool's namespace.")


class ConfigMapKeySelector(K8sModel):
    name: ObjectName = Field(description="Name of the ConfigMap in the pool's namespace.")
    key: str = Field(min_length=1, max_length=253, pattern=CONFIG_KEY, description="The key to select.")
    optional: bool | None = Field(
        None, description="Whether the pod starts without the ConfigMap or its key. Unset: false (it does not)."
    )


class SecretKeySelector(K8sModel):
    name: ObjectName = Field(description="Name of the Secret in the pool's namespace.")
    key: str = Field(min_length=1, max_length=253, pattern=CONFIG_KEY, description="The key of the Secret to select.")
    optional: bool | None = Field(
        None, description="Whether the pod starts without the Secret or its key. Unset: false (it does not)."
    )


FIELD_PATH = (
    r"^(metadata\.(name|namespace|uid|labels\['[^']+'\]|annotations\['[^']+'\])"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)


class ObjectFieldSelector(K8sModel):
    field_path: str = Field(
        max_length=316,
        pattern=FIELD_PATH,
        description="Path of the pod field to select, such as metadata.name, metadata.labels['<key>'] or status.podIP.",
    )
    api_version: Literal["v1"] | None = Field(None, description="Version of the schema fieldPath is written in: v1.")


class ResourceFieldSelector(K8sModel):
    resource: Literal[
        "limits.cpu", "limits.memory", "limits.ephemeral-storage",
        "requests.cpu", "requests.memory", "requests.ephemeral-storage",
    ] = Field(description="The resource to select, such as limits.memory.")  # fmt: skip
    container_name: str | None = Field(
        None, max_length=63, description="The container whose resource to select. Unset: the worker container."
    )
    divisor: Quantity | None = Field(
        None, description="The unit the value is expressed in (such as 1m or 1Mi). Unset: 1."
    )


class EnvVarSource(K8sModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("(has(self.fieldRef) ? 1 : 0) + (has(self.resourceFieldRef) ? 1 : 0) + "
                    "(has(self.configMapKeyRef) ? 1 : 0) + (has(self.secretKeyRef) ? 1 : 0) == 1",
                    "valueFrom takes exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef"),
            ]
        }
    )  # fmt: skip

    field_ref: ObjectFieldSelector | None = Field(None, description="Selects a field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(
        None,
        description="Selects a resource limit or request of a container, such as limits.memory.",
    )
    config_map_key_ref: ConfigMapKeySelector | None = Field(
        None, description="Selects a key of a ConfigMap in the pool's namespace."
    )
    secret_key_ref: SecretKeySelector | None = Field(
        None, description="Selects a key of a Secret in the pool's namespace."
    )

    @model_validator(mode="after")
    def _one_source(self) -> EnvVarSource:
        sources = [self.field_ref, self.resource_field_ref, self.config_map_key_ref, self.secret_key_ref]
        if sum(s is not None for s in sources) != 1:
            raise ValueError("valueFrom takes exactly one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef")
        return self


class EnvVar(K8sModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("!(has(self.value) && has(self.valueFrom))", "set value or valueFrom, not both")
            ]
        }
    )

    name: str = Field(
        min_length=1,
        max_length=253,
        pattern=ENV_NAME,
        description="Name of the environment variable: printable ASCII characters but '=' and space.",
    )
    value: str | None = Field(
        None,
        max_length=32_768,
        description="The variable's value; $(VAR_NAME) refers to a variable defined before it. Unset: empty.",
    )
    value_from: EnvVarSource | None = Field(
        None, description="Source of the variable's value. Cannot be used if value is set."
    )

    @model_validator(mode="after")
    def _one_of(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError("set value or valueFrom, not both")
        return self


def _refuse(rule: str, message: str) -> dict[str, Any]:
    return {"x-kubernetes-validations": [cel(rule, message)]}


class Capabilities(K8sModel):
    add: list[Literal["NET_BIND_SERVICE"]] | None = Field(
        None,
        max_length=1,
        description="Only NET_BIND_SERVICE may be added (" + RESTRICTED + ").",
    )
    drop: list[Annotated[str, Field(max_length=64, pattern=r"^[A-Z_]+$")]] | None = Field(
        None,
        max_length=64,
        description="Capabilities to drop, such as NET_RAW. The operator drops ALL in any case, as the restricted "
        "Pod Security Standard requires.",
    )


LOCALHOST_PROFILE_RULE = (
    "a seccompProfile of type Localhost needs localhostProfile, and only that type takes one (the API server "
    "refuses the pods otherwise)"
)


class SeccompProfile(K8sModel):
    model_config = ConfigDict(
        json_schema_extra=_refuse(
            "(self.type == 'Localhost') == (has(self.localhostProfile) && self.localhostProfile != '')",
            LOCALHOST_PROFILE_RULE,
        )
    )

    type: Literal["RuntimeDefault", "Localhost"] = Field(description="Unconfined is not allowed (" + RESTRICTED + ").")
    localhost_profile: str | None = Field(
        None,
        max_length=4096,
        description="Path of a profile preconfigured on the node, relative to the kubelet's seccomp profile "
        "directory. Set it if and only if type is Localhost.",
    )

    @model_validator(mode="after")
    def _profile_for_localhost(self) -> SeccompProfile:
        if (self.type == "Localhost") != bool(self.localhost_profile):
            raise ValueError(LOCALHOST_PROFILE_RULE)
        return self


def _message(field: str, value: object) -> str:
    shown = str(value).lower() if isinstance(value, bool) else value
    return f"{field}: {shown} is not allowed: {RESTRICTED}"


def _refused(rule: str, field: str, value: object) -> dict[str, Any]:
    return _refuse(rule, _message(field, value))


class _RestrictedFields(K8sModel):
    """The security fields both contexts share, each refused with a message when it leaves "restricted"."""

    run_as_user: int | None = Field(
        None,
        ge=0,
        le=2_147_483_647,
        description="The UID the container processes run as; 0 (root) is not allowed. Unset: 10001 for the "
        "worker container. A container's value overrides the pod's.",
        json_schema_extra=_refused("self != 0", "runAsUser", 0),
    )
    run_as_group: int | None = Field(
        None,
        ge=0,
        le=2_147_483_647,
        description="The primary GID the container processes run as. Unset: 10001 for the worker container. "
        "A container's value overrides the pod's.",
    )
    run_as_non_root: bool | None = Field(
        None,
        description="Whether the kubelet refuses to start a container that would run as UID 0; only true is "
        "allowed. Unset: true.",
        json_schema_extra=_refused("self == true", "runAsNonRoot", False),
    )
    seccomp_profile: SeccompProfile | None = Field(
        None,
        description="The seccomp profile of the processes: RuntimeDefault or a Localhost profile. Unset: "
        "RuntimeDefault. A container's value overrides the pod's.",
    )

    @model_validator(mode="after")
    def _restricted(self) -> _RestrictedFields:
        refused = {
            "runAsUser": (self.run_as_user, 0),
            "runAsNonRoot": (self.run_as_non_root, False),
            "privileged": (getattr(self, "privileged", None), True),
            "allowPrivilegeEscalation": (getattr(self, "allow_privilege_escalation", None), True),
        }
        for field, (value, bad) in refused.items():
            if value is not None and value == bad and type(value) is type(bad):
                raise ValueError(_message(field, bad))
        return self


class ContainerSecurityContext(_RestrictedFields):
    read_only_root_filesystem: bool | None = Field(
        None,
        description="Whether the container's root filesystem is read-only (/tmp is a writable emptyDir either "
        "way). Unset: true.",
    )
    allow_privilege_escalation: bool | None = Field(
        None,
        description="Whether a process may gain more privileges than its parent (no_new_privs unset); only false "
        "is allowed. Unset: false.",
        json_schema_extra=_refused("self == false", "allowPrivilegeEscalation", True),
    )
    privileged: bool | None = Field(
        None,
        description="Whether the container runs privileged; only false is allowed. Unset: false.",
        json_schema_extra=_refused("self == false", "privileged", True),
    )
    capabilities: Capabilities | None = Field(
        None, description="The POSIX capabilities of the container. Unset: ALL dropped, none added."
    )


class PodSecurityContext(_RestrictedFields):
    fs_group: int | None = Field(
        None,
        ge=0,
        le=2_147_483_647,
        description="A supplemental GID of every container that owns the pod's volumes. Unset: 10001.",
    )
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = Field(
        None,
        description="When the kubelet changes the ownership of a volume to fsGroup: OnRootMismatch (only when its "
        "root does not match) or Always. Unset: Always.",
    )
    supplemental_groups: list[Annotated[int, Field(ge=0, le=2_147_483_647)]] | None = Field(
        None,
        max_length=32,
        description="More GIDs the first process of every container belongs to, besides its primary GID and fsGroup.",
    )
