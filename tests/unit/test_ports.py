"""Local servers' ports come from below the kernel's ephemeral range (where no outgoing connection can take
them before their server binds), are free on every address, and are never handed out twice by a process."""

from __future__ import annotations

import socket

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
