"""`kubectl fireflow`'s pure part: the facts it builds from API objects and how it prints them, and how it
reads a kubeconfig (no server is contacted here; tests/operator/test_kubectl_plugin.py runs it against the API
server)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from fireflow_operator import kubectl_plugin as plugin

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


def _pod(name: str, *, index: int | None, ready: bool, restarts: int = 0) -> dict[str, Any]:
    labels = {"fireflow.persistent.ai/version-index": str(index)} if index is not None else {}
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-12-04T11:00:00Z"},
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
    assert plugin.age(NOW - datetime.timedelta(seconds=seconds), NOW) == shown
    assert plugin.age((NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ"), NOW) == shown
    assert plugin.age(None, NOW) == plugin.age("not a time", NOW) == "<unknown>"


def test_should_give_every_worker_its_version_readiness_restarts_and_executor_ids() -> None:
    workers = plugin.worker_facts(_pool(dbos={"workerProcesses": 3}), PODS)
    assert [(w["pod"], w["applicationVersion"], w["ready"], w["restarts"]) for w in workers] == [
        ("orders-0", "1", True, 0),
        ("orders-v2-0", "2", True, 0),
        ("orders-v2-1", "2", False, 2),
    ]
    assert workers[0]["executors"] == ["team.orders-0", "team.orders-0-p1", "team.orders-0-p2"]
    assert plugin.worker_facts(_pool(), PODS)[1]["executors"] == ["team.orders-v2-0"]
    # An invalid spec runs no worker: its leftover pods still show, with one executor each.
    assert plugin.worker_facts(_pool(replicas=-1), PODS)[0]["executors"] == ["team.orders-0"]


def test_should_keep_the_latest_events_oldest_first() -> None:
    events = [_event(f"R{m}", m, message="two\n  lines") for m in range(15, 0, -1)]
    shown = plugin.event_facts(events)
    assert [e["reason"] for e in shown] == [f"R{m}" for m in range(6, 16)]
    assert shown[0]["message"] == "two lines"


def test_should_summarize_a_pool_as_data_and_as_text() -> None:
    summary = plugin.summarize_pool(_pool(), PODS, [_event("RolledOut", 59, "rolled out worker:2")])
    assert summary["replicas"] == {"asked": 2, "desired": 2, "allowed": 2, "current": 2, "ready": 1}
    assert (summary["phase"], summary["phaseReason"], summary["message"]) == (
        "Running", "RollingOut", "1/2 replicas ready"
    )  # fmt: skip
    assert [c["reason"] for c in summary["conditions"]] == ["ReplicasNotReady", "WithinBudget"]
    assert yaml.safe_load(plugin.render_data(summary, "yaml")) == yaml.safe_load(plugin.render_data(summary, "json"))
    text = plugin.render_status(summary, NOW)
    sections = [block.splitlines()[0] for block in text.strip().split("\n\n")]
    assert sections == ["Pool Summary", "Conditions", "Versions", "Workers", "Migration", "Connection Budget",
                        "Events (last 10)"]  # fmt: skip
    lines = text.splitlines()
    assert "Phase:               Running (RollingOut)" in lines
    assert "Workers:             2 asked (spec.replicas), 2 desired, 2 allowed, 2 current, 1 ready" in lines
    assert "Ready              False    ReplicasNotReady   2m    1/2 replicas ready" in lines
    assert "1         Retiring   worker:1   orders        1/1     4 PENDING, 2 ENQUEUED" in lines
    assert "orders-v2-1   2         False   2          60m   team.orders-v2-1" in lines
    assert "Allowed workers: 2 of 2 desired (at most 14)" in lines
    assert "1m          Normal   RolledOut   1       rolled out worker:2" in lines


def test_should_say_what_a_pool_has_not_got_yet() -> None:
    fresh = _pool(replicas=None)
    fresh["status"] = {}
    text = plugin.render_status(plugin.summarize_pool(fresh, [], []), NOW)
    for expected in ["Phase:          Unknown", "Workers:        asked by an autoscaler (/scale)", "No worker pods",
                     "Not computed yet (the operator has not read the database)", "None yet"]:  # fmt: skip
        assert expected in text.splitlines(), expected


def test_should_list_pools_with_ready_of_desired() -> None:
    autoscaled = _pool(replicas=None)
    other = {**_pool(), "metadata": {**_pool()["metadata"], "namespace": "apps", "name": "billing"}}
    rows = [plugin.pool_row(p) for p in (other, autoscaled)]
    assert [(r["namespace"], r["name"], r["ready"]) for r in rows] == [
        ("apps", "billing", "1/2"),
        (TEAM, "orders", "1/2"),
    ]
    text = plugin.render_list(rows, NOW, all_namespaces=True).splitlines()
    assert text[0].split() == ["NAMESPACE", "NAME", "PHASE", "REASON", "READY", "VERSION", "SCHEMA", "IMAGE", "AGE"]
    assert text[1].split() == ["apps", "billing", "Running", "RollingOut", "1/2", "2", "125", "worker:2", "3d"]
    assert plugin.render_list(rows, NOW, all_namespaces=False).splitlines()[0].startswith("NAME ")
    assert plugin.render_list([], NOW, all_namespaces=False) == "No FireflowWorkerPools found.\n"


def test_should_take_kubectls_options_before_and_after_the_command() -> None:
    before = plugin.parser().parse_args(["-n", "a", "--context", "c", "-o", "json", "status", "p"])
    after = plugin.parser().parse_args(["status", "p", "-n", "a", "--context", "c", "-o", "json"])
    assert vars(before) == vars(after) == {
        "kubeconfig": None, "context": "c", "namespace": "a", "output": "json", "command": "status", "pool": "p"
    }  # fmt: skip
    assert plugin.parser().parse_args(["list", "-A"]).all_namespaces is True


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
    current = plugin.connect(None, None, None)
    assert (current.context, current.namespace, current.server) == ("dev", "team", "https://127.0.0.1:1")
    assert plugin.connect(None, "bare", None).namespace == "default"
    assert plugin.connect(str(config), "bare", "other").namespace == "other"
    with pytest.raises(plugin.PluginError) as missing:
        plugin.connect(None, "prod", None)
    assert (
        str(missing.value)
        == "context 'prod' is not in the kubeconfig (its contexts: bare, dev); pass another --context"
    )
    with pytest.raises(plugin.PluginError) as absent:
        plugin.connect(str(tmp_path / "none"), None, None)
    assert str(absent.value) == f"no kubeconfig at {tmp_path / 'none'}: set KUBECONFIG or pass --kubeconfig"


def test_should_say_in_one_line_that_the_api_server_cannot_be_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _kubeconfig(tmp_path / "config")
    assert plugin.main(["--kubeconfig", str(config), "list"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "error: cannot reach the API server at https://127.0.0.1:1 (context 'dev'): Connection refused; check the "
        "kubeconfig's context (--context) and that the cluster is up\n"
    )
