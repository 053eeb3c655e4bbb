"""Ports on 127.0.0.1 where nothing listens, for tests that start servers or probe one."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


def free_ports(count: int) -> list[int]:
    """`count` distinct ports the kernel just handed out, released: free until another
    process happens to bind one."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@contextmanager
def refusing_port() -> Iterator[tuple[socket.socket, int]]:
    """A port on 127.0.0.1 that refuses connections while the block runs: bound and not
    listening, so that no other process can take it (a freed port could be), and the test
    can start listening on it with the socket it yields."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock, sock.getsockname()[1]
