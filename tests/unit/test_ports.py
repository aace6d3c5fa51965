"""Local servers' ports come from below the kernel's ephemeral range (where no outgoing connection can take
them before their server binds), are free on every address, and are never handed out twice by a process."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fireflow_local import ports


def test_should_hand_out_distinct_free_ports_below_the_ephemeral_range() -> None:
    handed = [ports.free_port() for _ in range(300)]
    assert len(set(handed)) == len(handed)
    assert all(ports.LOWEST <= port < ports._ephemeral_low() for port in handed)
    for port in handed[:20]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", port))


def test_should_skip_a_port_something_listens_on() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert not ports._bindable(taken.getsockname()[1])


def test_should_not_hand_out_a_port_another_process_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    reserved, other = ports.free_port(), ports.free_port()
    _give_back(reserved)
    _give_back(other)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_A_RESERVATION, str(reserved)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert not ports._reserve(reserved)
        # free_port draws the reserved port first, then the other: it hands out the other.
        draws = iter([reserved, other])
        monkeypatch.setattr(random, "randint", lambda _low, _high: next(draws))
        assert ports.free_port() == other
    finally:
        holder.kill()
        holder.wait()
    assert ports._reserve(reserved)  # released when its holder ended


def test_should_release_the_oldest_reservations_past_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "HELD", 2)
    first, _second, third = (ports.free_port() for _ in range(3))
    assert len(ports._held) == 2
    holder = subprocess.run(
        [sys.executable, "-c", TRY_RESERVATIONS, str(first), str(third)], capture_output=True, text=True, check=True
    )
    assert holder.stdout.split() == ["True", "False"]  # the first is released, the last still held here


HOLD_A_RESERVATION = """
import sys, time
from fireflow_local import ports
assert ports._reserve(int(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""
TRY_RESERVATIONS = """
import sys
from fireflow_local import ports
print(*(ports._reserve(int(port)) for port in sys.argv[1:]))
"""


def _give_back(port: int) -> None:
    """Release this process's reservation of `port`, as if it had never handed it out."""
    for fd in list(ports._held):
        if Path(f"/proc/self/fd/{fd}").readlink().name == str(port):
            ports._held.remove(fd)
            os.close(fd)
    ports._handed_out.discard(port)
