"""`free_port`: a loopback TCP port nobody listens on, never the same one twice in the test
process (brokers made one after the other were sometimes handed the same port by the OS,
asked before the first of them had bound it)."""

from __future__ import annotations

import socket

_handed: set[int] = set()


def free_port() -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed:
            _handed.add(port)
            return port
    raise RuntimeError("no port the OS offered was new after 100 tries")
