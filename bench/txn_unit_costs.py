"""What one request and one transaction cost the broker: its CPU (every thread, from
``/proc``) for each of these done ``--count`` times in a row, one at a time, on one
connection, so that the fixed cost of a transaction can be told apart from a wake-up's:

- ``echo``: a bare uvloop echo server's round trip of 20 bytes (no Magnetar; in its own
  process, on the broker's CPU): what any request costs a server on this machine;
- ``ping``: a PING answered with a PONG (a raw socket client);
- ``send``: one plain send of ``--size`` bytes, awaited;
- ``new-txn``: a NewTxn alone (the transactions aborted afterwards, not measured);
- ``empty-txn``: NewTxn, then EndTxn (commit) with nothing sent;
- ``one-txn``: NewTxn, one send, commit.

A round measures each in turn; the summary gives each one's median over ``--rounds``.

    python bench/txn_unit_costs.py --count 1000 --rounds 3 --pin
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection as Pipe

import magnetar
from magnetar.client.transaction import Transaction
from magnetar.protocol import command, encode_command

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from txn_bench import cpu_seconds, tree_broker  # (this directory's)

KINDS = ("echo", "ping", "send", "new-txn", "empty-txn", "one-txn")


def _echo_server(cpu: int | None, port_out: Pipe) -> None:
    """A uvloop server writing back whatever it reads, on ``cpu``."""
    import uvloop

    if cpu is not None:
        os.sched_setaffinity(0, {cpu})

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.transport.write(data)  # type: ignore[attr-defined]

    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    uvloop.run(serve())


def round_trips(port: int, request: bytes, count: int, pid: int,
                first: bytes | None = None) -> float:
    """Server CPU µs per round trip of ``request`` (answered by one read of at most 4 KB),
    after ``first`` (the Connect) was answered."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if first is not None:
            sock.sendall(first)
            sock.recv(4096)
        before = cpu_seconds(pid)
        for _ in range(count):
            sock.sendall(request)
            if not sock.recv(4096):
                raise SystemExit("the server closed the connection")
        return (cpu_seconds(pid) - before) / count * 1e6


def echo_floor(cpu: int | None, count: int) -> float:
    """``echo``: a bare uvloop server's CPU per round trip."""
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_echo_server, args=(cpu, theirs), daemon=True)
    server.start()
    try:
        port = ours.recv()
        assert server.pid is not None
        return round_trips(port, b"e" * 20, count, server.pid)
    finally:
        server.kill()
        server.join()


def ping_cost(url: str, pid: int, count: int) -> float:
    """``ping``: the broker's CPU per PING answered."""
    port = int(url.rsplit(":", 1)[1])
    connect = encode_command(command("CONNECT", client_version="txn-unit-costs",
                                     protocol_version=21))
    return round_trips(port, encode_command(command("PING")), count, pid, first=connect)


async def client_costs(url: str, pid: int, kind: str, count: int, size: int) -> float:
    """The broker's CPU per ``kind`` (one of the client's kinds) done ``count`` times."""
    payload = b"x" * size
    async with magnetar.Client(url, enable_transaction=True) as client:
        producer = await client.create_producer(
            f"persistent://public/default/txn-unit-{uuid.uuid4().hex[:8]}")
        await producer.send(payload)  # topic loaded, producer ready, coordinators
        warm = await client.new_transaction(timeout_ms=60_000)  # connected: not measured
        await warm.commit()

        async def send() -> None:
            await producer.send(payload)

        opened: list[Transaction] = []

        async def new_txn() -> None:
            opened.append(await client.new_transaction(timeout_ms=600_000))

        async def empty_txn() -> None:
            await (await client.new_transaction(timeout_ms=60_000)).commit()

        async def one_txn() -> None:
            txn = await client.new_transaction(timeout_ms=60_000)
            await producer.send_async(payload, txn=txn)
            await txn.commit()

        one: dict[str, Callable[[], Awaitable[None]]] = {
            "send": send, "new-txn": new_txn, "empty-txn": empty_txn, "one-txn": one_txn}
        before = cpu_seconds(pid)
        for _ in range(count):
            await one[kind]()
        used = cpu_seconds(pid) - before
        for txn in opened:
            await txn.abort()
        return used / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="what is measured:\n" + __doc__.split("\n\n")[1])
    parser.add_argument("--count", type=int, default=1000, help="of each, per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every kind")
    parser.add_argument("--size", type=int, default=1024, help="bytes per message")
    parser.add_argument("--src", default="src",
                        help="the source tree's src directory to run the broker from")
    parser.add_argument("--pin", action="store_true",
                        help="the broker (and the echo server) on the last CPU, this "
                        "process on the others")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1] if args.pin and len(cpus) > 1 else None
    if server_cpu is not None:
        os.sched_setaffinity(0, set(cpus[:-1]))
    costs: dict[str, list[float]] = {kind: [] for kind in KINDS}
    with tree_broker(args.src, server_cpu) as (url, pid):
        for i in range(args.rounds):
            for kind in KINDS:
                if kind == "echo":
                    cost = echo_floor(server_cpu, args.count)
                elif kind == "ping":
                    cost = ping_cost(url, pid, args.count)
                else:
                    cost = asyncio.run(client_costs(url, pid, kind, args.count, args.size))
                costs[kind].append(cost)
            print(f"round {i + 1}: " + ", ".join(f"{kind} {costs[kind][-1]:.0f} us"
                                                  for kind in KINDS), flush=True)
    print(f"server CPU per operation, {args.count} of each a round, median of "
          f"{args.rounds} rounds (messages of {args.size} B):")
    for kind in KINDS:
        print(f"  {kind:10} {statistics.median(costs[kind]):7.0f} us  "
              f"({', '.join(f'{v:.0f}' for v in costs[kind])})")


if __name__ == "__main__":
    main()
