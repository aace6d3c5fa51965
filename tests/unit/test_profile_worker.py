"""The worker profiles' reading of py-spy's raw stacks: threads, what each sample was doing, packages."""

from __future__ import annotations

from pathlib import Path

from benchmarks.profile_worker import CLAIMING, Profile, package, read_stacks, role

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
WORKER = "/repo/worker/fireflow_worker"
THREAD = f"_bootstrap ({STDLIB}/threading.py:1002);run ({STDLIB}/threading.py:982)"
RUN = f"{THREAD};_worker ({STDLIB}/concurrent/futures/thread.py:83);run_flow ({WORKER}/engine.py:87)"
RAW = "\n".join(
    [
        f"thread (11): claim-fireflow-executions;{THREAD};_claim ({WORKER}/dispatcher.py:182) 7",
        f"thread (12): dbos-executor-_3;{RUN};info ({STDLIB}/logging/__init__.py:1489) 5",
        f"thread (12): dbos-executor-_3;{RUN};invoke_step ({SITE}/dbos/_core.py:2400);"
        f"execute ({SITE}/psycopg/cursor.py:97) 20",
        f"thread (12): dbos-executor-_3;{RUN};_attempt ({WORKER}/node_step.py:150);"
        f"greet_text (/repo/benchmarks/effects.py:11) 2",
        f"thread (12): dbos-executor-_3;{THREAD};update_workflow_outcome ({SITE}/dbos/_sys_db.py:700) 4",
        f"thread (13): Thread-4 (run_notifier);{THREAD};run_notifier ({SITE}/dbos/_sys_db_postgres.py:453) 1",
    ]
)


def test_should_tell_what_each_sampled_thread_was_doing(tmp_path: Path) -> None:
    raw = tmp_path / "3-python.stacks"
    raw.write_bytes(RAW.encode() + b"\nthread (14): \xfe\xfe;oops (x.py:1) 1\n")  # a name read half-written
    profile = Profile("3-python", "", read_stacks(raw))
    assert profile.samples == 40
    assert dict(profile.by_role()) == {
        CLAIMING: 7,
        "run: the run's log lines (logging)": 5,
        "run: DBOS's step around a `python` node (checkpoint read and write)": 20,
        "run: a node's attempt (node_step._attempt: params, the node, limits, metrics)": 2,
        "run: DBOS's start and end of the run (status rows, output)": 4,
        "other threads (run_notifier)": 1,
        "other threads (\ufffd\ufffd)": 1,
    }
    assert profile.by_package()["psycopg"] == 20
    assert profile.by_package()["benchmarks"] == 2
    assert profile.by_package()["python: logging"] == 5
    assert profile.by_function()["run_flow (fireflow_worker/engine.py)"] == 27
    assert package(profile.stacks[0].frames[-1]) == "fireflow_worker"
    assert role(profile.stacks[0]) == CLAIMING
