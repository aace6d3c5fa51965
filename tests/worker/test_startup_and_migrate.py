"""Start-up refusals and `fireflow-worker migrate`, against a real PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg

from fireflow_worker import migrate
from tests.support.proc import WORKER_BIN, WorkerProcess

StartWorker = Callable[..., WorkerProcess]


def _migrate(url: str, *args: str, termination_log: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL_EXECUTIONS": url}
    if termination_log is not None:
        env["FIREFLOW_TERMINATION_LOG"] = str(termination_log)
    return subprocess.run(
        [WORKER_BIN, "migrate", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_should_refuse_to_start_when_migrations_are_off_and_the_schema_is_missing(
    start_worker: StartWorker, database_url: str
) -> None:
    worker = start_worker("worker-a", wait=False, DBOS_RUN_MIGRATIONS="false")
    assert worker.wait_exit() == 1
    output = worker.output()
    assert "cannot start:" in output
    assert "is at version 0 and this version of DBOS needs" in output
    assert "run `fireflow-worker migrate`" in output
    assert migrate.current_version(database_url) == 0  # verify-only: it created nothing


def test_should_warn_when_the_worker_id_is_unset(start_worker: StartWorker) -> None:
    worker = start_worker(None)
    assert "FIREFLOW_WORKER_ID is unset: this worker runs as executor 'local'" in worker.output()


def test_should_refuse_a_second_application_name_on_one_database(start_worker: StartWorker, database_url: str) -> None:
    start_worker("worker-a", DBOS_APPLICATION_NAME="fireflow")
    other = start_worker("worker-b", wait=False, DBOS_APPLICATION_NAME="someone-else")
    assert other.wait_exit() == 1
    output = other.output()
    assert "cannot start:" in output
    assert "every worker on one database must use the same DBOS_APPLICATION_NAME" in output
    assert "someone-else" in output


def test_should_plan_then_apply_then_report_up_to_date(database_url: str, tmp_path: Path) -> None:
    termination_log = tmp_path / "termination-log"
    planned = _migrate(database_url, "--plan", termination_log=termination_log)
    assert planned.returncode == migrate.EXIT_MIGRATION_NEEDED
    summary = json.loads(planned.stdout)
    assert summary["current_version"] == 0
    assert summary["required_version"] == migrate.required_version() > 0
    assert summary["migration_needed"] is True
    assert json.loads(termination_log.read_text()) == summary
    for_a_job = _migrate(database_url, "--plan", "--exit-zero")
    assert for_a_job.returncode == 0
    assert json.loads(for_a_job.stdout)["migration_needed"] is True

    applied = _migrate(database_url, termination_log=termination_log)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    summary = json.loads(applied.stdout)
    assert summary["result"] == "ok"
    assert summary["current_version"] == summary["required_version"]
    assert summary["project_objects"] == "installed"
    assert (summary["previous_version"], summary["migration_needed"]) == (0, True)  # what this apply had to do

    again = _migrate(database_url, "--plan")
    assert again.returncode == migrate.EXIT_UP_TO_DATE
    assert json.loads(again.stdout)["migration_needed"] is False
    assert json.loads(again.stdout)["project_objects"] == "current"
    up_to_date = json.loads(_migrate(database_url).stdout)
    assert (up_to_date["project_objects"], up_to_date["migration_needed"]) == ("present", False)

    # Objects of an older release (the triggers workers are woken by changed): the plan asks for the Job.
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("COMMENT ON TRIGGER fireflow_workflow_terminal ON dbos.workflow_status IS 'fireflow-objects-1'")
    older = json.loads(_migrate(database_url, "--plan", "--exit-zero").stdout)
    assert (older["migration_needed"], older["project_objects"]) == (True, "outdated")
    assert json.loads(_migrate(database_url).stdout)["project_objects"] == "installed"


def test_should_fail_fast_on_a_held_lock_and_succeed_once_it_is_released(database_url: str) -> None:
    assert _migrate(database_url).returncode == 0
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE dbos.dbos_migrations SET version = version - 1")  # one migration behind
        conn.commit()
    holder = psycopg.connect(database_url)
    holder.execute("LOCK TABLE dbos.dbos_migrations IN ACCESS EXCLUSIVE MODE")  # a long reader/writer
    failed = _migrate(database_url, "--lock-timeout-ms", "500", "--retries", "1", "--retry-delay-seconds", "0.2")
    summary = json.loads(failed.stdout)
    assert failed.returncode == 1
    assert summary["result"] == "failed"
    assert summary["attempts"] == 2
    assert summary["error"].startswith("lock timeout")
    threading.Timer(1.0, holder.close).start()  # the long session ends while the next attempts wait
    succeeded = _migrate(database_url, "--lock-timeout-ms", "500", "--retries", "20", "--retry-delay-seconds", "0.3")
    assert succeeded.returncode == 0, succeeded.stdout
    assert json.loads(succeeded.stdout)["current_version"] == migrate.required_version()


def test_should_print_one_line_without_the_password_when_the_database_is_unreachable() -> None:
    url = "postgresql://fireflow:s3cr3t-pw@127.0.0.1:9/nowhere"
    result = _migrate(url, "--plan")
    assert result.returncode == 1
    assert "s3cr3t-pw" not in result.stdout + result.stderr
    assert json.loads(result.stdout)["result"] == "failed"


def test_should_say_in_the_plan_whether_the_step_is_online_safe(database_url: str) -> None:
    fresh = migrate.plan(database_url)  # a new database: no worker on it that a step could disturb
    assert (fresh.migration_needed, fresh.online_safe, fresh.unsafe) == (True, True, None)
    assert migrate.apply(database_url).result == "ok"
    done = migrate.plan(database_url)
    assert (done.migration_needed, done.online_safe, done.unsafe) == (False, True, None)
