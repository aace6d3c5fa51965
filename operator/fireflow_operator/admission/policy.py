"""What a pool author may get through the operator, decided before anything is built (pure).

A person allowed to manage pools, but not to read Secrets or create privileged pods, must get neither
through the operator. Pod security is restricted by the CRD (k8s_types.py). Here: a pool may use only
Secrets whose owner shared them with pools (a label), only service accounts the operator's installer
allowed, and a database URL is checked for what DBOS can use, without ever echoing what the Secret holds.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg.conninfo import conninfo_to_dict

from fireflow_contract.dburl import url_problem
from fireflow_operator.api import conditions
from fireflow_operator.api.model import PoolSpec
from fireflow_operator.database.dsn import libpq_dsn

SHARED_SECRET_LABEL = "fireflow.persistent.ai/usable-by-pools"
DEFAULT_SERVICE_ACCOUNT = "default"


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


def secrets_used(spec: PoolSpec) -> list[str]:
    """Every Secret the pool's pods would use: the database URL's, those of spec.env, and the kubelet's pull
    credentials of spec.imagePullSecrets (someone else's registry login is someone else's Secret too)."""
    names = [spec.database.secret_ref.name]
    env_refs = [env.value_from.secret_key_ref for env in spec.env or [] if env.value_from is not None]
    pull_refs = [ref.name for ref in spec.image_pull_secrets or []]
    for name in [ref.name for ref in env_refs if ref is not None] + pull_refs:
        if name not in names:
            names.append(name)
    return names


def unshared_secret(
    spec: PoolSpec, namespace: str, labels_by_secret: dict[str, dict[str, str] | None]
) -> Refusal | None:
    """The first Secret that its owner did not share with pools (None: every one was). A missing one is not
    shared either: whoever creates it later, unlabelled, would hand it to the pods (an optional env
    reference or a pull Secret does not stop them from starting). The database URL's own Secret, which
    nothing starts without, is reported as missing where it is read."""
    for name, labels in labels_by_secret.items():
        share = f"kubectl -n {namespace} label secret {name} {SHARED_SECRET_LABEL}=true"
        if labels is None and name != spec.database.secret_ref.name:
            return Refusal(
                conditions.REASON_SECRET_NOT_SHARED,
                f"Secret {name!r} does not exist in namespace {namespace}, so it is not shared with pools: "
                f"create it and share it with: {share} (or remove it from the pool's spec)",
            )
        if labels is not None and labels.get(SHARED_SECRET_LABEL) != "true":
            return Refusal(
                conditions.REASON_SECRET_NOT_SHARED,
                f"Secret {name!r} is not shared with pools: whoever may write Secrets in namespace {namespace} "
                f"shares it with: {share}",
            )
    return None


def service_account_refusal(spec: PoolSpec, allowed: list[str]) -> Refusal | None:
    account = spec.service_account_name
    if account is None or account == DEFAULT_SERVICE_ACCOUNT or account in allowed:
        return None
    others = ", ".join(repr(a) for a in allowed) if allowed else "none but the namespace's default"
    return Refusal(
        conditions.REASON_SERVICE_ACCOUNT_NOT_ALLOWED,
        f"spec.serviceAccountName {account!r} is not allowed: this operator lets pools run as {others} "
        f"(the Helm value security.allowedServiceAccounts)",
    )


def url_refusal(url: str, secret: str, key: str) -> Refusal | None:
    """Whether DBOS can use the URL; the message names the Secret, never what it holds."""
    where = f"Secret {secret!r} key {key!r}"
    try:
        params = conninfo_to_dict(libpq_dsn(url))
    except Exception:  # libpq's message quotes the string: it must not reach a status
        return Refusal(
            conditions.REASON_INVALID_DATABASE_URL, f"{where} is not a PostgreSQL URL or key=value connection string"
        )
    if not url.strip().startswith(("postgres://", "postgresql://", "postgresql+")):
        return Refusal(
            conditions.REASON_INVALID_DATABASE_URL,
            f"{where} must be a postgresql:// URL (DBOS takes no key=value strings)",
        )
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) > 1:
        return Refusal(
            conditions.REASON_INVALID_DATABASE_URL,
            f"{where} names {len(hosts)} hosts: the executions database needs exactly one (the primary; "
            f"put a proxy or a DNS name in front of a failover pair)",
        )
    problem = url_problem(url.strip())
    if problem is not None:
        return Refusal(conditions.REASON_INVALID_DATABASE_URL, f"{where} {problem}")
    return None
