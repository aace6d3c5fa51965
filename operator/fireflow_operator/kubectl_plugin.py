"""`kubectl fireflow`: what a platform team asks of a pool, from the API server alone (no database credentials).

kubectl runs `kubectl-fireflow` from PATH for `kubectl fireflow ...` and passes every argument after `fireflow`,
so the kubeconfig options are this program's own, spelled as kubectl spells them (`--kubeconfig`, `--context`,
`-n/--namespace`, `-A/--all-namespaces`; KUBECONFIG, a `:`-separated list, as kubectl reads it).

    kubectl fireflow list [-A]            pools with their phase, ready/desired workers and version
    kubectl fireflow status POOL          phase, conditions, versions, workers, migration, budget, events

`-o json|yaml` prints the same facts as data. The pure part builds those facts from objects as the API server
spells them (`summarize_pool`, `pool_row`) and renders them (`render_status`, `render_list`); the I/O part only
reads. Run ids and their states live in the pool's database, not in the API: `fireflow` (the client, given the
database URL) lists, cancels and resumes runs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from pydantic import ValidationError

from fireflow_contract import executor_ids
from fireflow_operator.api import names
from fireflow_operator.api.model import GROUP, KIND, PLURAL, VERSION, parse_spec, worker_processes

TIMEOUT = 30  # seconds per API request
EVENTS_SHOWN = 10
Obj = dict[str, Any]


class PluginError(Exception):
    """What went wrong, in one sentence naming the fix; printed as `error: ...` with exit status 1."""


# ---- pure: facts from API objects -------------------------------------------------------------------------


def _parse_time(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def age(value: Any, now: datetime.datetime) -> str:
    """kubectl's short age of a timestamp: 45s, 12m, 5h, 3d (or <unknown>)."""
    when = _parse_time(value)
    if when is None:
        return "<unknown>"
    seconds = max(0, int((now - when).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= 2 * size or (unit == "m" and seconds >= size):
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _condition(status: Obj, kind: str) -> Obj:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _version_index(pod: Obj) -> int:
    label = ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_VERSION_INDEX)
    return int(label) if label and label.isdigit() else 0


def _pod_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in (pod.get("status") or {}).get("conditions", [])
    )


def _processes(spec: Obj) -> int:
    try:
        return worker_processes(parse_spec(spec))
    except ValidationError:
        return 1  # an invalid spec runs no worker; its pods (if any) predate it


def worker_facts(pool: Obj, pods: Sequence[Obj]) -> list[Obj]:
    """One entry per worker pod: its version, readiness, restarts and the DBOS executor ids it runs as."""
    namespace = pool["metadata"]["namespace"]
    status = pool.get("status") or {}
    by_index = {int(v.get("index", 0)): str(v.get("applicationVersion")) for v in status.get("versions") or []}
    current = str(status.get("currentApplicationVersion") or "")
    processes = _processes(pool.get("spec") or {})
    workers = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        name = str(pod["metadata"]["name"])
        base = executor_ids.executor_id(namespace, name)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        workers.append(
            {
                "pod": name,
                "applicationVersion": by_index.get(_version_index(pod), current),
                "ready": _pod_ready(pod),
                "phase": (pod.get("status") or {}).get("phase", ""),
                "restarts": sum(int(s.get("restartCount") or 0) for s in statuses),
                "created": pod["metadata"].get("creationTimestamp"),
                "executors": [executor_ids.child_executor_id(base, k) for k in range(processes)],
            }
        )
    return workers


def event_facts(events: Sequence[Obj]) -> list[Obj]:
    """The pool's latest events, oldest first (as `kubectl describe` lists them)."""

    def last_seen(event: Obj) -> str:
        return str(
            event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""
        )

    ordered = sorted(
        events, key=lambda e: _parse_time(last_seen(e)) or datetime.datetime.min.replace(tzinfo=datetime.UTC)
    )
    return [
        {
            "type": e.get("type", ""),
            "reason": e.get("reason", ""),
            "message": " ".join(str(e.get("message") or "").split()),
            "count": int(e.get("count") or 1),
            "lastSeen": last_seen(e),
        }
        for e in ordered[-EVENTS_SHOWN:]
    ]


def summarize_pool(pool: Obj, pods: Sequence[Obj], events: Sequence[Obj]) -> Obj:
    """Everything `status` shows, as data (what `-o json|yaml` prints)."""
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    budget = status.get("connectionBudget") or None
    return {
        "namespace": pool["metadata"]["namespace"],
        "name": pool["metadata"]["name"],
        "phase": status.get("phase", "Unknown"),
        "phaseReason": status.get("phaseReason", ""),
        "message": _condition(status, "Ready").get("message", ""),
        "image": status.get("currentImage"),
        "targetImage": status.get("targetImage") or spec.get("image"),
        "applicationVersion": status.get("currentApplicationVersion"),
        "replicas": {
            "asked": spec.get("replicas"),
            "desired": status.get("desiredReplicas"),
            "allowed": (budget or {}).get("allowedReplicas"),
            "current": status.get("replicas"),
            "ready": status.get("readyReplicas"),
        },
        "schemaVersion": status.get("schemaVersion"),
        "requiredSchemaVersion": status.get("requiredSchemaVersion"),
        "recoveredRuns": int(status.get("recoveredRuns") or 0),
        "deleting": bool(pool["metadata"].get("deletionTimestamp")),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
        "versions": list(status.get("versions") or []),
        "workers": worker_facts(pool, pods),
        "migration": status.get("migration") or None,
        "connectionBudget": budget,
        "events": event_facts(events),
    }


def _ready_of_desired(spec: Obj, status: Obj) -> str:
    asked = spec.get("replicas")
    desired = asked if asked is not None else status.get("desiredReplicas")
    return f"{status.get('readyReplicas', 0)}/{'-' if desired is None else desired}"


def pool_row(pool: Obj) -> Obj:
    """One pool as `list` shows it: READY is ready workers of those asked for (spec.replicas)."""
    spec, status = pool.get("spec") or {}, pool.get("status") or {}
    return {
        "namespace": pool["metadata"]["namespace"],
        "name": pool["metadata"]["name"],
        "phase": status.get("phase", "Unknown"),
        "reason": status.get("phaseReason", ""),
        "ready": _ready_of_desired(spec, status),
        "applicationVersion": status.get("currentApplicationVersion"),
        "image": status.get("currentImage") or spec.get("image"),
        "schemaVersion": status.get("schemaVersion"),
        "created": pool["metadata"].get("creationTimestamp"),
    }


# ---- pure: text ----------------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns as kubectl aligns them: left-aligned, three spaces apart, `<none>` for nothing."""
    cells = [[str(h) for h in headers], *[["<none>" if v in (None, "") else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def _fields(pairs: Sequence[tuple[str, Any]]) -> str:
    shown = [(k, v) for k, v in pairs if v not in (None, "")]
    width = max(len(k) for k, _ in shown) + 2
    return "\n".join(f"{(k + ':').ljust(width)}{v}" for k, v in shown)


def _replicas_line(replicas: Obj) -> str:
    asked = replicas["asked"]
    parts = [f"{asked} asked (spec.replicas)" if asked is not None else "asked by an autoscaler (/scale)"]
    parts += [f"{replicas[k]} {k}" for k in ("desired", "allowed", "current", "ready") if replicas[k] is not None]
    return ", ".join(parts)


def _summary_section(s: Obj) -> str:
    phase = f"{s['phase']} ({s['phaseReason']})" if s["phaseReason"] else s["phase"]
    schema = s["schemaVersion"]
    if schema is not None and s["requiredSchemaVersion"] not in (None, schema):
        schema = f"{schema} (the target image needs {s['requiredSchemaVersion']})"
    return "Pool Summary\n" + _fields(
        [
            ("Name", f"{s['namespace']}/{s['name']}"),
            ("Phase", phase + (", being deleted" if s["deleting"] else "")),
            ("Message", s["message"]),
            ("Image", s["image"]),
            ("Target image", s["targetImage"] if s["targetImage"] != s["image"] else None),
            ("Application version", s["applicationVersion"]),
            ("Workers", _replicas_line(s["replicas"])),
            ("Schema version", schema),
            ("Recovered runs", s["recoveredRuns"]),
        ]
    )


def _versions_section(s: Obj) -> str:
    rows = []
    for v in s["versions"]:
        left = v.get("runsLeft")
        runs = f"{left.get('pending', 0)} PENDING, {left.get('enqueued', 0)} ENQUEUED" if left else ""
        ready = f"{v.get('readyReplicas', 0)}/{v.get('replicas', 0)}"
        rows.append([v.get("applicationVersion"), v.get("state"), v.get("image"), v.get("statefulSet"), ready, runs])
    body = table(["VERSION", "STATE", "IMAGE", "STATEFULSET", "READY", "RUNS LEFT"], rows) if rows else "None yet"
    return "Versions\n" + body


def _workers_section(s: Obj, now: datetime.datetime) -> str:
    rows = []
    for w in s["workers"]:
        executors = w["executors"]
        shown = executors[0] + (f" (+{len(executors) - 1} processes)" if len(executors) > 1 else "")
        rows.append([w["pod"], w["applicationVersion"], w["ready"], w["restarts"], age(w["created"], now), shown])
    headers = ["POD", "VERSION", "READY", "RESTARTS", "AGE", "EXECUTOR"]
    return "Workers\n" + (table(headers, rows) if rows else "No worker pods")


def _conditions_section(s: Obj, now: datetime.datetime) -> str:
    rows = [
        [c["type"], c["status"], c["reason"], age(c["lastTransitionTime"], now), c["message"]] for c in s["conditions"]
    ]
    return "Conditions\n" + (table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows) if rows else "None yet")


def _migration_section(s: Obj) -> str:
    m = s["migration"]
    if not m:
        return "Migration\nNone recorded"
    attempt = m.get("attempt")
    return "Migration\n" + _fields(
        [
            ("Phase", m.get("phase")),
            ("Target", m.get("target")),
            ("Attempt", attempt),
            ("Mode", "online" if m.get("online") else None),
            ("Message", m.get("message")),
        ]
    )


def _budget_section(s: Obj) -> str:
    b = s["connectionBudget"]
    if not b:
        return "Connection Budget\nNot computed yet (the operator has not read the database)"
    allowed = f"{b.get('allowedReplicas')} of {b.get('desiredReplicas')} desired (at most {b.get('maxReplicas')})"
    return "Connection Budget\n" + _fields(
        [
            ("Server", b.get("server")),
            ("Limited by", b.get("limitedBy")),
            ("Max connections", b.get("maxConnections")),
            ("Per worker", b.get("perReplica")),
            ("Needed", b.get("needed")),
            ("Allowed workers", allowed),
            ("Retiring workers", b.get("retiringReplicas") or None),
            ("Other pools", b.get("otherPools")),
            ("Others in use", b.get("othersInUse")),
            ("Reserved", b.get("reservedByServer")),
            ("Headroom", b.get("headroom")),
        ]
    )


def _events_section(s: Obj, now: datetime.datetime) -> str:
    rows = [[age(e["lastSeen"], now), e["type"], e["reason"], e["count"], e["message"]] for e in s["events"]]
    headers = ["LAST SEEN", "TYPE", "REASON", "COUNT", "MESSAGE"]
    return f"Events (last {EVENTS_SHOWN})\n" + (table(headers, rows) if rows else "None")


def render_status(s: Obj, now: datetime.datetime) -> str:
    sections = [
        _summary_section(s),
        _conditions_section(s, now),
        _versions_section(s),
        _workers_section(s, now),
        _migration_section(s),
        _budget_section(s),
        _events_section(s, now),
    ]
    return "\n\n".join(sections) + "\n"


def render_list(rows: Sequence[Obj], now: datetime.datetime, *, all_namespaces: bool) -> str:
    if not rows:
        return "No FireflowWorkerPools found.\n"
    headers = ["NAME", "PHASE", "REASON", "READY", "VERSION", "SCHEMA", "IMAGE", "AGE"]
    body = [
        [r["name"], r["phase"], r["reason"], r["ready"], r["applicationVersion"], r["schemaVersion"], r["image"],
         age(r["created"], now)]
        for r in rows
    ]  # fmt: skip
    if all_namespaces:
        headers, body = ["NAMESPACE", *headers], [[r["namespace"], *row] for r, row in zip(rows, body, strict=True)]
    return table(headers, body) + "\n"


def render_data(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, default=str) + "\n"
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


# ---- I/O: the API server -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Connection:
    api: client.ApiClient
    namespace: str  # -n, else the context's namespace, else "default"
    server: str
    context: str


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


def _call(conn: Connection, what: str, request: Callable[[], Any], not_found: str | None = None) -> Any:
    """`request()`, with the API server's refusal or absence said in one sentence (`not_found` for a missing
    object, as opposed to a missing resource type)."""
    try:
        return request()
    except client.ApiException as err:
        raise PluginError(_api_error(conn, what, err, not_found)) from None
    except urllib3.exceptions.HTTPError as err:
        reason = str(getattr(err, "reason", None) or err).rsplit("] ", 1)[-1]  # "Connection refused", not urllib3's
        raise PluginError(
            f"cannot reach the API server at {conn.server} (context {conn.context!r}): {reason}; check the "
            "kubeconfig's context (--context) and that the cluster is up"
        ) from None


def _api_error(conn: Connection, what: str, err: client.ApiException, not_found: str | None) -> str:
    try:
        body = json.loads(err.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") or err.reason
    if err.status == 401:
        return f"the API server at {conn.server} did not accept the kubeconfig's credentials: {message}"
    if err.status == 403:
        return f"the API server refused to {what}: {message}"
    if err.status == 404:
        if (body.get("details") or {}).get("name") and not_found:
            return not_found
        if not (body.get("details") or {}).get("name"):
            return f"the API server has no {KIND} resource: install the CRD (kubectl apply -f crds/ or the Helm chart)"
    return f"cannot {what}: {message}"


def fetch_pool(conn: Connection, name: str) -> Obj:
    custom = client.CustomObjectsApi(conn.api)
    get = partial(
        custom.get_namespaced_custom_object, GROUP, VERSION, conn.namespace, PLURAL, name, _request_timeout=TIMEOUT
    )
    missing = f"no {KIND} {name!r} in namespace {conn.namespace!r}: `kubectl fireflow list -A` lists every pool"
    found: Obj = _call(conn, f"read pool {name!r}", get, not_found=missing)
    return found


def fetch_pools(conn: Connection, *, all_namespaces: bool) -> list[Obj]:
    custom = client.CustomObjectsApi(conn.api)
    if all_namespaces:
        what = "list pools"
        request = partial(custom.list_cluster_custom_object, GROUP, VERSION, PLURAL, _request_timeout=TIMEOUT)
    else:
        what = f"list pools in namespace {conn.namespace!r}"
        request = partial(
            custom.list_namespaced_custom_object, GROUP, VERSION, conn.namespace, PLURAL, _request_timeout=TIMEOUT
        )
    items: list[Obj] = _call(conn, what, request).get("items") or []
    return sorted(items, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"]))


def fetch_pods_and_events(conn: Connection, pool: Obj) -> tuple[list[Obj], list[Obj]]:
    core = client.CoreV1Api(conn.api)
    meta = pool["metadata"]
    selector = ",".join(f"{k}={v}" for k, v in names.selector_labels(meta["name"]).items())
    list_pods = partial(core.list_namespaced_pod, conn.namespace, label_selector=selector, _request_timeout=TIMEOUT)
    pods = _call(conn, "list the pool's pods", list_pods)
    fields = f"involvedObject.kind={KIND},involvedObject.name={meta['name']},involvedObject.uid={meta['uid']}"
    list_events = partial(core.list_namespaced_event, conn.namespace, field_selector=fields, _request_timeout=TIMEOUT)
    events = _call(conn, "list the pool's events", list_events)
    plain: Callable[[Any], Obj] = conn.api.sanitize_for_serialization
    return [plain(p) for p in pods.items], [plain(e) for e in events.items]


# ---- the command line ----------------------------------------------------------------------------------------


def _kube_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """kubectl's own options, accepted before and after the subcommand (kubectl passes both through)."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--kubeconfig", default=default, help="the kubeconfig file (default: KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", default=default, help="the kubeconfig context (default: its current one)")
    parser.add_argument("-n", "--namespace", default=default, help="the namespace (default: the context's)")
    parser.add_argument(
        "-o", "--output", choices=["text", "json", "yaml"], default="text" if top else argparse.SUPPRESS
    )


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="kubectl fireflow",
        description="FireflowWorkerPools as the operator sees them, read from the API server (no database "
        "credentials needed). Runs themselves live in the pool's database: `fireflow status|cancel|resume RUN_ID` "
        "with the database URL acts on one.",
    )
    _kube_options(top, top=True)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = commands.add_parser("list", help="pools with their phase, ready/desired workers and version")
    _kube_options(listing, top=False)
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="pools of every namespace")
    status = commands.add_parser(
        "status", help="a pool's phase, conditions, versions, workers, migration, connection budget and events"
    )
    _kube_options(status, top=False)
    status.add_argument("pool", metavar="POOL", help="the FireflowWorkerPool's name")
    return top


def run(args: argparse.Namespace, now: datetime.datetime) -> str:
    conn = connect(args.kubeconfig, args.context, args.namespace)
    if args.command == "list":
        rows = [pool_row(p) for p in fetch_pools(conn, all_namespaces=args.all_namespaces)]
        if args.output != "text":
            return render_data(rows, args.output)
        return render_list(rows, now, all_namespaces=args.all_namespaces)
    pool = fetch_pool(conn, args.pool)
    pods, events = fetch_pods_and_events(conn, pool)
    summary = summarize_pool(pool, pods, events)
    return render_data(summary, args.output) if args.output != "text" else render_status(summary, now)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        sys.stdout.write(run(args, datetime.datetime.now(datetime.UTC)))
    except PluginError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
