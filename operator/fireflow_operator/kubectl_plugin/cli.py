"""`kubectl fireflow`'s command line: the arguments, one function per command, and the exit status (I/O).

kubectl runs `kubectl-fireflow` from PATH for `kubectl fireflow ...` and passes every argument after `fireflow`, so
the kubeconfig options are this program's own, spelled as kubectl spells them, and accepted before and after the
command.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from kubernetes import client

from fireflow_contract.run_request import TERMINAL_STATUSES
from fireflow_contract.version import version_line
from fireflow_operator.api import names
from fireflow_operator.children.builders import Pool, build_migration_job
from fireflow_operator.database import recovery
from fireflow_operator.database.kept_connections import DatabaseQueryError, DatabaseUnreachableError
from fireflow_operator.kube import read_or_none
from fireflow_operator.kubectl_plugin import facts, kubeapi, render, rundb
from fireflow_operator.kubectl_plugin.errors import PluginError
from fireflow_operator.kubectl_plugin.facts import ExecutorId, Obj
from fireflow_operator.kubectl_plugin.kubeapi import Connection

PROGRAM = "kubectl fireflow"
RUN_STATUSES = ("ENQUEUED", "PENDING", *TERMINAL_STATUSES)
PLAN_TIMEOUT_SECONDS = 300.0
RECOVERY_TIMEOUT_SECONDS = 10
Printed = Obj | list[Obj]


# ---- commands: each returns what it found, as data, and how to say it as text -------------------------------


def _list(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    rows = [facts.pool_row(p) for p in kubeapi.fetch_pools(conn, all_namespaces=args.all_namespaces)]
    return rows, render.render_list(rows, now, all_namespaces=args.all_namespaces)


def _database(conn: Connection, pool: Obj, args: argparse.Namespace) -> rundb.PoolDatabase:
    spec = kubeapi.pool_spec(pool)
    return kubeapi.database_of(conn, pool, spec, url=args.database_url, host=args.database_host)


def _runs_read(conn: Connection, pool: Obj, args: argparse.Namespace) -> facts.RunsRead:
    """The database's counts, or why there are none: `status` shows the API server's facts either way."""
    meta = pool["metadata"]
    try:
        db = _database(conn, pool, args)
    except PluginError as err:
        return facts.RunsRead(source="the pool's Secret", error=str(err))
    try:
        spec = kubeapi.pool_spec(pool)
        counts = rundb.run_counts(db, meta["namespace"], meta["name"], list(spec.queues))
    except PluginError as err:
        return facts.RunsRead(source=db.source, error=str(err))
    return facts.RunsRead(source=db.source, counts=counts)


def _status(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    pool = kubeapi.fetch_pool(conn, args.pool)
    pods, events = kubeapi.fetch_pods_and_events(conn, pool)
    try:
        last_job = kubeapi.last_migration_job(conn, conn.namespace, args.pool)
    except PluginError:
        last_job = None  # not allowed to list Jobs: the status's migration says what the gate last did
    summary = facts.summarize_pool(pool, pods, events, runs=_runs_read(conn, pool, args), last_job=last_job)
    return summary, render.render_status(summary, now)


def _runs_list(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    pool = kubeapi.fetch_pool(conn, args.pool)
    db = _database(conn, pool, args)
    queues = list(kubeapi.pool_spec(pool).queues)
    runs = rundb.list_runs(db, conn.namespace, args.pool, queues, statuses=args.status or [], limit=args.limit)
    return runs, render.render_runs(runs, now)


def _runs_cancel(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    done = rundb.cancel_runs(_database(conn, kubeapi.fetch_pool(conn, args.pool), args), args.run_ids)
    lines = [
        f"run {r['runId']} was cancelled already" if r["was"] == "CANCELLED" else
        f"run {r['runId']} cancelled (it was {r['was']})"
        for r in done
    ]  # fmt: skip
    return done, "\n".join(lines) + "\n"


def _runs_resume(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    done = rundb.resume_run(_database(conn, kubeapi.fetch_pool(conn, args.pool), args), args.run_id)
    if done["fromStep"] is None:
        text = f"run {done['runId']} ({done['was']}) resumed on queue {done['queue']}"
    else:
        text = (
            f"run {done['runId']} failed: forked as run {done['running']}, which runs again from its step "
            f"{done['fromStep']} (the first failed node) on queue {done['queue']}"
        )
    return done, text + "\n"


def _migrate_plan(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    pool_obj = kubeapi.fetch_pool(conn, args.pool)
    meta = pool_obj["metadata"]
    spec = kubeapi.pool_spec(pool_obj)
    image = args.image or spec.image
    # The pool's own resources, else the model's defaults (the operator's installer may choose others for its Jobs).
    pool = Pool(meta["name"], meta["namespace"], meta["uid"], spec)
    target = names.target_hash(image, spec.dbos.application_version)
    built = build_migration_job(pool, mode="plan", image=image, target=target, round_=1, database_label="")
    job = facts.one_off_plan_job(built, pool.name)
    name, said = kubeapi.run_plan_job(conn, pool.namespace, job, timeout_seconds=args.timeout)
    if said["summary"] is None:
        raise PluginError(
            f"the plan Job {name} ended {said['state']} without a summary ({said['message'] or 'no message'}): "
            f"check that {image} is a fireflow-worker image"
        )
    if said["summary"].get("result") != "ok":
        error = said["summary"].get("error") or said["message"]
        raise PluginError(f"the plan Job {name} could not plan: {error}")
    plan = {"namespace": pool.namespace, "pool": pool.name, "image": image, "job": name, "summary": said["summary"]}
    return plan, render.render_plan(plan)


def _executor(conn: Connection, args: argparse.Namespace) -> ExecutorId:
    executor = str(args.executor)
    namespace, dot, _ = executor.partition(".")
    how = "pass one as `kubectl fireflow status POOL` lists them (<namespace>.<pod>, -p<k> for a pod's process k)"
    if not dot:
        raise PluginError(f"{executor!r} is not an executor id: {how}")
    listed = [args.pool] if args.pool else [
        p["metadata"]["name"] for p in kubeapi.fetch_pools(conn, all_namespaces=False, namespace=namespace)
    ]  # fmt: skip
    found = facts.parse_executor(executor, listed)
    if not found:
        where = f"pool {args.pool!r}" if args.pool else f"any FireflowWorkerPool in namespace {namespace!r}"
        raise PluginError(f"{executor!r} is no executor id of {where}: {how}")
    if len(found) > 1:
        pools = " and ".join(e.pool for e in found)
        raise PluginError(f"executor {executor} may be a process of pool {pools}: pass --pool")
    return found[0]


def _recover(conn: Connection, args: argparse.Namespace, now: datetime.datetime) -> tuple[Printed, str]:
    ex = _executor(conn, args)
    pool = kubeapi.fetch_pool(conn, ex.pool, ex.namespace)
    live = kubeapi.live_worker_pods(conn, ex.namespace, ex.pool)
    apps = client.AppsV1Api(conn.api)
    read = partial(read_or_none, partial(apps.read_namespaced_stateful_set, _request_timeout=kubeapi.TIMEOUT))
    sts = kubeapi.call(conn, "read the pool's StatefulSet", partial(read, ex.statefulset, ex.namespace))
    replicas = int(sts.spec.replicas or 0) if sts is not None else 0
    # The operator's own rule: never while a process with the id may run or start again.
    if not recovery.stranded_executors(
        [ex.executor], namespace=ex.namespace, statefulset=ex.statefulset, replicas=replicas, live_pods=live
    ):
        raise PluginError(_not_stranded(ex, alive=ex.pod in live, replicas=replicas))
    db = _database(conn, pool, args)
    try:
        held = recovery.pending_executors(
            db.url, ex.namespace, ex.statefulset, timeout_seconds=RECOVERY_TIMEOUT_SECONDS
        )
        handed = 0
        if ex.executor in held:
            handed = recovery.resume_runs_of(
                db.url, db.application_name, [ex.executor], timeout_seconds=RECOVERY_TIMEOUT_SECONDS
            )
    except DatabaseUnreachableError as err:
        raise db.unreachable(str(err)) from None
    except DatabaseQueryError as err:
        raise db.refused(str(err)) from None
    done = {"executor": ex.executor, "pool": f"{ex.namespace}/{ex.pool}", "handedBack": handed}
    if not handed:
        return done, f"executor {ex.executor} holds no PENDING run: nothing to hand back\n"
    return done, f"handed back {handed} PENDING run(s) of executor {ex.executor} to their queues\n"


def _not_stranded(ex: ExecutorId, *, alive: bool, replicas: int) -> str:
    if alive:
        return (
            f"pod {ex.namespace}/{ex.pod} of executor {ex.executor} still exists, and DBOS recovers its PENDING runs "
            f"when its worker starts again: if its node is gone for good, delete the pod (kubectl delete pod "
            f"{ex.pod} -n {ex.namespace} --force) and run this again"
        )
    return (
        f"StatefulSet {ex.namespace}/{ex.statefulset} keeps {replicas} replicas, so pod {ex.pod} comes back and its "
        f"worker recovers the PENDING runs of {ex.executor} itself: to hand them to the other workers instead, "
        f"scale the pool below {ex.ordinal + 1} workers"
    )


# ---- the command line ----------------------------------------------------------------------------------------


def _kube_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """kubectl's own options, accepted before and after the command (kubectl passes both through)."""
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--kubeconfig", default=default, help="the kubeconfig file (default: KUBECONFIG, ~/.kube/config)"
    )
    parser.add_argument("--context", default=default, help="the kubeconfig context (default: its current one)")
    parser.add_argument("-n", "--namespace", default=default, help="the namespace (default: the context's)")
    parser.add_argument(
        "-o", "--output", choices=["text", "json", "yaml"], default="text" if top else argparse.SUPPRESS
    )


def _database_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="the pool's database URL, instead of the one its Secret (spec.database.secretRef) holds",
    )
    parser.add_argument(
        "--database-host",
        metavar="HOST[:PORT]",
        help="reach the database of the pool's Secret at this address instead: a port forwarded to it "
        "(kubectl port-forward svc/DB 15432:5432, then --database-host 127.0.0.1:15432)",
    )


def _command(
    commands: Any, name: str, run: Callable[..., tuple[Printed, str]], help_text: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text, description=help_text)
    _kube_options(parser, top=False)
    parser.set_defaults(run=run)
    return parser


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROGRAM,
        description="FireflowWorkerPools as the operator sees them (the API server) and as their database holds "
        "their runs (its URL read from the pool's Secret through the API server, or given).",
    )
    top.add_argument("--version", action="version", version=version_line(PROGRAM))
    _kube_options(top, top=True)
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = _command(commands, "list", _list, "pools with their phase, ready/asked workers and version")
    listing.add_argument("-A", "--all-namespaces", action="store_true", help="pools of every namespace")
    status = _command(
        commands, "status", _status, "a pool's phase and conditions; per version and executor its ready workers "
        "and PENDING and ENQUEUED runs; schema, last migration, connection budget and events",
    )  # fmt: skip
    status.add_argument("pool", metavar="POOL", help="the FireflowWorkerPool's name")
    _database_options(status)
    _runs_parser(commands)
    migrate = commands.add_parser("migrate", help="the schema migration: `migrate plan POOL`")
    migrate_commands = migrate.add_subparsers(dest="migrate_command", required=True, metavar="COMMAND")
    plan = _command(
        migrate_commands, "plan", _migrate_plan, "run the migration plan of the pool's target image (or --image) "
        "once, as the operator's plan Job does, and print what it says: the schema version it needs, whether a "
        "migration is needed and whether it is online-safe (changes nothing)",
    )  # fmt: skip
    plan.add_argument("pool", metavar="POOL", help="the FireflowWorkerPool's name")
    plan.add_argument("--image", help="plan this worker image instead of the pool's spec.image")
    plan.add_argument(
        "--timeout", type=float, default=PLAN_TIMEOUT_SECONDS, metavar="SECONDS", help="how long to wait for the Job"
    )
    recover = _command(
        commands, "recover", _recover, "hand the PENDING runs of a worker process that is gone back to their "
        "queues (refused while its pod exists or its StatefulSet brings it back)",
    )  # fmt: skip
    recover.add_argument("executor", metavar="EXECUTOR", help="the executor id, as `status` lists it")
    recover.add_argument("--pool", help="the pool, when two pools' names could both make the id")
    _database_options(recover)
    return top


def _runs_parser(commands: Any) -> None:
    runs = commands.add_parser("runs", help="a pool's runs: `runs list|cancel|resume POOL ...`")
    runs_commands = runs.add_subparsers(dest="runs_command", required=True, metavar="COMMAND")
    listing = _command(runs_commands, "list", _runs_list, "the pool's newest runs: waiting on its queues or run by "
                       "its workers")  # fmt: skip
    cancel = _command(runs_commands, "cancel", _runs_cancel, "end queued or running runs now (CANCELLED)")
    resume = _command(runs_commands, "resume", _runs_resume, "run a cancelled, abandoned or failed run again from "
                      "where it stopped (a failed one as a new run)")  # fmt: skip
    for sub in (listing, cancel, resume):
        sub.add_argument("pool", metavar="POOL", help="the FireflowWorkerPool whose database holds the runs")
        _database_options(sub)
    listing.add_argument("--status", action="append", choices=RUN_STATUSES, help="only runs in this state (repeat)")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (default 20)")
    cancel.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    resume.add_argument("run_id", metavar="RUN_ID")


def run(args: argparse.Namespace, now: datetime.datetime) -> str:
    conn = kubeapi.connect(args.kubeconfig, args.context, args.namespace)
    data, text = args.run(conn, args, now)
    return text if args.output == "text" else render.render_data(data, args.output)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        sys.stdout.write(run(args, datetime.datetime.now(datetime.UTC)))
    except PluginError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0
