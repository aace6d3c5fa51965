"""`kubectl fireflow`'s pure part: the facts it builds from API objects and the database's counts, how it prints
them, the plan Job it makes of the operator's, its command line, and how it reads a kubeconfig (no server is
contacted here; tests/operator/test_kubectl_plugin.py runs it against the API server and PostgreSQL)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from fireflow_operator.api import names
from fireflow_operator.api.model import parse_spec
from fireflow_operator.children.builders import Pool, build_migration_job
from fireflow_operator.kubectl_plugin import cli, facts, kubeapi, render
from fireflow_operator.kubectl_plugin.errors import PluginError
from fireflow_operator.kubectl_plugin.rundb import PoolDatabase

NOW = datetime.datetime(2026, 12, 4, 12, 0, 0, tzinfo=datetime.UTC)
TEAM = "team"


def _pool(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": TEAM, "name": "orders", "uid": "u1", "creationTimestamp": "2026-12-01T12:00:00Z"},
        "spec": {"image": "worker:2", "database": {"secretRef": {"name": "db"}}, "replicas": 2, **spec},
        "status": {
            "phase": "Running",
            "phaseReason": "RollingOut",
            "currentImage": "worker:2",
            "targetImage": "worker:2",
            "currentApplicationVersion": "2",
            "replicas": 2,
            "readyReplicas": 1,
            "desiredReplicas": 2,
            "schemaVersion": 125,
            "requiredSchemaVersion": 125,
            "recoveredRuns": 3,
            "conditions": [
                {"type": "Ready", "status": "False", "reason": "ReplicasNotReady", "message": "1/2 replicas ready",
                 "lastTransitionTime": "2026-12-04T11:58:00Z"},
                {"type": "ConnectionBudget", "status": "True", "reason": "WithinBudget", "message": "fits",
                 "lastTransitionTime": "2026-12-01T12:00:00Z"},
            ],
            "versions": [
                {"applicationVersion": "1", "index": 0, "image": "worker:1", "state": "Retiring",
                 "statefulSet": "orders", "replicas": 1, "readyReplicas": 1, "runsLeft": {"pending": 4, "enqueued": 2}},
                {"applicationVersion": "2", "index": 1, "image": "worker:2", "state": "Current",
                 "statefulSet": "orders-v2", "replicas": 2, "readyReplicas": 1},
            ],
            "migration": {"phase": "Done", "target": "abc", "attempt": 1, "message": "schema current"},
            "connectionBudget": {"server": "db:5432", "limitedBy": "server", "maxConnections": 100, "perReplica": 6,
                                 "needed": 20, "allowedReplicas": 2, "desiredReplicas": 2, "maxReplicas": 14,
                                 "otherPools": 0, "othersInUse": 3, "reservedByServer": 13, "headroom": 2},
        },
    }  # fmt: skip


def _pod(
    name: str, *, index: int | None, ready: bool, restarts: int = 0, processes: int | None = None
) -> dict[str, Any]:
    labels = {"fireflow.persistent.ai/version-index": str(index)} if index is not None else {}
    env = [{"name": "FIREFLOW_WORKER_PROCESSES", "value": str(processes)}] if processes else []
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-12-04T11:00:00Z"},
        "spec": {"containers": [{"name": "worker", "env": env}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"restartCount": restarts}],
        },
    }


def _event(reason: str, minute: int, message: str = "m") -> dict[str, Any]:
    return {"type": "Normal", "reason": reason, "message": message, "count": 1, "metadata": {},
            "lastTimestamp": f"2026-12-04T11:{minute:02d}:00Z"}  # fmt: skip


PODS = [_pod("orders-v2-1", index=1, ready=False, restarts=2), _pod("orders-0", index=None, ready=True),
        _pod("orders-v2-0", index=1, ready=True)]  # fmt: skip


@pytest.mark.parametrize(
    ("seconds", "shown"), [(5, "5s"), (59, "59s"), (60, "1m"), (119 * 60, "119m"), (3 * 3600, "3h"), (50 * 3600, "2d")]
)
def test_should_show_ages_as_kubectl_does(seconds: int, shown: str) -> None:
    assert facts.age(NOW - datetime.timedelta(seconds=seconds), NOW) == shown
    assert facts.age((NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ"), NOW) == shown
    assert facts.age(None, NOW) == facts.age("not a time", NOW) == "<unknown>"


def test_should_give_every_worker_its_version_readiness_restarts_and_executor_ids() -> None:
    workers = facts.worker_facts(_pool(dbos={"workerProcesses": 3}), PODS)
    assert [(w["pod"], w["applicationVersion"], w["ready"], w["restarts"]) for w in workers] == [
        ("orders-0", "1", True, 0),
        ("orders-v2-0", "2", True, 0),
        ("orders-v2-1", "2", False, 2),
    ]
    assert workers[0]["executors"] == ["team.orders-0", "team.orders-0-p1", "team.orders-0-p2"]
    assert facts.worker_facts(_pool(), PODS)[1]["executors"] == ["team.orders-v2-0"]
    # An invalid spec runs no worker: its leftover pods still show, with one executor each.
    assert facts.worker_facts(_pool(replicas=-1), PODS)[0]["executors"] == ["team.orders-0"]
    # A pod runs the processes its own env says (it predates a change of the spec).
    older = _pod("orders-0", index=None, ready=True, processes=2)
    assert facts.worker_facts(_pool(dbos={"workerProcesses": 3}), [older])[0]["executors"] == [
        "team.orders-0", "team.orders-0-p1"
    ]  # fmt: skip


COUNTS = facts.RunCounts(
    pending={("team.orders-0", "1"): 4, ("team.orders-v2-0", "2"): 1, ("team.orders-3", "1"): 2},
    enqueued={"1": 2, "2": 3, None: 5},
    schema_version=125,
)


def test_should_count_runs_per_executor_with_the_gone_ones_after_the_live_ones() -> None:
    workers = facts.worker_facts(_pool(), PODS)
    executors = facts.executor_facts(workers, COUNTS)
    assert [(e["executor"], e["pod"], e["alive"], e["ready"], e["pending"]) for e in executors] == [
        ("team.orders-0", "orders-0", True, True, 4),
        ("team.orders-v2-0", "orders-v2-0", True, True, 1),
        ("team.orders-v2-1", "orders-v2-1", True, False, 0),
        ("team.orders-3", None, False, False, 2),  # its pod is gone: `recover` hands its runs back
    ]
    assert [e["pending"] for e in facts.executor_facts(workers, None)] == [None, None, None]  # no database


def test_should_count_runs_per_version_with_version_less_ones_for_the_current_version() -> None:
    status = _pool()["status"]
    assert [v["runs"] for v in facts.version_facts(status, COUNTS)] == [
        {"pending": 6, "enqueued": 2},
        {"pending": 1, "enqueued": 8},  # 3 of version 2, and 5 of none: DBOS's latest (the current one) takes them
    ]
    # Without the database: the operator's last count of a retiring version, nothing for the others.
    assert [v["runs"] for v in facts.version_facts(status, None)] == [{"pending": 4, "enqueued": 2}, None]


def test_should_keep_the_latest_events_oldest_first() -> None:
    events = [_event(f"R{m}", m, message="two\n  lines") for m in range(15, 0, -1)]
    shown = facts.event_facts(events)
    assert [e["reason"] for e in shown] == [f"R{m}" for m in range(6, 16)]
    assert shown[0]["message"] == "two lines"


LAST_JOB = {"name": "orders-plan-abc-1", "mode": "plan", "state": "succeeded", "created": "2026-12-04T11:50:00Z",
            "summary": {"action": "plan", "current_version": 125, "required_version": 125, "migration_needed": False,
                        "result": "ok", "attempts": 0},
            "message": None}  # fmt: skip


def test_should_summarize_a_pool_as_data_and_as_text() -> None:
    runs = facts.RunsRead(source="Secret 'db' key 'url'", counts=COUNTS)
    summary = facts.summarize_pool(_pool(), PODS, [_event("RolledOut", 59, "rolled out worker:2")], runs=runs,
                                   last_job=LAST_JOB)  # fmt: skip
    assert summary["replicas"] == {"asked": 2, "desired": 2, "allowed": 2, "current": 2, "ready": 1}
    assert (summary["phase"], summary["phaseReason"], summary["message"]) == (
        "Running", "RollingOut", "1/2 replicas ready"
    )  # fmt: skip
    assert [c["reason"] for c in summary["conditions"]] == ["ReplicasNotReady", "WithinBudget"]
    assert summary["runs"] == {"source": "Secret 'db' key 'url'", "error": None, "pending": 7, "enqueued": 10,
                               "schemaVersion": 125}  # fmt: skip
    assert yaml.safe_load(render.render_data(summary, "yaml")) == yaml.safe_load(render.render_data(summary, "json"))
    text = render.render_status(summary, NOW)
    sections = [block.splitlines()[0] for block in text.strip().split("\n\n")]
    assert sections == ["Pool Summary", "Conditions", "Versions", "Executors", "Migration", "Connection Budget",
                        "Events (last 10)"]  # fmt: skip
    lines = text.splitlines()
    assert "Phase:               Running (RollingOut)" in lines
    assert "Workers:             2 asked (spec.replicas), 2 desired, 2 allowed, 2 current, 1 ready" in lines
    assert "Schema version:      125 (read from the database)" in lines
    assert "Runs:                7 PENDING, 10 ENQUEUED (the database of Secret 'db' key 'url')" in lines
    assert "Ready              False    ReplicasNotReady   2m    1/2 replicas ready" in lines
    assert [line.split() for line in lines if line.startswith(("VERSION", "1 ", "2 "))] == [
        ["VERSION", "STATE", "IMAGE", "STATEFULSET", "READY", "PENDING", "ENQUEUED"],
        ["1", "Retiring", "worker:1", "orders", "1/1", "6", "2"],
        ["2", "Current", "worker:2", "orders-v2", "1/2", "1", "8"],
    ]
    assert [line.split() for line in lines if line.startswith(("EXECUTOR", "team."))] == [
        ["EXECUTOR", "POD", "VERSION", "READY", "RESTARTS", "AGE", "PENDING"],
        ["team.orders-0", "orders-0", "1", "True", "0", "60m", "4"],
        ["team.orders-v2-0", "orders-v2-0", "2", "True", "0", "60m", "1"],
        ["team.orders-v2-1", "orders-v2-1", "2", "False", "2", "60m", "0"],
        ["team.orders-3", "<gone>", "<none>", "-", "<none>", "<none>", "2"],
    ]
    assert any("`kubectl fireflow recover team.orders-3` hands them back" in line for line in lines)
    assert (
        "Last Job: orders-plan-abc-1 (plan, succeeded, 10m ago): schema 125 is current for this image (it needs "
        "125): a rolling update, no migration"
    ) in lines
    assert "Allowed workers: 2 of 2 desired (at most 14)" in lines
    assert "1m          Normal   RolledOut   1       rolled out worker:2" in lines


def test_should_show_the_api_servers_facts_when_the_database_cannot_be_read() -> None:
    runs = facts.RunsRead(source="Secret 'db' key 'url'", error="cannot reach the database of pool team/orders")
    summary = facts.summarize_pool(_pool(), PODS, [], runs=runs)
    assert summary["runs"]["error"] == runs.error and summary["executors"][0]["pending"] is None
    lines = render.render_status(summary, NOW).splitlines()
    assert "Runs:                unknown: cannot reach the database of pool team/orders" in lines
    assert "Schema version:      125" in lines  # the operator's last reading
    assert ["1", "Retiring", "worker:1", "orders", "1/1", "4", "2"] in [line.split() for line in lines]
    assert ["2", "Current", "worker:2", "orders-v2", "1/2", "-", "-"] in [line.split() for line in lines]


def test_should_say_what_a_pool_has_not_got_yet() -> None:
    fresh = _pool(replicas=None)
    fresh["status"] = {}
    text = render.render_status(facts.summarize_pool(fresh, [], []), NOW)
    for expected in ["Phase:          Unknown", "Workers:        asked by an autoscaler (/scale)", "No worker pods",
                     "Not computed yet (the operator has not read the database)", "None yet"]:  # fmt: skip
        assert expected in text.splitlines(), expected
    never = facts.summarize_pool(fresh, [], [], runs=facts.RunsRead(source="--database-url", counts=facts.RunCounts()))
    assert "Schema version: none: the database was never migrated" in render.render_status(never, NOW).splitlines()


def test_should_list_pools_with_ready_of_desired() -> None:
    autoscaled = _pool(replicas=None)
    other = {**_pool(), "metadata": {**_pool()["metadata"], "namespace": "apps", "name": "billing"}}
    rows = [facts.pool_row(p) for p in (other, autoscaled)]
    assert [(r["namespace"], r["name"], r["ready"]) for r in rows] == [
        ("apps", "billing", "1/2"),
        (TEAM, "orders", "1/2"),
    ]
    text = render.render_list(rows, NOW, all_namespaces=True).splitlines()
    assert text[0].split() == ["NAMESPACE", "NAME", "PHASE", "REASON", "READY", "VERSION", "SCHEMA", "IMAGE", "AGE"]
    assert text[1].split() == ["apps", "billing", "Running", "RollingOut", "1/2", "2", "125", "worker:2", "3d"]
    assert render.render_list(rows, NOW, all_namespaces=False).splitlines()[0].startswith("NAME ")
    assert render.render_list([], NOW, all_namespaces=False) == "No FireflowWorkerPools found.\n"


def test_should_list_runs_newest_first_as_given() -> None:
    runs = [{"runId": "r2", "status": "ENQUEUED", "queue": "fireflow-executions", "applicationVersion": None,
             "executor": None, "created": "2026-12-04T11:58:00+00:00", "updated": "2026-12-04T11:59:30Z"}]  # fmt: skip
    lines = render.render_runs(runs, NOW).splitlines()
    assert lines[0].split() == ["RUN", "ID", "STATUS", "QUEUE", "VERSION", "EXECUTOR", "CREATED", "UPDATED"]
    assert lines[1].split() == ["r2", "ENQUEUED", "fireflow-executions", "<none>", "<none>", "2m", "30s"]
    assert render.render_runs([], NOW) == "No runs found.\n"


@pytest.mark.parametrize(
    ("executor", "pools", "found"),
    [
        ("team.orders-3", ["orders", "billing"], [("orders", "orders", "orders-3", 3)]),
        ("team.orders-v2-0-p2", ["orders"], [("orders", "orders-v2", "orders-v2-0", 0)]),
        ("team.orders-v2-0", ["orders", "orders-v2"], [("orders", "orders-v2", "orders-v2-0", 0),
                                                        ("orders-v2", "orders-v2", "orders-v2-0", 0)]),
        ("team.orders-b-0", ["orders"], []),  # another pool's, named like it
        ("local", ["orders"], []),  # a worker run by hand
        ("other.orders-0", ["orders"], [("orders", "orders", "orders-0", 0)]),  # the id's own namespace
    ],
)  # fmt: skip
def test_should_take_an_executor_id_apart_as_the_operator_builds_it(
    executor: str, pools: list[str], found: list[tuple[str, str, str, int]]
) -> None:
    parsed = facts.parse_executor(executor, pools)
    assert [(e.pool, e.statefulset, e.pod, e.ordinal) for e in parsed] == found


def test_should_make_the_operators_plan_job_one_the_operator_leaves_alone() -> None:
    pool = Pool("orders", TEAM, "u1", parse_spec(_pool()["spec"]))
    built = build_migration_job(pool, mode="plan", image="worker:3", target="t", round_=1, database_label="")
    job = facts.one_off_plan_job(built, pool.name)
    meta = job["metadata"]
    assert "name" not in meta and meta["generateName"] == "orders-plan-"
    assert meta["labels"][names.LABEL_MANAGED_BY] == "kubectl-fireflow" and names.LABEL_DATABASE not in meta["labels"]
    gate_selects = dict(item.split("=") for item in names.children_selector("orders").split(","))
    assert not gate_selects.items() <= meta["labels"].items()  # the operator's gate never lists it
    template = job["spec"]["template"]
    assert template["metadata"]["labels"][names.LABEL_MANAGED_BY] == "kubectl-fireflow"  # nor watches its pod
    assert template["metadata"]["labels"][names.LABEL_POOL] == "orders"  # the pool's NetworkPolicy lets it out
    assert meta["ownerReferences"] == [{**built["metadata"]["ownerReferences"][0], "controller": False,
                                        "blockOwnerDeletion": False}]  # fmt: skip
    assert job["spec"]["ttlSecondsAfterFinished"] == facts.PLAN_JOB_TTL_SECONDS
    assert template["spec"] == built["spec"]["template"]["spec"]  # the operator's pod: image, args, env, security
    assert template["spec"]["containers"][0]["args"] == ["migrate", "--plan", "--exit-zero"]
    assert template["spec"]["containers"][0]["image"] == "worker:3"


def test_should_say_what_a_plan_means() -> None:
    behind = {"action": "plan", "current_version": 123, "required_version": 125, "migration_needed": True,
              "online_safe": False, "unsafe": ["ALTER TABLE dbos.workflow_status ..."], "result": "ok"}  # fmt: skip
    plan = {"namespace": TEAM, "pool": "orders", "image": "worker:3", "job": "orders-plan-x1", "summary": behind}
    lines = render.render_plan(plan).splitlines()
    assert "Migration needed: yes" in lines and "Online-safe:      no" in lines
    assert "Not online-safe:  ALTER TABLE dbos.workflow_status ..." in lines
    assert lines[-1] == (
        "Plan:             schema 123 is behind 125: a migration is needed, not online-safe: the pool is drained "
        "to apply it"
    )
    safe = render.plan_sentence({**behind, "online_safe": True})
    assert safe.endswith("online-safe: applied while the pool keeps serving (strategy Online)")


def test_should_take_kubectls_options_before_and_after_the_command() -> None:
    before = vars(cli.parser().parse_args(["-n", "a", "--context", "c", "-o", "json", "status", "p"]))
    after = vars(cli.parser().parse_args(["status", "p", "-n", "a", "--context", "c", "-o", "json"]))
    assert before == after
    assert {k: before[k] for k in ("kubeconfig", "context", "namespace", "output", "pool", "database_url")} == {
        "kubeconfig": None, "context": "c", "namespace": "a", "output": "json", "pool": "p", "database_url": None
    }  # fmt: skip
    assert cli.parser().parse_args(["list", "-A"]).all_namespaces is True
    cancel = cli.parser().parse_args(["runs", "cancel", "orders", "r1", "r2", "--database-host", "127.0.0.1:5"])
    assert (cancel.pool, cancel.run_ids, cancel.database_host) == ("orders", ["r1", "r2"], "127.0.0.1:5")
    listing = cli.parser().parse_args(["runs", "list", "orders", "--status", "PENDING", "--status", "ERROR"])
    assert (listing.status, listing.limit) == (["PENDING", "ERROR"], 20)
    recover = cli.parser().parse_args(["recover", "team.orders-3", "-o", "yaml"])
    assert (recover.executor, recover.pool, recover.output) == ("team.orders-3", None, "yaml")


def test_should_print_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["--version"])
    assert ended.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("kubectl fireflow ") and out.split()[-1][0].isdigit()


@pytest.mark.parametrize(
    ("address", "moved"),
    [
        ("127.0.0.1:15432", "postgresql://app:p%40ss@127.0.0.1:15432/runs?sslmode=require"),
        ("localhost", "postgresql://app:p%40ss@localhost:5432/runs?sslmode=require"),
        ("[::1]:6000", "postgresql://app:p%40ss@[::1]:6000/runs?sslmode=require"),
    ],
)
def test_should_reach_the_secrets_database_at_a_forwarded_address(address: str, moved: str) -> None:
    assert kubeapi.with_host("postgresql://app:p%40ss@db.data.svc:5432/runs?sslmode=require", address) == moved


def test_should_refuse_a_database_host_that_is_no_address() -> None:
    with pytest.raises(PluginError, match=r"^--database-host '127.0.0.1:x' is not HOST or HOST:PORT: pass e.g."):
        kubeapi.with_host("postgresql://app:pw@db:5432/runs", "127.0.0.1:x")


def test_should_never_show_the_databases_password_in_an_error() -> None:
    db = PoolDatabase("postgresql://app:s3cret-pw@db:5432/runs", "Secret 'db' key 'url'", "team/orders", "fireflow")
    said = str(db.unreachable('connection to "db" failed: password s3cret-pw for postgresql://app:s3cret-pw@db'))
    assert "s3cret-pw" not in said
    assert said.endswith("pass --database-host 127.0.0.1:PORT (or --database-url)")


def _kubeconfig(path: Path) -> Path:
    def context(name: str, namespace: str | None) -> dict[str, Any]:
        return {
            "name": name,
            "context": {"cluster": "c", "user": "u", **({"namespace": namespace} if namespace else {})},
        }

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dev",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [context("dev", "team"), context("bare", None)],
    }))  # fmt: skip
    return path


def test_should_read_the_kubeconfig_as_kubectl_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _kubeconfig(tmp_path / "config")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{config}")
    current = kubeapi.connect(None, None, None)
    assert (current.context, current.namespace, current.server) == ("dev", "team", "https://127.0.0.1:1")
    assert kubeapi.connect(None, "bare", None).namespace == "default"
    assert kubeapi.connect(str(config), "bare", "other").namespace == "other"
    with pytest.raises(PluginError) as missing:
        kubeapi.connect(None, "prod", None)
    assert (
        str(missing.value)
        == "context 'prod' is not in the kubeconfig (its contexts: bare, dev); pass another --context"
    )
    with pytest.raises(PluginError) as absent:
        kubeapi.connect(str(tmp_path / "none"), None, None)
    assert str(absent.value) == f"no kubeconfig at {tmp_path / 'none'}: set KUBECONFIG or pass --kubeconfig"


def test_should_say_in_one_line_that_the_api_server_cannot_be_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _kubeconfig(tmp_path / "config")
    assert cli.main(["--kubeconfig", str(config), "list"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: cannot reach the API server at https://127.0.0.1:1 (context 'dev'): Connection refused; check the "
        "kubeconfig's context (--context) and that the cluster is up\n"
    )
