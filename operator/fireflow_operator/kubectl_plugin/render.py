"""The plugin's text, as kubectl prints its own (pure): aligned tables, `Field: value` blocks, data as JSON or
YAML."""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

import yaml

from fireflow_operator.kubectl_plugin.facts import EVENTS_SHOWN, Obj, age


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns as kubectl aligns them: left-aligned, three spaces apart, `<none>` for nothing."""
    cells = [[str(h) for h in headers], *[["<none>" if v in (None, "") else str(v) for v in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    shown = [(k, v) for k, v in pairs if v not in (None, "")]
    width = max(len(k) for k, _ in shown) + 2
    return "\n".join(f"{(k + ':').ljust(width)}{v}" for k, v in shown)


def render_data(data: Any, output: str) -> str:
    if output == "json":
        return json.dumps(data, indent=2, default=str) + "\n"
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _counted(value: int | None) -> str:
    return "-" if value is None else str(value)


# ---- status ------------------------------------------------------------------------------------------------


def _replicas_line(replicas: Obj) -> str:
    asked = replicas["asked"]
    parts = [f"{asked} asked (spec.replicas)" if asked is not None else "asked by an autoscaler (/scale)"]
    parts += [f"{replicas[k]} {k}" for k in ("desired", "allowed", "current", "ready") if replicas[k] is not None]
    return ", ".join(parts)


def _schema_line(s: Obj) -> str | None:
    runs = s["runs"] or {}
    schema, read = s["schemaVersion"], runs.get("schemaVersion")
    if read is not None:
        schema = f"{read} (read from the database)"
    elif runs and not runs.get("error"):
        schema = "none: the database was never migrated"
    if schema is not None and s["requiredSchemaVersion"] not in (None, s["schemaVersion"], read):
        schema = f"{schema}, the target image needs {s['requiredSchemaVersion']}"
    return None if schema is None else str(schema)


def _runs_line(s: Obj) -> str | None:
    runs = s["runs"]
    if not runs:
        return None
    if runs["error"]:
        return f"unknown: {runs['error']}"
    return f"{runs['pending']} PENDING, {runs['enqueued']} ENQUEUED (the database of {runs['source']})"


def _summary_section(s: Obj) -> str:
    phase = f"{s['phase']} ({s['phaseReason']})" if s["phaseReason"] else s["phase"]
    return "Pool Summary\n" + fields(
        [
            ("Name", f"{s['namespace']}/{s['name']}"),
            ("Phase", phase + (", being deleted" if s["deleting"] else "")),
            ("Message", s["message"]),
            ("Image", s["image"]),
            ("Target image", s["targetImage"] if s["targetImage"] != s["image"] else None),
            ("Application version", s["applicationVersion"]),
            ("Workers", _replicas_line(s["replicas"])),
            ("Schema version", _schema_line(s)),
            ("Runs", _runs_line(s)),
            ("Recovered runs", s["recoveredRuns"]),
        ]
    )


def _versions_section(s: Obj) -> str:
    rows = []
    for v in s["versions"]:
        runs = v.get("runs") or {}
        ready = f"{v.get('readyReplicas', 0)}/{v.get('replicas', 0)}"
        rows.append([v.get("applicationVersion"), v.get("state"), v.get("image"), v.get("statefulSet"), ready,
                     _counted(runs.get("pending")), _counted(runs.get("enqueued"))])  # fmt: skip
    headers = ["VERSION", "STATE", "IMAGE", "STATEFULSET", "READY", "PENDING", "ENQUEUED"]
    return "Versions\n" + (table(headers, rows) if rows else "None yet")


def _executors_section(s: Obj, now: datetime.datetime) -> str:
    workers = {w["pod"]: w for w in s["workers"]}
    rows = []
    for e in s["executors"]:
        worker = workers.get(e["pod"]) or {}
        rows.append([e["executor"], e["pod"] or "<gone>", e["applicationVersion"], e["ready"] if e["alive"] else "-",
                     worker.get("restarts"), age(worker["created"], now) if worker else None,
                     _counted(e["pending"])])  # fmt: skip
    if not rows:
        return "Executors\nNo worker pods"
    body = table(["EXECUTOR", "POD", "VERSION", "READY", "RESTARTS", "AGE", "PENDING"], rows)
    gone = [e["executor"] for e in s["executors"] if not e["alive"]]
    if gone:
        body += (
            "\nAn executor whose pod is gone keeps its PENDING runs until a worker of that id starts again; "
            f"`kubectl fireflow recover {gone[0]}` hands them back to their queues."
        )
    return "Executors\n" + body


def _conditions_section(s: Obj, now: datetime.datetime) -> str:
    rows = [
        [c["type"], c["status"], c["reason"], age(c["lastTransitionTime"], now), c["message"]] for c in s["conditions"]
    ]
    return "Conditions\n" + (table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows) if rows else "None yet")


def _job_line(job: Obj | None, now: datetime.datetime) -> str | None:
    if not job:
        return None
    said = plan_sentence(job["summary"]) if job.get("summary") else job.get("message")
    line = f"{job['name']} ({job['mode']}, {job['state']}, {age(job['created'], now)} ago)"
    return f"{line}: {said}" if said else line


def _migration_section(s: Obj, now: datetime.datetime) -> str:
    m = s["migration"]
    if not m and not s["lastMigrationJob"]:
        return "Migration\nNone recorded"
    m = m or {}
    return "Migration\n" + fields(
        [
            ("Phase", m.get("phase")),
            ("Target", m.get("target")),
            ("Attempt", m.get("attempt")),
            ("Mode", "online" if m.get("online") else None),
            ("Message", m.get("message")),
            ("Last Job", _job_line(s["lastMigrationJob"], now)),
        ]
    )


def _budget_section(s: Obj) -> str:
    b = s["connectionBudget"]
    if not b:
        return "Connection Budget\nNot computed yet (the operator has not read the database)"
    allowed = f"{b.get('allowedReplicas')} of {b.get('desiredReplicas')} desired (at most {b.get('maxReplicas')})"
    return "Connection Budget\n" + fields(
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
        _executors_section(s, now),
        _migration_section(s, now),
        _budget_section(s),
        _events_section(s, now),
    ]
    return "\n\n".join(sections) + "\n"


# ---- list, runs, migrate plan, recover ------------------------------------------------------------------------


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


def render_runs(runs: Sequence[Obj], now: datetime.datetime) -> str:
    if not runs:
        return "No runs found.\n"
    headers = ["RUN ID", "STATUS", "QUEUE", "VERSION", "EXECUTOR", "CREATED", "UPDATED"]
    rows = [[r["runId"], r["status"], r["queue"], r["applicationVersion"], r["executor"], age(r["created"], now),
             age(r["updated"], now)] for r in runs]  # fmt: skip
    return table(headers, rows) + "\n"


def plan_sentence(summary: Obj) -> str:
    """A migration summary (fireflow_contract.migration_summary) in words."""
    if summary.get("result") != "ok":
        return f"the plan failed: {summary.get('error') or 'no reason given'}"
    current, required = summary.get("current_version"), summary.get("required_version")
    if not summary.get("migration_needed"):
        return f"schema {current} is current for this image (it needs {required}): a rolling update, no migration"
    how = (
        "online-safe: applied while the pool keeps serving (strategy Online)"
        if summary.get("online_safe")
        else "not online-safe: the pool is drained to apply it"
    )
    return f"schema {current} is behind {required}: a migration is needed, {how}"


def render_plan(plan: Obj) -> str:
    summary = plan["summary"]
    unsafe = "; ".join(summary.get("unsafe") or []) or None
    return (
        fields(
            [
                ("Pool", f"{plan['namespace']}/{plan['pool']}"),
                ("Image", plan["image"]),
                ("Job", plan["job"]),
                ("Schema version", summary.get("current_version")),
                ("Required version", summary.get("required_version")),
                ("Migration needed", _yes_no(summary.get("migration_needed"))),
                ("Online-safe", _yes_no(summary.get("online_safe"))),
                ("Not online-safe", unsafe),
                ("Plan", plan_sentence(summary)),
            ]
        )
        + "\n"
    )


def _yes_no(value: bool | None) -> str | None:
    return None if value is None else ("yes" if value else "no")
