"""Versioned rollouts and the progress deadline (pure)."""

from __future__ import annotations

from fireflow_operator.api import names
from fireflow_operator.rollout import progress
from fireflow_operator.rollout.versions import CURRENT, RETIRING, Version, plan_retirement, switch_to


def test_should_give_a_new_version_its_own_statefulset_and_retire_the_old_one() -> None:
    first = [Version("1", 0, "w:1", CURRENT)]
    second = switch_to(first, application_version="2", image="w:1", current_replicas=3, now=100.0)
    assert second == [Version("2", 1, "w:1", CURRENT), Version("1", 0, "w:1", RETIRING, 3, 100.0)]
    assert [names.statefulset_name("pool", v.index) for v in second] == ["pool-v2", "pool"]
    back = switch_to(second, application_version="1", image="w:1", current_replicas=2, now=200.0)
    assert back == [Version("1", 0, "w:1", CURRENT), Version("2", 1, "w:1", RETIRING, 2, 200.0)]  # its own again
    third = switch_to(second, application_version="3", image="w:2", current_replicas=2, now=300.0)
    assert [(v.application_version, v.index, v.state) for v in third] == [
        ("3", 2, CURRENT), ("2", 1, RETIRING), ("1", 0, RETIRING),
    ]  # fmt: skip
    assert Version.from_status(third[1].as_status()) == third[1]


def test_should_size_a_retiring_version_by_its_own_runs() -> None:
    old = Version("1", 0, "w:1", RETIRING, max_replicas=4, retiring_since=100.0)
    plan = plan_retirement(old, pending=120, enqueued=5, worker_concurrency=50, now=110.0, retire_after=None)
    assert (plan.replicas, plan.fork) == (3, False)  # 125 runs / 50 per worker, at most its old 4
    assert plan.events == [("VersionRetiring", "application version '1' blocks retirement: 125 run(s) left "
                                               "(120 PENDING, 5 ENQUEUED), 3 worker(s) kept")]  # fmt: skip
    assert (
        plan_retirement(old, pending=1, enqueued=0, worker_concurrency=50, now=110.0, retire_after=None).replicas == 1
    )
    assert (
        plan_retirement(old, pending=900, enqueued=0, worker_concurrency=50, now=110.0, retire_after=None).replicas == 4
    )
    gone = plan_retirement(old, pending=0, enqueued=0, worker_concurrency=50, now=110.0, retire_after=None)
    assert (gone.replicas, gone.events[0][0]) == (None, "VersionRetired")
    late = plan_retirement(old, pending=2, enqueued=0, worker_concurrency=50, now=200.0, retire_after=60.0)
    assert late.fork and late.events[0][0] == "VersionForked"
    forked = Version("1", 0, "w:1", RETIRING, max_replicas=4, retiring_since=100.0, forked=True)
    assert not plan_retirement(forked, pending=2, enqueued=0, worker_concurrency=50, now=200.0, retire_after=60.0).fork


def test_should_complete_a_rollout_or_call_it_stuck_and_roll_it_back() -> None:
    previous = {"currentTarget": "a", "currentImage": "w:1", "currentApplicationVersion": "1"}
    rollout = progress.started("b", "w:2", "1", previous, now=0.0)
    assert rollout["previous"] == {"target": "a", "image": "w:1", "applicationVersion": "1"}
    kwargs = {"ready": 1, "updated": 1, "desired": 2, "deadline": 60.0, "auto_rollback": True}
    assert progress.check(rollout, now=30.0, **kwargs).stuck is None  # type: ignore[arg-type]
    assert progress.check(rollout, now=30.0, **{**kwargs, "ready": 2, "updated": 2}).rollout["state"] == "Complete"  # type: ignore[arg-type]
    stuck = progress.check(rollout, now=61.0, **kwargs)  # type: ignore[arg-type]
    assert stuck.roll_back and stuck.rollout["state"] == "RolledBack"
    assert stuck.stuck == (
        "1/2 workers of w:2 (application version '1') ready within spec.rollout.progressDeadlineSeconds (60 s); "
        "rolled back to w:1 (application version '1') until spec.image or spec.dbos.applicationVersion changes"
    )
    assert progress.held_back(stuck.rollout, "b") and not progress.held_back(stuck.rollout, "c")
    reported = progress.check(rollout, now=61.0, **{**kwargs, "auto_rollback": False})  # type: ignore[arg-type]
    assert (reported.roll_back, reported.rollout["state"]) == (False, "Stuck")
    assert "previous" not in progress.started("a", "w:1", "1", previous, now=0.0)  # the same target: nothing to restore
