"""Floors for the broker bench: what this machine's kernel charges for the work any
durable broker must do, measured in the same run as the brokers.

The *fsync floor* is one small write + fdatasync in a loop: the sync alone. A *request floor* is a plain blocking server (one thread, no event loop, no allocation
per request) that reads fixed-size requests from a loopback TCP connection into one
reused buffer, appends each to a file, fdatasyncs (or not), and answers each with a
48-byte reply, while a client thread keeps ``window`` requests in flight. The server
thread's own CPU (user + kernel, ``RUSAGE_THREAD``) per request is the floor: socket
reads, file writes, syncs and replies, with next to no user-space work. A broker does the
same system calls plus its own work, so its CPU per message over the floor's says how
much of its cost is its own.
"""

from __future__ import annotations

import os
import resource
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPLY = b"r" * 48


@dataclass
class FsyncFloor:
    """What one small write + fdatasync costs on this machine's disk, measured in this run."""

    size: int
    count: int
    cpu_us: float  # CPU of the calling thread (user + kernel) per write + fdatasync
    wall_us: float  # median wall time per write + fdatasync


def measure_fsync_floor(directory: Path, size: int, count: int = 500) -> FsyncFloor:
    """Append ``size`` bytes and fdatasync, ``count`` times, in a file under ``directory``
    (the file system the brokers' data dirs are on); the floor any durable unbatched send
    pays on this disk, whatever the broker's language."""
    path = directory / "fsync-floor.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"x" * size
    walls = []
    try:
        for _ in range(20):  # allocate the first blocks, warm the path
            os.write(fd, block)
            os.fdatasync(fd)
        before = resource.getrusage(resource.RUSAGE_THREAD)
        for _ in range(count):
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            walls.append(time.perf_counter() - t0)
        after = resource.getrusage(resource.RUSAGE_THREAD)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    walls.sort()
    return FsyncFloor(size, count, cpu / count * 1e6, walls[len(walls) // 2] * 1e6)


@dataclass
class RequestFloor:
    """CPU of the blocking reference server per request and per message."""

    label: str
    request_bytes: int
    messages_per_request: int
    requests: int
    fsync: bool
    cpu_us_per_request: float
    cpu_us_per_msg: float


def _recv_exactly(conn: socket.socket, view: memoryview) -> bool:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            return False
        got += n
    return True


def measure_request_floor(directory: Path, label: str, request_bytes: int, requests: int,
                          messages_per_request: int = 1, window: int = 1,
                          fsync: bool = True) -> RequestFloor:
    """Run the reference server for ``requests`` requests of ``request_bytes`` each, its
    data file under ``directory`` (the file system of the brokers' data dirs)."""
    path = directory / f"floor-{label.replace(' ', '-')}.bin"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    cpu: list[float] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        buf = bytearray(request_bytes)
        view = memoryview(buf)
        try:
            before = resource.getrusage(resource.RUSAGE_THREAD)
            for _ in range(requests):
                if not _recv_exactly(conn, view):
                    break
                os.write(fd, view)
                if fsync:
                    os.fdatasync(fd)
                conn.sendall(REPLY)
            after = resource.getrusage(resource.RUSAGE_THREAD)
            cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        finally:
            os.close(fd)
            conn.close()

    server = threading.Thread(target=serve, name="floor-server", daemon=True)
    server.start()
    request = b"x" * request_bytes
    reply = memoryview(bytearray(len(REPLY)))
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = answered = 0
        while answered < requests:
            while sent < requests and sent - answered < window:
                client.sendall(request)
                sent += 1
            if not _recv_exactly(client, reply):
                break
            answered += 1
    server.join(timeout=60)
    listener.close()
    path.unlink(missing_ok=True)
    per_request = (cpu[0] if cpu else float("nan")) / requests * 1e6
    return RequestFloor(label, request_bytes, messages_per_request, requests, fsync,
                        per_request, per_request / messages_per_request)


def describe(floor: RequestFloor) -> str:
    sync = "write + fdatasync" if floor.fsync else "write (no sync)"
    return (f"{floor.label}: a blocking server's recv of {floor.request_bytes:,} B + {sync} + "
            f"48 B reply costs {floor.cpu_us_per_request:.0f} us of CPU per request "
            f"({floor.cpu_us_per_msg:.2f} us per message of {floor.messages_per_request}; "
            f"{floor.requests:,} requests)")
