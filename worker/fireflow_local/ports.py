"""Free TCP ports for the local servers (PostgreSQL, workers' health ports, the operator, test servers).

A port is free only until someone binds it. Asking the kernel for port 0 hands out a port of its ephemeral
range, the same range every outgoing connection takes its local port from: on a busy machine a database or
API client can take it between the moment it was found free and the moment its server binds it. So ports
come from below that range (see `ip_local_port_range`), chosen at random so that concurrent processes rarely
pick the same one, and checked free on every address, as the servers that bind `0.0.0.0` need.

A port checked free stays free to every other process too until its server binds it, seconds later for a
server in a process still starting. So each port handed out is also reserved machine-wide: a lock (`flock`)
on its file in a shared directory, held by the process that handed it out until it has handed out `HELD`
more or exits. Other processes (the test tiers' parallel workers, other clones' servers) skip a reserved
port. Where the directory cannot be used, a process falls back to its own record of what it handed out.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import tempfile
import threading
from collections import deque
from pathlib import Path

LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Above the ports common servers listen on by default (5432, 8080, 9090, ...).
LOWEST = 10_000
# With fewer than this many ports below the ephemeral range, fall back to the kernel's choice.
ENOUGH = 2_000
_TRIES = 100
# Shared by every user of the machine (sticky, like /tmp: nobody removes another's files).
RESERVATIONS = Path(tempfile.gettempdir()) / "fireflow-ports"
# Reservations a process holds at once: long after a port was handed out, its server has bound it (or never will).
HELD = 256

_handed_out: set[int] = set()
_lock = threading.Lock()
_held: deque[int] = deque()  # the reservations' open files, oldest first
_shared: bool | None = None  # whether RESERVATIONS can be used (None: not tried yet)


def free_port() -> int:
    """A TCP port free on every address a moment ago, not handed out before by this process."""
    highest = _ephemeral_low() - 1
    if highest - LOWEST >= ENOUGH:
        for _ in range(_TRIES):
            port = random.randint(LOWEST, highest)  # noqa: S311 - spreading, not secrecy
            with _lock:
                if port in _handed_out:
                    continue
                if _bindable(port) and _reserve(port):
                    _handed_out.add(port)
                    return port
    return _kernel_choice()


def _reserve(port: int) -> bool:
    """Reserve `port` machine-wide for this process (held until HELD more are, or the process ends); False when
    another process holds it."""
    if not _shared_directory():
        return True
    try:
        fd = os.open(RESERVATIONS / str(port), os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW, 0o444)
    except OSError:
        return False  # another user's file this one cannot open, or a link: not this port
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o444)  # readable by every user whatever the umask, so that they can lock it too
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held.append(fd)
    while len(_held) > HELD:
        os.close(_held.popleft())
    return True


def _shared_directory() -> bool:
    global _shared  # noqa: PLW0603 - one answer per process
    if _shared is None:
        try:
            RESERVATIONS.mkdir(mode=0o1777)
            RESERVATIONS.chmod(0o1777)  # what the umask took from mkdir's mode
        except FileExistsError:
            pass
        except OSError:
            _shared = False
            return False
        _shared = RESERVATIONS.is_dir() and not RESERVATIONS.is_symlink() and os.access(RESERVATIONS, os.W_OK)
    return _shared


def _ephemeral_low() -> int:
    try:
        return int(LOCAL_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LOWEST  # not Linux, or unreadable: no range known to avoid


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _kernel_choice() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
