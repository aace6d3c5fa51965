"""Operator settings from `FIREFLOW_OPERATOR_*` environment variables, validated once at start."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from fireflow_contract.logformat import LOG_FORMAT_ENV, LogFormat
from fireflow_contract.variable_names import nearest
from fireflow_operator.api.k8s_types import ResourceRequirements
from fireflow_operator.api.model import DEFAULT_MIGRATION_RESOURCES, DEFAULT_WORKER_RESOURCES

OWN_PREFIX = "FIREFLOW_OPERATOR_"


class SettingsError(Exception):
    """One printable line naming the variable and what is accepted."""


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


# A label's name (an optional DNS-subdomain prefix and a name of at most 63 characters) and its value.
_LABEL_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _labels(value: Any) -> Any:
    """`key=value,key2=value2` as a mapping (equality only: what kopf's filters and a shard need)."""
    if not isinstance(value, str):
        return value
    selector: dict[str, str] = {}
    for part in (p.strip() for p in value.split(",") if p.strip()):
        key, equals, label = (s.strip() for s in part.partition("="))
        if not equals or not _LABEL_NAME.match(key) or not _LABEL_VALUE.match(label) or key in selector:
            raise ValueError(f"{part!r} is not a label key=value (each key once, such as shard=a,team=payments)")
        selector[key] = label
    return selector


def _json(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise ValueError('not JSON (such as {"requests": {"cpu": "250m"}})') from None
    return value


class OperatorSettings(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True)

    # Namespaces whose pools this operator reconciles; empty = every namespace (cluster-wide RBAC needed).
    namespaces: Annotated[list[str], BeforeValidator(_split)] = Field(
        default_factory=list, alias="FIREFLOW_OPERATOR_NAMESPACES"
    )
    # Only pools with all these labels are reconciled (`key=value,...`; empty: every pool): operators on
    # disjoint selectors shard a fleet. The budget still sees every pool; one PostgreSQL server belongs to one shard.
    pool_selector: Annotated[dict[str, str], BeforeValidator(_labels)] = Field(
        default_factory=dict, alias="FIREFLOW_OPERATOR_POOL_SELECTOR"
    )
    # Where the operator's own metrics are served.
    metrics_host: str = Field("0.0.0.0", alias="FIREFLOW_OPERATOR_METRICS_HOST")  # noqa: S104 - scraped via the pod IP
    # Prometheus metrics of the operator itself; 0 turns the endpoint off.
    metrics_port: int = Field(8080, ge=0, le=65_535, alias="FIREFLOW_OPERATOR_METRICS_PORT")
    # Where kopf's liveness endpoint listens (the kubelet probes the pod IP).
    health_host: str = Field("0.0.0.0", alias="FIREFLOW_OPERATOR_HEALTH_HOST")  # noqa: S104 - probed via the pod IP
    # Liveness endpoint (kopf's) for the operator's own probe.
    health_port: int = Field(8081, ge=1, le=65_535, alias="FIREFLOW_OPERATOR_HEALTH_PORT")
    # How often every pool is looked at even when nothing changed (writes happen only on change).
    resync_seconds: float = Field(30, ge=1, le=3_600, alias="FIREFLOW_OPERATOR_RESYNC_SECONDS")
    # Connect and statement timeout of the operator's own database checks.
    database_timeout_seconds: int = Field(5, ge=1, le=60, alias="FIREFLOW_OPERATOR_DATABASE_TIMEOUT_SECONDS")
    # First back-off before a failed migration is tried again (doubling, at most 10 minutes).
    migration_retry_seconds: float = Field(30, ge=1, le=3_600, alias="FIREFLOW_OPERATOR_MIGRATION_RETRY_SECONDS")
    # Others' connection usage is smoothed over this window: a burst shorter than it never removes a worker.
    budget_window_seconds: float = Field(60, ge=0, le=3_600, alias="FIREFLOW_OPERATOR_BUDGET_WINDOW_SECONDS")
    # Service accounts a pool may name in spec.serviceAccountName besides the namespace's "default"; a pool
    # author must not get another workload's identity through the operator.
    allowed_service_accounts: Annotated[list[str], BeforeValidator(_split)] = Field(
        default_factory=list, alias="FIREFLOW_OPERATOR_ALLOWED_SERVICE_ACCOUNTS"
    )
    # Use only Secrets labelled fireflow.persistent.ai/usable-by-pools=true (the database URL's and those
    # spec.env reads): a pool author must not get a Secret they may not read through the operator.
    require_shared_secrets: bool = Field(True, alias="FIREFLOW_OPERATOR_REQUIRE_SHARED_SECRETS")
    # Resources (JSON) of worker containers and migration Jobs of pools that set none (spec.resources,
    # spec.migration.resources).
    worker_resources: Annotated[ResourceRequirements, BeforeValidator(_json)] = Field(
        default_factory=lambda: ResourceRequirements.model_validate(DEFAULT_WORKER_RESOURCES),
        alias="FIREFLOW_OPERATOR_WORKER_RESOURCES",
    )
    migration_resources: Annotated[ResourceRequirements, BeforeValidator(_json)] = Field(
        default_factory=lambda: ResourceRequirements.model_validate(DEFAULT_MIGRATION_RESOURCES),
        alias="FIREFLOW_OPERATOR_MIGRATION_RESOURCES",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", alias="FIREFLOW_OPERATOR_LOG_LEVEL")
    # Every line (kopf's and the Kubernetes client's included) as text or one JSON object (logformat.py).
    log_format: LogFormat = Field("text", alias=LOG_FORMAT_ENV)
    # Leader election on a coordination.k8s.io Lease in this namespace (the chart sets its own): replicas
    # beyond one stand by and take over when the leader's Lease expires. Empty: no election (one replica).
    leader_election_namespace: str = Field("", alias="FIREFLOW_OPERATOR_LEADER_ELECTION_NAMESPACE")
    lease_name: str = Field("fireflow-operator", min_length=1, alias="FIREFLOW_OPERATOR_LEASE_NAME")
    # A leader that could not renew for renew_deadline stops leading; the others wait lease_duration from the
    # last renewal they saw, so at most one leads. A standby takes the Lease lease_duration to lease_duration
    # + 2 x retry_period after the last renewal (measured with the defaults: 10 s, and 15 s until every one of 20
    # pools was reconciled; docs/install.md).
    lease_duration_seconds: int = Field(10, ge=2, le=300, alias="FIREFLOW_OPERATOR_LEASE_DURATION_SECONDS")
    renew_deadline_seconds: int = Field(7, ge=1, le=300, alias="FIREFLOW_OPERATOR_RENEW_DEADLINE_SECONDS")
    retry_period_seconds: int = Field(2, ge=1, le=60, alias="FIREFLOW_OPERATOR_RETRY_PERIOD_SECONDS")

    @model_validator(mode="after")
    def _renewal_inside_the_lease(self) -> OperatorSettings:
        if not 1.2 * self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds:
            raise ValueError(
                "1.2 x FIREFLOW_OPERATOR_RETRY_PERIOD_SECONDS < FIREFLOW_OPERATOR_RENEW_DEADLINE_SECONDS < "
                "FIREFLOW_OPERATOR_LEASE_DURATION_SECONDS must hold, so that a leader retries within its deadline "
                "and lets go before another takes over"
            )
        return self

    def selects(self, labels: Mapping[str, str] | None) -> bool:
        """Whether a pool with these labels is this operator's to reconcile."""
        have = labels or {}
        return all(have.get(key) == value for key, value in self.pool_selector.items())


def load_settings(environ: Mapping[str, str] | None = None) -> OperatorSettings:
    env = os.environ if environ is None else environ
    aliases = {info.alias for info in OperatorSettings.model_fields.values() if info.alias}
    values: dict[str, Any] = {k: v for k, v in env.items() if k in aliases and v.strip() != ""}
    if "FIREFLOW_OPERATOR_LOG_LEVEL" in values:
        values["FIREFLOW_OPERATOR_LOG_LEVEL"] = values["FIREFLOW_OPERATOR_LOG_LEVEL"].upper()
    if LOG_FORMAT_ENV in values:
        values[LOG_FORMAT_ENV] = values[LOG_FORMAT_ENV].strip().lower()
    try:
        return OperatorSettings.model_validate(values)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        if not first.get("loc"):  # a rule over several settings: its message names them
            raise SettingsError(str(first["msg"]).removeprefix("Value error, ")) from None
        alias = str(first["loc"][0])
        raise SettingsError(f"invalid {alias}={values.get(alias, '')!r}: {first['msg']}") from None


def unknown_variable_warnings(environ: Mapping[str, str]) -> list[str]:
    """One line per `FIREFLOW_OPERATOR_*` variable the operator does not read, with the nearest name it reads."""
    known = {info.alias for info in OperatorSettings.model_fields.values() if info.alias}
    lines = []
    for name in sorted(environ):
        if name.startswith(OWN_PREFIX) and name not in known:
            guess = nearest(name, known)
            fix = f"did you mean {guess}?" if guess else "`fireflow-operator --help` lists the variables it reads"
            lines.append(f"{name} is not a variable the operator reads and is ignored: {fix}")
    return lines
