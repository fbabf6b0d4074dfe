"""`Reachability`: the TCP connect probe a lookup asks before redirecting to an owner."""

from __future__ import annotations

import asyncio
import socket

from magnetar.broker.cluster.reachability import Reachability, address_of


def test_address_of_urls() -> None:
    assert address_of("pulsar://10.0.0.1:6650") == ("10.0.0.1", 6650)
    assert address_of("pulsar+ssl://b1:6651") == ("b1", 6651)
    assert address_of("pulsar://[::1]:6650") == ("::1", 6650)
    assert address_of("") is None
    assert address_of("pulsar://b1") is None
    assert address_of("pulsar://b1:notaport") is None


def test_a_listening_port_is_reachable_a_closed_one_is_not_and_failures_are_kept() -> None:
    async def main() -> None:
        accepted = 0

        def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        def on_late(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        probe = Reachability(down_ttl_s=60.0)
        try:
            # concurrent asks for one address share one probe
            assert await asyncio.gather(*(probe.reachable(f"pulsar://127.0.0.1:{port}")
                                          for _ in range(5))) == [True] * 5
            assert not await probe.reachable(f"pulsar://127.0.0.1:{closed}")
            assert await probe.reachable("no url")  # nothing to probe: as before
            # a failure is remembered: the port listening now is not probed again yet
            late = await asyncio.start_server(on_late, "127.0.0.1", closed)
            try:
                assert not await probe.reachable(f"pulsar://127.0.0.1:{closed}")
                assert await Reachability().reachable(f"pulsar://127.0.0.1:{closed}")
            finally:
                late.close()
        finally:
            server.close()
        for _ in range(100):  # the accepted connections are handled on the loop
            if accepted:
                break
            await asyncio.sleep(0.01)
        assert accepted == 1  # five asks, one probe

    asyncio.run(main())
