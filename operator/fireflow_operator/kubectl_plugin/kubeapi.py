"""The plugin's side of the API server: the kubeconfig as kubectl reads it, the pools and their pods, Jobs and
events, the pool's database URL from its Secret, and the one-off plan Job (I/O).

Every refusal or absence is said in one sentence naming the fix (PluginError), never as a client traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import urllib3
import yaml
from kubernetes import client, config
from pydantic import ValidationError

from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, KIND, PLURAL, VERSION, PoolSpec, parse_spec
from fireflow_operator.kube import Kube, read_or_none, secret_data
from fireflow_operator.kubectl_plugin.errors import PluginError
from fireflow_operator.kubectl_plugin.facts import Obj
from fireflow_operator.kubectl_plugin.rundb import PoolDatabase
from fireflow_operator.migration import machine, observe
from fireflow_operator.rollout import health
from fireflow_operator.status import first_error

TIMEOUT = 30  # seconds per API request
JOB_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Connection:
    api: client.ApiClient
    namespace: str  # -n, else the context's namespace, else "default"
    server: str
    context: str

    @property
    def kube(self) -> Kube:
        return Kube.from_client(self.api)


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Connection:
    """The kubeconfig as kubectl reads it: --kubeconfig, else KUBECONFIG (files separated by `:`, merged), else
    ~/.kube/config."""
    paths = kubeconfig or os.environ.get("KUBECONFIG") or str(Path("~/.kube/config").expanduser())
    if not any(Path(p).expanduser().is_file() for p in paths.split(os.pathsep) if p):
        raise PluginError(f"no kubeconfig at {paths}: set KUBECONFIG or pass --kubeconfig")
    try:
        contexts, active = config.list_kube_config_contexts(config_file=paths)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError, yaml.YAMLError) as err:
        detail = " ".join(str(err).split())
        raise PluginError(
            f"cannot read the kubeconfig {paths} ({detail}): check it with `kubectl config view`"
        ) from None
    chosen = next((c for c in contexts or [] if c.get("name") == context), None) if context else active
    if chosen is None:
        known = ", ".join(sorted(str(c.get("name")) for c in contexts or [])) or "none"
        raise PluginError(
            f"context {context!r} is not in the kubeconfig (its contexts: {known}); pass another --context"
        )
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=paths, context=chosen["name"], client_configuration=configuration
        )
    except (config.ConfigException, OSError) as err:
        raise PluginError(f"cannot use context {chosen['name']!r} of the kubeconfig: {err}") from None
    configuration.retries = False  # one clear error, not urllib3's retry warnings
    ns = namespace or (chosen.get("context") or {}).get("namespace") or "default"
    return Connection(client.ApiClient(configuration), ns, str(configuration.host), str(chosen["name"]))


def call(
    conn: Connection,
    what: str,
    request: Callable[[], Any],
    *,
    not_found: str | None = None,
    forbidden_fix: str | None = None,
) -> Any:
    """`request()`, with the API server's refusal or absence said in one sentence (`not_found` for a missing
    object, as opposed to a missing resource type; `forbidden_fix` what to do when RBAC refuses)."""
    try:
        return request()
    except client.ApiException as err:
        raise PluginError(_api_error(conn, what, err, not_found, forbidden_fix)) from None
    except urllib3.exceptions.HTTPError as err:
        reason = str(getattr(err, "reason", None) or err).rsplit("] ", 1)[-1]  # "Connection refused", not urllib3's
        raise PluginError(
            f"cannot reach the API server at {conn.server} (context {conn.context!r}): {reason}; check the "
            "kubeconfig's context (--context) and that the cluster is up"
        ) from None


def _api_error(
    conn: Connection, what: str, err: client.ApiException, not_found: str | None, forbidden_fix: str | None
) -> str:
    try:
        body = json.loads(err.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") or err.reason
    if err.status == 401:
        return f"the API server at {conn.server} did not accept the kubeconfig's credentials: {message}"
    if err.status == 403:
        fix = forbidden_fix or "ask for that permission, or use a context that has it (--context)"
        return f"the API server refused to {what} ({message}): {fix}"
    if err.status == 404:
        if (body.get("details") or {}).get("name") and not_found:
            return not_found
        if not (body.get("details") or {}).get("name"):
            return f"the API server has no {KIND} resource: install the CRD (kubectl apply -f crds/ or the Helm chart)"
    return f"cannot {what}: {message}"


# ---- pools, pods, events ---------------------------------------------------------------------------------------


def fetch_pool(conn: Connection, name: str, namespace: str | None = None) -> Obj:
    ns = namespace or conn.namespace
    custom = client.CustomObjectsApi(conn.api)
    get = partial(custom.get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name, _request_timeout=TIMEOUT)
    missing = f"no {KIND} {name!r} in namespace {ns!r}: `kubectl fireflow list -A` lists every pool"
    found: Obj = call(conn, f"read pool {name!r}", get, not_found=missing)
    return found


def fetch_pools(conn: Connection, *, all_namespaces: bool, namespace: str | None = None) -> list[Obj]:
    custom = client.CustomObjectsApi(conn.api)
    ns = namespace or conn.namespace
    if all_namespaces:
        what = "list pools"
        request = partial(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, _request_timeout=TIMEOUT)
    else:
        what = f"list pools in namespace {ns!r}"
        request = partial(custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, _request_timeout=TIMEOUT)
    items: list[Obj] = call(conn, what, request).get("items") or []
    return sorted(items, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))


def fetch_pods_and_events(conn: Connection, pool: Obj) -> tuple[list[Obj], list[Obj]]:
    core = client.CoreV1Api(conn.api)
    meta = pool["metadata"]
    ns = meta["namespace"]
    selector = names.workers_selector(meta["name"])
    list_pods = partial(core.list_namespaced_pod, ns, label_selector=selector, _request_timeout=TIMEOUT)
    pods = call(conn, "list the pool's pods", list_pods)
    fields = f"involvedObject.kind={KIND},involvedObject.name={meta['name']},involvedObject.uid={meta['uid']}"
    list_events = partial(core.list_namespaced_event, ns, field_selector=fields, _request_timeout=TIMEOUT)
    events = call(conn, "list the pool's events", list_events)
    plain: Callable[[Any], Obj] = conn.api.sanitize_for_serialization
    return [plain(p) for p in pods.items], [plain(e) for e in events.items]


def pool_spec(pool: Obj) -> PoolSpec:
    meta = pool["metadata"]
    try:
        return parse_spec(pool.get("spec") or {})
    except ValidationError as err:
        raise PluginError(
            f"pool {meta['namespace']}/{meta['name']} has an invalid spec ({first_error(err)}): fix it with "
            f"`kubectl edit ffwp {meta['name']} -n {meta['namespace']}`"
        ) from None


def live_worker_pods(conn: Connection, namespace: str, pool_name: str) -> dict[str, int]:
    """The pool's pods that exist (terminating ones too), with the worker processes each runs."""
    kube = conn.kube
    listed: dict[str, int] = call(
        conn, "list the pool's pods", partial(kube.list_worker_pods, namespace, names.selector_labels(pool_name))
    )
    return listed


# ---- the pool's database URL ----------------------------------------------------------------------------------


def with_host(url: str, address: str) -> str:
    """The URL with its host and port replaced by `address` (HOST, HOST:PORT or [IPv6]:PORT)."""
    host, port = address, None
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest.removeprefix(":") or None
    elif address.count(":") == 1:
        host, port = address.split(":")
    if not host or (port is not None and not port.isdigit()):
        raise PluginError(f"--database-host {address!r} is not HOST or HOST:PORT: pass e.g. 127.0.0.1:15432")
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise PluginError("the pool's database URL is not a postgresql:// URL: pass --database-url instead") from None
    moved = parsed.set(host=host, port=int(port) if port else parsed.port)
    return moved.render_as_string(hide_password=False)


def database_of(conn: Connection, pool: Obj, spec: PoolSpec, *, url: str | None, host: str | None) -> PoolDatabase:
    """The pool's database: `--database-url`, else the URL of the pool's Secret (spec.database.secretRef) read
    through the API server, else the operator's copy of it (kept while the pool's runs need it); `--database-host`
    reaches the same database at another address (a port forwarded to it)."""
    meta = pool["metadata"]
    ns, name = meta["namespace"], meta["name"]
    where = f"{ns}/{name}"
    if url:
        found, source = url.strip(), "--database-url"
    else:
        found, source = _secret_url(conn, ns, name, spec)
    if host:
        found, source = with_host(found, host), f"{source}, at {host}"
    return PoolDatabase(found, source, where, spec.dbos.application_name)


def _secret_url(conn: Connection, namespace: str, pool_name: str, spec: PoolSpec) -> tuple[str, str]:
    ref = spec.database.secret_ref
    read = partial(client.CoreV1Api(conn.api).read_namespaced_secret, _request_timeout=TIMEOUT)
    fix = "ask for get on secrets there, or pass --database-url"
    for secret_name, key in ((ref.name, ref.key), (names.connection_secret_name(pool_name), names.CONNECTION_KEY)):
        what = f"read Secret {secret_name!r} in namespace {namespace!r}"
        secret = call(conn, what, partial(read_or_none, read, secret_name, namespace), forbidden_fix=fix)
        value = secret_data(secret, key)
        if value:
            return value, f"Secret {secret_name!r} key {key!r}"
    raise PluginError(
        f"Secret {ref.name!r} with key {ref.key!r} is not in namespace {namespace!r} (nor the operator's copy of "
        "it): create it, or pass --database-url"
    )


# ---- migration Jobs -------------------------------------------------------------------------------------------


def _job_fact(conn: Connection, namespace: str, job: Any) -> Obj:
    record = observe.as_migration_job(job)
    seen: machine.JobObservation = call(
        conn, "read the migration Job's pods", partial(observe.observation, conn.kube, namespace, job)
    )
    return {
        "name": record.name,
        "mode": record.mode,
        "state": record.state,
        "created": record.created,
        "summary": None if seen.summary is None else json.loads(seen.summary.line()),
        "message": seen.message or None,
    }


def last_migration_job(conn: Connection, namespace: str, pool_name: str) -> Obj | None:
    """The newest of the pool's migration Jobs the operator keeps (a failed one stays for its logs)."""
    listed: dict[str, Any] = call(
        conn, "list the pool's migration Jobs", partial(observe.pool_jobs, conn.kube, namespace, pool_name)
    )
    if not listed:
        return None
    newest = max(listed.values(), key=lambda j: (j.metadata.creation_timestamp, j.metadata.name))
    return _job_fact(conn, namespace, newest)


def run_plan_job(conn: Connection, namespace: str, body: Obj, *, timeout_seconds: float) -> tuple[str, Obj]:
    """Create the plan Job, wait until it finished, and return its name and what it said; it is deleted
    afterwards, with its pod, as it is when it cannot run or does not finish in time."""
    batch = client.BatchV1Api(conn.api)
    fix = "ask for create, get and delete on jobs (and list on pods) there"
    manifest: Any = body  # the client takes the API server's spelling as well as its models
    create = partial(batch.create_namespaced_job, namespace, manifest, _request_timeout=TIMEOUT)
    created = call(conn, f"create a Job in namespace {namespace!r}", create, forbidden_fix=fix)
    name = str(created.metadata.name)
    delete = partial(
        read_or_none, partial(batch.delete_namespaced_job, propagation_policy="Background", _request_timeout=TIMEOUT),
        name, namespace,
    )  # fmt: skip
    try:
        said = _wait_for(conn, namespace, name, timeout_seconds)
    except PluginError:
        with contextlib.suppress(PluginError):  # the first error is the one to tell
            call(conn, f"delete the plan Job {name}", delete)
        raise
    call(conn, f"delete the plan Job {name}", delete, forbidden_fix=fix)
    return name, said


def _wait_for(conn: Connection, namespace: str, name: str, timeout_seconds: float) -> Obj:
    batch = client.BatchV1Api(conn.api)
    deadline = time.monotonic() + timeout_seconds
    while True:
        job = call(conn, f"read the plan Job {name}", partial(batch.read_namespaced_job, name, namespace))
        if observe.job_state(job) != "running":
            return _job_fact(conn, namespace, job)
        pods = call(conn, "list the plan Job's pods", partial(conn.kube.job_pods, namespace, name))
        problem = health.first_pod_problem(pods)
        if problem is not None and problem.reason != "Unschedulable":  # a node may yet come (an autoscaler)
            raise PluginError(
                f"the plan Job {name} cannot run ({problem.reason}: {problem.message}): check the image (--image) "
                "and the pool's spec.imagePullSecrets"
            )
        if time.monotonic() > deadline:
            raise PluginError(
                f"the plan Job {name} did not finish within {timeout_seconds:g} s and was deleted: look at its pod's "
                "events (kubectl get events), or give it longer with --timeout"
            )
        time.sleep(JOB_POLL_SECONDS)
