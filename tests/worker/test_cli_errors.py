"""Every error of `fireflow`, `fireflow-worker` and `fireflow-operator` is one sentence naming the cause and the
fix: the commands run as real processes against the test run's real PostgreSQL (or a closed port), and what
they print is read as a user reads it. Tracebacks only with `--debug` / DBOS_LOG_LEVEL=DEBUG."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fireflow_local.ports import free_port
from fireflow_local.postgres import LocalPostgres
from tests.support.proc import REPO_ROOT, WORKER_BIN, WorkerProcess

FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
OPERATOR_BIN = str(Path(sys.executable).with_name("fireflow-operator"))
GREET = str(Path(REPO_ROOT) / "examples" / "flows" / "greet.yaml")
WRONG_PASSWORD = "wr0ng-Secret-pw"
# What no sentence of ours may carry: library internals, SQL, a traceback.
INTERNALS = ("Traceback", "sqlalche.me", "INSERT INTO", "SELECT ", "psycopg", "OperationalError", "(Background")


def _env(url: str | None, **extra: str) -> dict[str, str]:
    """The test's environment without any FIREFLOW_*/DBOS_* variable of the harness."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FIREFLOW_", "DBOS_"))}
    if url is not None:
        env["DATABASE_URL_EXECUTIONS"] = url
    return {**env, **extra}


def _run(binary: str, url: str | None, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *args], env=_env(url, **extra), capture_output=True, text=True, timeout=180, check=False
    )


def _closed_port_url() -> str:
    return f"postgresql://fireflow:{WRONG_PASSWORD}@127.0.0.1:{free_port()}/runs"


def _assert_one_sentence(line: str, *expected: str) -> None:
    for part in expected:
        assert part in line, line
    for internal in (*INTERNALS, WRONG_PASSWORD):
        assert internal not in line, line
    assert len(line) < 400, line


def _client_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _worker_error(worker: WorkerProcess) -> str:
    """The worker's one error line, once it has refused to start; nothing else of it is an error."""
    assert worker.wait_exit(timeout=180) == 1
    output = worker.output()
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if " ERROR " in line or " CRITICAL " in line]
    assert len(errors) == 1, output
    assert " cannot start: " in errors[0], output
    return errors[0]


def _start_worker(url: str, *args: str, **env: str) -> WorkerProcess:
    """`fireflow-worker *args` with the harness's settings (health port, one process) and `env`, nothing else."""
    worker = WorkerProcess(url, "talk-worker", **env)
    worker.env = {**_env(url), **{k: v for k, v in worker.env.items() if k.startswith(("FIREFLOW_", "DBOS_"))}}
    return worker.start(*args)


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    for worker in started:
        worker.stop()


def test_should_say_in_one_sentence_that_nothing_listens_on_the_port(workers: list[WorkerProcess]) -> None:
    url = _closed_port_url()
    port = url.rsplit(":", 1)[1].split("/")[0]
    expected = (f"nothing accepts connections at 127.0.0.1:{port} (connection refused)", "correct the host and port")
    line = _client_error(_run(FIREFLOW_BIN, url, "run", GREET, "--input", "who=Ada"))
    _assert_one_sentence(line, *expected, "DATABASE_URL_EXECUTIONS or --database-url")
    workers.append(_start_worker(url))
    _assert_one_sentence(_worker_error(workers[0]), *expected, "DATABASE_URL_EXECUTIONS")
    assert len(workers[0].output().splitlines()) < 15, workers[0].output()
    plan = _run(WORKER_BIN, url, "migrate", "--plan", FIREFLOW_TERMINATION_LOG=os.devnull)
    assert plan.returncode == 1
    _assert_one_sentence(json.loads(plan.stdout)["error"], *expected)


def test_should_say_in_one_sentence_that_the_password_was_refused(
    postgres: LocalPostgres, workers: list[WorkerProcess]
) -> None:
    url = postgres.url().replace(postgres.password, WRONG_PASSWORD)
    expected = (f"PostgreSQL at 127.0.0.1:{postgres.port} refused the password of user 'postgres'", "correct it in")
    _assert_one_sentence(_client_error(_run(FIREFLOW_BIN, url, "status", "some-run")), *expected)
    workers.append(_start_worker(url))
    _assert_one_sentence(_worker_error(workers[0]), *expected)
    plan = _run(WORKER_BIN, url, "migrate", "--plan", FIREFLOW_TERMINATION_LOG=os.devnull)
    _assert_one_sentence(json.loads(plan.stdout)["error"], *expected)


def test_should_say_in_one_sentence_that_the_database_does_not_exist(postgres: LocalPostgres) -> None:
    url = postgres.url("no_such_database")
    line = _client_error(_run(FIREFLOW_BIN, url, "run", GREET, "--input", "who=Ada"))
    _assert_one_sentence(
        line, "the database 'no_such_database' does not exist", f"127.0.0.1:{postgres.port}", "create it"
    )


def test_should_say_in_one_sentence_that_the_schema_is_not_migrated(
    database_url: str, workers: list[WorkerProcess]
) -> None:
    line = _client_error(_run(FIREFLOW_BIN, database_url, "run", GREET, "--input", "who=Ada"))
    _assert_one_sentence(line, "has no FireFlow/DBOS schema", "run `fireflow-worker migrate`")
    saved = _client_error(_run(FIREFLOW_BIN, database_url, "save-flow", "greet", GREET))
    _assert_one_sentence(saved, "has no FireFlow/DBOS schema", "run `fireflow-worker migrate`")
    workers.append(_start_worker(database_url, DBOS_RUN_MIGRATIONS="false"))
    _assert_one_sentence(
        _worker_error(workers[0]),
        "the DBOS schema of database",
        "is at version 0 and this version of DBOS needs",
        "run `fireflow-worker migrate`",
        "or set DBOS_RUN_MIGRATIONS=true",
    )


@pytest.mark.parametrize("processes", ["1", "2"], ids=["worker", "supervisor"])
def test_should_say_in_one_sentence_that_the_health_port_is_taken(processes: str, workers: list[WorkerProcess]) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        worker = _start_worker(_closed_port_url(), FIREFLOW_HEALTH_PORT=str(port), FIREFLOW_WORKER_PROCESSES=processes)
        workers.append(worker)
        line = _worker_error(worker)
    _assert_one_sentence(
        line, f"port {port} on 127.0.0.1 is already in use by another process", "set FIREFLOW_HEALTH_PORT"
    )


def test_should_show_the_traceback_only_when_asked_for_and_still_without_the_password(
    workers: list[WorkerProcess],
) -> None:
    url = _closed_port_url()
    client = _run(FIREFLOW_BIN, url, "--debug", "status", "some-run")
    assert client.returncode == 1
    assert "Traceback" in client.stderr
    assert client.stderr.splitlines()[-1].startswith("error: nothing accepts connections at")
    worker = _start_worker(url, "--debug")
    workers.append(worker)
    assert worker.wait_exit(timeout=180) == 1
    output = worker.output()
    assert "Traceback" in output and "cannot start: nothing accepts connections at" in output
    for text in (client.stderr, output):
        assert WRONG_PASSWORD not in text


def test_should_say_in_one_sentence_what_keeps_the_operator_from_starting(tmp_path: Path) -> None:
    env = {k: v for k, v in _env(None).items() if not k.startswith("KUBERNETES_")}
    ports = {
        "FIREFLOW_OPERATOR_HEALTH_HOST": "127.0.0.1",
        "FIREFLOW_OPERATOR_HEALTH_PORT": str(free_port()),
        "FIREFLOW_OPERATOR_METRICS_HOST": "127.0.0.1",
        "FIREFLOW_OPERATOR_METRICS_PORT": str(free_port()),
    }

    def operator(**extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [OPERATOR_BIN], env={**env, **ports, **extra}, capture_output=True, text=True, timeout=120, check=False
        )

    nowhere = operator(KUBECONFIG=str(tmp_path / "no-such-kubeconfig"))
    assert nowhere.returncode == 1
    assert nowhere.stderr.startswith("error: no Kubernetes API to connect to")
    assert nowhere.stderr.rstrip().endswith("or set KUBECONFIG to a kubeconfig file")
    assert len(nowhere.stderr.splitlines()) == 1, nowhere.stderr
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        taken = operator(KUBECONFIG=str(tmp_path / "no-such-kubeconfig"), FIREFLOW_OPERATOR_HEALTH_PORT=str(port))
    assert taken.returncode == 1
    assert taken.stderr == (
        f"error: port {port} on 127.0.0.1 is already in use by another process: set FIREFLOW_OPERATOR_HEALTH_PORT to a "
        "free port or end the process that holds it\n"
    )
