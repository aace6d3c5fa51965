"""A container's environment, resolved as the kubelet resolves it.

Order (kubelet `makeEnvironmentVariables`): `envFrom` sources in order, then `env` entries in order,
each `value` expanded with `$(VAR)` against what is defined so far; `command` and `args` are expanded
against the final environment. Missing non-optional ConfigMaps/Secrets/keys are a
CreateContainerConfigError. Service links (`FOO_SERVICE_HOST`) are not injected: no ClusterIP is
reachable from a local process.
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Protocol

Json = dict[str, Any]


class EnvConfigError(Exception):
    """Reported as the container's waiting reason CreateContainerConfigError."""


class Sources(Protocol):
    def config_map(self, namespace: str, name: str) -> Mapping[str, str] | None: ...
    def secret(self, namespace: str, name: str) -> Mapping[str, str] | None: ...


def decode_secret_data(data: Mapping[str, str] | None) -> dict[str, str]:
    return {k: base64.b64decode(v).decode("utf-8", errors="replace") for k, v in (data or {}).items()}


def expand(text: str, mapping: Callable[[str], str | None]) -> str:
    """Kubernetes `$(VAR)` expansion: `$$` escapes `$`; an unknown or unclosed reference stays as written."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "$" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        following = text[i + 1]
        if following == "$":
            out.append("$")
            i += 2
        elif following == "(":
            close = text.find(")", i + 2)
            if close == -1:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2 : close]
                value = mapping(name)
                out.append(value if value is not None else f"$({name})")
                i = close + 1
        else:
            out.append("$" + following)
            i += 2
    return "".join(out)


_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Json, path: str) -> str:
    metadata, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": metadata.get("name", ""),
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.hostIP": status.get("hostIP", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIPs": ",".join(ip["ip"] for ip in status.get("hostIPs", [])),
        "status.podIPs": ",".join(ip["ip"] for ip in status.get("podIPs", [])),
    }
    if path in simple:
        return str(simple[path])
    match = _FIELD_LABEL.match(path)
    if match:
        return str(metadata.get(match.group(1), {}).get(match.group(2), ""))
    raise EnvConfigError(f"unsupported fieldRef fieldPath {path!r}")


_SUFFIXES = {
    "m": Decimal("0.001"), "": Decimal(1), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
    "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(text: str) -> Decimal:
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIXES:
        raise EnvConfigError(f"invalid quantity {text!r}")
    return Decimal(match.group(1)) * _SUFFIXES[match.group(2)]


def _node_allocatable(resource: str) -> Decimal:
    if resource == "cpu":
        return Decimal(os.cpu_count() or 1)
    if resource == "memory":
        return Decimal(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return Decimal(0)


def resource_value(container: Json, ref: Json) -> str:
    kind, _, resource = str(ref["resource"]).partition(".")
    resources = container.get("resources", {})
    raw = resources.get(kind, {}).get(resource)
    if raw is None and kind == "requests":
        raw = resources.get("limits", {}).get(resource)
    value = quantity(raw) if raw is not None else _node_allocatable(resource)
    divisor = quantity(ref.get("divisor") or "1")
    return str(math.ceil(value / divisor))


def _from_source(sources: Sources, namespace: str, kind: str, ref: Json) -> Mapping[str, str] | None:
    name = ref.get("name", "")
    found = sources.secret(namespace, name) if kind == "secret" else sources.config_map(namespace, name)
    if found is None and not ref.get("optional", False):
        raise EnvConfigError(f'{kind} "{name}" not found')
    return found


def resolve(pod: Json, container: Json, sources: Sources) -> dict[str, str]:
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(_env_from(sources, namespace, source))
    for var in container.get("env", []):
        name = var["name"]
        if var.get("value"):
            env[name] = expand(var["value"], env.get)
        elif "valueFrom" not in var:
            env[name] = ""
        else:
            value = _value_from(pod, container, sources, name, var["valueFrom"])
            if value is not None:
                env[name] = value
    return env


def _env_from(sources: Sources, namespace: str, source: Json) -> dict[str, str]:
    prefix = source.get("prefix", "")
    for kind, key in (("configmap", "configMapRef"), ("secret", "secretRef")):
        if key in source:
            data = _from_source(sources, namespace, kind, source[key]) or {}
            return {prefix + name: value for name, value in data.items() if name and "=" not in prefix + name}
    return {}


def _value_from(pod: Json, container: Json, sources: Sources, name: str, value_from: Json) -> str | None:
    """The variable's value, or None when an optional source or key is absent (the variable is unset)."""
    if "fieldRef" in value_from:
        return field_value(pod, value_from["fieldRef"]["fieldPath"])
    if "resourceFieldRef" in value_from:
        return resource_value(container, value_from["resourceFieldRef"])
    for kind, key, label in (("configmap", "configMapKeyRef", "ConfigMap"), ("secret", "secretKeyRef", "Secret")):
        if key in value_from:
            ref = value_from[key]
            namespace = pod["metadata"]["namespace"]
            data = _from_source(sources, namespace, kind, ref)
            if data is None or (ref["key"] not in data and ref.get("optional", False)):
                return None
            if ref["key"] not in data:
                raise EnvConfigError(f"couldn't find key {ref['key']} in {label} {namespace}/{ref['name']}")
            return data[ref["key"]]
    raise EnvConfigError(f"unsupported valueFrom for {name}: {sorted(value_from)}")


def expand_all(values: list[str], env: Mapping[str, str]) -> list[str]:
    return [expand(value, env.get) for value in values]
