"""No database password in any output, for every URL form libpq accepts: the worker's log (DBOS's lines
included, at debug level), the `fireflow` command's output and errors, the migration's termination message,
/metrics, configuration errors. The password holds every character that has a meaning in a URL."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg
import pytest

from fireflow_contract.dburl import redact_url, url_problem
from tests.support.proc import REPO_ROOT, WORKER_BIN, WorkerProcess

StartWorker = Callable[..., WorkerProcess]
FIREFLOW_BIN = str(Path(sys.executable).with_name("fireflow"))
GREET = str(Path(REPO_ROOT) / "examples" / "flows" / "greet.yaml")
PASSWORD = "Zq7@x:y/w?v#u%t&s=r+q é'\"\\;"
FORMS = {
    "userinfo": "postgresql://{user}:{pw}@{host}:{port}/{db}",
    "postgres-scheme": "postgres://{user}:{pw}@{host}:{port}/{db}",
    "psycopg-driver": "postgresql+psycopg://{user}:{pw}@{host}:{port}/{db}",
    "query-password": "postgresql://{host}:{port}/{db}?user={user}&password={pw}",
    "query-password-first": "postgresql://{host}:{port}/{db}?password={pw}&user={user}&sslmode=disable",
}


def assert_no_secret(text: str, password: str = PASSWORD) -> None:
    """No five characters in a row of the password, raw or percent-encoded, appear in `text`."""
    for form in {password, quote(password, safe="")}:
        for start in range(len(form) - 4):
            assert form[start : start + 5] not in text, f"{form[start : start + 5]!r} leaked in:\n{text}"


@pytest.fixture
def role(database_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A login role whose password is PASSWORD, and where the test's database is."""
    name = f"ff_secret_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE ROLE {name} LOGIN SUPERUSER PASSWORD %s".replace("%s", "'" + PASSWORD.replace("'", "''") + "'")
        )
    parts = urlsplit(database_url)
    yield name, {"host": parts.hostname or "", "port": str(parts.port), "db": parts.path.lstrip("/")}


def _url(form: str, user: str, where: dict[str, str], password: str = PASSWORD) -> str:
    return FORMS[form].format(user=user, pw=quote(password, safe=""), **where)


def _run(binary: str, url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "DATABASE_URL_EXECUTIONS": url, **env}
    return subprocess.run([binary, *args], env=full_env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("form", list(FORMS))
def test_should_never_print_the_password_of_a_working_url(
    role: tuple[str, dict[str, str]], form: str, tmp_path: Path
) -> None:
    user, where = role
    url = _url(form, user, where)
    assert url_problem(url) is None
    migrated = _run(WORKER_BIN, url, "migrate", FIREFLOW_TERMINATION_LOG=str(tmp_path / "termination"))
    assert migrated.returncode == 0, redact_url(migrated.stdout + migrated.stderr)
    worker = WorkerProcess(url, "secret-worker", DBOS_LOG_LEVEL="debug").start()
    try:
        worker.wait_ready()
        run = _run(FIREFLOW_BIN, url, "run", GREET, "--input", "who=Ada", "--follow")
        assert run.returncode == 0, redact_url(run.stderr)
        status = _run(FIREFLOW_BIN, url, "status", run.stdout.split()[2])
        outputs = [migrated.stdout, migrated.stderr, run.stdout, run.stderr, status.stdout, status.stderr]
        outputs += [(tmp_path / "termination").read_text(), worker.get("/metrics")[1]]
    finally:
        worker.terminate()
        worker.wait_exit()
        outputs.append(worker.output())
        worker.stop()
    assert "Initializing DBOS system database with URL" in outputs[-1]
    for text in outputs:
        assert_no_secret(text)


@pytest.mark.parametrize("form", list(FORMS))
def test_should_never_print_the_password_when_it_is_refused(
    role: tuple[str, dict[str, str]], form: str, tmp_path: Path
) -> None:
    user, where = role
    wrong = PASSWORD[::-1]
    url = _url(form, user, where, password=wrong)
    migrated = _run(WORKER_BIN, url, "migrate", FIREFLOW_TERMINATION_LOG=str(tmp_path / "termination"))
    assert migrated.returncode == 1
    worker = WorkerProcess(url, "secret-worker", DBOS_LOG_LEVEL="debug").start()
    assert worker.wait_exit(timeout=120) == 1
    status = _run(FIREFLOW_BIN, url, "status", "some-run")
    assert status.returncode == 1
    assert status.stderr.startswith("error: ")
    for text in [
        migrated.stdout,
        migrated.stderr,
        (tmp_path / "termination").read_text(),
        worker.output(),
        status.stdout,
        status.stderr,
    ]:
        assert_no_secret(text, wrong)
    worker.stop()


@pytest.mark.parametrize(
    ("url", "password"),
    [
        # Nothing encoded: libpq reads a host from the password's tail, a connection error would show it.
        (f"postgresql://u:{PASSWORD}@127.0.0.1:5432/db", PASSWORD),
        ("postgresql://u:Zq7x/yw/v@127.0.0.1:5432/db", "Zq7x/yw/v"),  # "/": libpq reads a port from it
        ("postgresql://u:Zq7x%zz-secret@127.0.0.1:5432/db", "Zq7x%zz-secret"),  # not valid percent-encoding
        ("host=127.0.0.1 port=5432 user=u password='Zq7x y secret' dbname=db", "Zq7x y secret"),  # key=value
        ("mysql://u:Zq7x-y-secret@127.0.0.1/db", "Zq7x-y-secret"),
    ],
    ids=["unencoded", "unencoded-slash", "bad-percent", "key-value", "not-postgres"],
)
def test_should_refuse_an_unusable_url_in_one_line_without_its_password(url: str, password: str) -> None:
    for binary, args in ((WORKER_BIN, ()), (WORKER_BIN, ("migrate",)), (FIREFLOW_BIN, ("status", "x"))):
        result = _run(binary, url, *args, FIREFLOW_WORKER_ID="w")
        assert result.returncode == 2, result.stderr
        lines = (result.stdout + result.stderr).strip().splitlines()
        assert len(lines) == 1, lines
        assert lines[0].startswith("error: ")
        assert_no_secret(result.stdout + result.stderr, password)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://u:a@b@h/db", "postgresql://u:***@h/db"),
        (
            "see postgres://u:p%40w@h:5/db?sslmode=require and retry",
            "see postgres://u:***@h:5/db?sslmode=require and retry",
        ),
        ("postgresql://h/db?user=u&password=a%26b&x=1", "postgresql://h/db?user=u&password=***&x=1"),
        ("postgresql://h/db?PASSWORD=abc", "postgresql://h/db?PASSWORD=***"),
        ("host=h password='a b\\' c' user=u", "host=h password=*** user=u"),
        ("host=h password = secret-word user=u", "host=h password = *** user=u"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h/db?application_name=a@b", "postgresql://h/db?application_name=a@b"),
        ("host=h PASSWORD=abc", "host=h PASSWORD=***"),
        ("host=h pa\u017f\u017fword=abc", "host=h pa\u017f\u017fword=***"),  # a long s, as re's IGNORECASE folds it
        ("run r1 ended after 0.012 s: succeeded", "run r1 ended after 0.012 s: succeeded"),
    ],
)
def test_should_redact_every_form_of_password(text: str, shown: str) -> None:
    assert redact_url(text) == shown
