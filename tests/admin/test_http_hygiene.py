"""The web port against slow and greedy clients (issue 31 item 4), over raw sockets.

Before: 100 connections sending a header byte a second stayed open for a minute; a 100 MB
body to the create-topic endpoint was answered 204 (the body ignored) while the tenants
endpoint answered 413. Now: a header timeout and a body timeout close the connection, a
connection past ``maxHttpServerConnections`` is answered 503, and every endpoint answers
413 past ``httpMaxRequestSize``.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
import urllib.request
from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from magnetar.testing import StandaloneBroker, standalone

LIMIT = 1024 * 1024


def _address(broker: StandaloneBroker) -> tuple[str, int]:
    url = urlparse(broker.web_service_url)
    assert url.hostname and url.port
    return url.hostname, url.port


def _reply(sock: socket.socket, timeout: float = 30.0) -> bytes:
    """Everything the server sends until it closes (bounded)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


@pytest.fixture(scope="module")
def patient() -> Iterator[StandaloneBroker]:
    """Long timeouts, few connections, a 1 MB body limit."""
    with standalone({"maxHttpServerConnections": 4, "httpMaxRequestSize": LIMIT,
                     "magnetarHttpHeaderTimeoutSeconds": 120}) as b:
        yield b


@pytest.fixture(scope="module")
def impatient() -> Iterator[StandaloneBroker]:
    with standalone({"magnetarHttpHeaderTimeoutSeconds": 2,
                     "magnetarHttpBodyTimeoutSeconds": 2}) as b:
        yield b


def test_slowloris_is_closed_after_the_header_timeout(impatient):
    socks = [socket.create_connection(_address(impatient), timeout=10) for _ in range(5)]
    idle = socket.create_connection(_address(impatient), timeout=10)  # sends nothing at all
    request = b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40
    open_socks = {s.fileno(): s for s in socks}
    closed_after: list[int] = []
    try:
        for i, byte in enumerate(request):  # one header byte each half second
            for fd, sock in list(open_socks.items()):
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    closed_after.append(i)
                    del open_socks[fd]
                    continue
                ready, _, _ = select.select([sock], [], [], 0)
                if ready:
                    reply = _reply(sock)
                    assert _status(reply) in (0, 408), reply
                    closed_after.append(i)
                    del open_socks[fd]
            if not open_socks:
                break
            select.select([], [], [], 0.5)
        assert not open_socks, "a connection trickling its headers was never closed"
        assert min(closed_after) >= 2  # not at once: the clock ran first
        assert _status(_reply(idle)) == 408
    finally:
        for sock in [*socks, idle]:
            sock.close()
    with urllib.request.urlopen(impatient.web_service_url + "/admin/v2/clusters", timeout=10) as r:
        assert r.status == 200  # the port itself is fine


def test_slow_body_is_closed_after_the_body_timeout(impatient):
    with socket.create_connection(_address(impatient), timeout=10) as sock:
        sock.sendall(b"PUT /admin/v2/tenants/slow HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a")
        reply = _reply(sock)
    assert _status(reply) == 408, reply
    assert b"body not received" in reply


def test_connections_past_the_cap_get_503(patient):
    held = [socket.create_connection(_address(patient), timeout=10) for _ in range(4)]
    try:
        for sock in held:  # each one accepted and counted before the next step
            sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n")
            assert b"200 OK" in sock.recv(65536)
        with socket.create_connection(_address(patient), timeout=10) as extra:
            reply = _reply(extra)
        assert _status(reply) == 503, reply
        assert b"maxHttpServerConnections" in reply
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 30
    while True:  # the closed ones leave the count once the server sees them go
        with socket.create_connection(_address(patient), timeout=10) as sock:
            sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status = _status(_reply(sock))
        if status == 200:
            break
        assert status == 503 and time.monotonic() < deadline, status
        time.sleep(0.05)


def _endpoints(broker: StandaloneBroker) -> list[tuple[str, str]]:
    with urllib.request.urlopen(broker.web_service_url + "/admin/v2/openapi.json", timeout=10) as r:
        doc = json.load(r)
    found = []
    for path, methods in doc["paths"].items():
        concrete = "/".join("x" if part.startswith("{") else part for part in path.split("/"))
        for method in methods:
            if method.upper() in ("GET", "PUT", "POST", "DELETE"):
                found.append((method.upper(), concrete))
    return found


def _send_big(broker: StandaloneBroker, method: str, path: str, chunked: bool = False) -> bytes:
    with socket.create_connection(_address(broker), timeout=10) as sock:
        size = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % (100 * LIMIT)
        sock.sendall(b"%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s\r\n\r\n"
                     % (method.encode(), path.encode(), size))
        try:
            chunk = b"a" * 65536
            for _ in range(LIMIT // 65536 + 2):  # past the limit, then stop
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        except OSError:  # answered and closed while we were still sending
            pass
        with contextlib.suppress(OSError):  # no more (the server stops lingering for it)
            sock.shutdown(socket.SHUT_WR)
        return _reply(sock)


def test_oversize_body_is_413_on_every_endpoint(patient):
    endpoints = _endpoints(patient)
    assert len(endpoints) > 50
    endpoints.append(("PUT", "/admin/v2/persistent/public/default/big"))  # answered 204
    statuses = {(m, p): _status(_send_big(patient, m, p)) for m, p in endpoints}
    assert {k: v for k, v in statuses.items() if v != 413} == {}
    # a chunked body is cut at the limit too
    assert _status(_send_big(patient, "PUT", "/admin/v2/persistent/x/x/x", chunked=True)) == 413
    assert _status(_send_big(patient, "PUT", "/admin/v2/tenants/x", chunked=True)) == 413
