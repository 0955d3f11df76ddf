"""Loopback ports for servers a test or a bench starts itself, safe while many run at once.

Binding to port 0 and closing the socket hands back a port that any other process may be
given next: another test's client connection, another test's server. Under xdist that
race is real. `reserved_port()` instead leaves the port in TIME_WAIT on our side: for about
a minute the kernel gives it to no bind(0) and no outgoing connection, while a server that
listens with SO_REUSEADDR (Postgres, Kafka's JVM, Redis, PgBouncer, asyncio's and Go's
servers all do) can still take it. Where a server can choose its own port (the relay's
and the consumer's ops endpoint with port 0), let it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


def reserved_port() -> int:
    """A loopback port held back from every other process until a server binds it."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = int(listener.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = listener.accept()
            # The side that closes first keeps the port in TIME_WAIT: ours, the server's.
            accepted.close()
            client.recv(1)
    return port


def reserved_ports(count: int) -> list[int]:
    """`count` distinct reserved ports."""
    found: set[int] = set()
    while len(found) < count:
        found.add(reserved_port())
    return sorted(found)


@contextlib.contextmanager
def refusing_address() -> Iterator[str]:
    """host:port of a bound socket that never listens: every connection is refused, and no
    other process can take the port while the block runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{held.getsockname()[1]}"


@contextlib.contextmanager
def taken_port() -> Iterator[int]:
    """A port another socket listens on for the block: a server told to bind it fails."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        yield int(held.getsockname()[1])
