"""Free TCP ports for the local servers (PostgreSQL, workers' health ports, the operator, test servers).

A port is free only until someone binds it. Asking the kernel for port 0 hands out a port of its ephemeral
range, the same range every outgoing connection takes its local port from: on a busy machine a database or
API client can take it between the moment it was found free and the moment its server binds it. So ports
come from below that range (see `ip_local_port_range`), chosen at random so that concurrent processes rarely
pick the same one, and checked free on every address, as the servers that bind `0.0.0.0` need.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Above the ports common servers listen on by default (5432, 8080, 9090, ...).
LOWEST = 10_000
# With fewer than this many ports below the ephemeral range, fall back to the kernel's choice.
ENOUGH = 2_000
_TRIES = 100

_handed_out: set[int] = set()
_lock = threading.Lock()


def free_port() -> int:
    """A TCP port free on every address a moment ago, not handed out before by this process."""
    highest = _ephemeral_low() - 1
    if highest - LOWEST >= ENOUGH:
        for _ in range(_TRIES):
            port = random.randint(LOWEST, highest)  # noqa: S311 - spreading, not secrecy
            with _lock:
                if port in _handed_out:
                    continue
                if _bindable(port):
                    _handed_out.add(port)
                    return port
    return _kernel_choice()


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
