"""Magnetar's client in a cluster: service URLs naming several brokers, ServiceNotReady
answered by a new lookup, and CloseProducer/CloseConsumer carrying the new owner's URL
(followed straight there, without a lookup). A real broker where one can show it; the stub
broker for what a single real broker cannot do yet."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from magnetar.client import Client, ConnectError
from magnetar.client.service_url import ServiceNameResolver, service_hosts
from tests.client.conftest import BrokerProcess, free_port, run
from tests.client.stub_broker import StubBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerProcess]:
    b = BrokerProcess("magnetar")
    yield b
    b.stop()


def test_service_hosts_split_and_default_ports() -> None:
    assert service_hosts("pulsar://h1:6650,h2:6651") == ["pulsar://h1:6650", "pulsar://h2:6651"]
    assert service_hosts("pulsar+ssl://a,b:7000/") == ["pulsar+ssl://a:6651", "pulsar+ssl://b:7000"]
    assert service_hosts("http://w1:8080,w2:8081") == ["http://w1:8080", "http://w2:8081"]
    assert service_hosts("localhost:6650") == ["pulsar://localhost:6650"]
    assert service_hosts("pulsar://[::1]:6650") == ["pulsar://[::1]:6650"]
    for bad in ("kafka://h:1", "pulsar://", "pulsar://h:notaport"):
        with pytest.raises(ValueError):
            service_hosts(bad)
    r = ServiceNameResolver(["a", "b", "c"])
    assert [r.next() for _ in range(5)] == ["a", "b", "c", "a", "b"]


def test_multi_host_url_passes_over_a_dead_host(broker: BrokerProcess) -> None:
    dead = free_port()  # nothing listens there

    async def main() -> None:
        url = f"pulsar://127.0.0.1:{dead},127.0.0.1:{broker.port}"
        async with Client(url, operation_timeout_seconds=10) as client:
            consumer = await client.subscribe("multi-host-topic", "s")
            producer = await client.create_producer("multi-host-topic")
            for i in range(3):
                await producer.send(f"m{i}".encode())
            got = [(await consumer.receive()).data() for _ in range(3)]
            assert got == [b"m0", b"m1", b"m2"]
        # every host down: the client says so instead of hanging
        async with Client(f"pulsar://127.0.0.1:{dead},127.0.0.1:{free_port()}",
                          operation_timeout_seconds=1) as client:
            with pytest.raises(ConnectError):
                await client.create_producer("nowhere")

    run(main)


def test_lookups_rotate_over_the_service_hosts() -> None:
    async def main() -> None:
        a, b = await StubBroker().start(), await StubBroker().start()
        async with Client(f"pulsar://127.0.0.1:{a.port},127.0.0.1:{b.port}") as client:
            for i in range(4):
                await (await client.create_producer(f"rr-{i}")).send(b"x")
        # each discovery request (partition metadata, then lookup) goes to the next host
        asked = [len(x.lookups) + x.partition_requests for x in (a, b)]
        assert asked == [4, 4]
        await a.stop()
        await b.stop()

    run(main)


def test_service_not_ready_makes_the_producer_look_up_again() -> None:
    async def main() -> None:
        stub = await StubBroker().start()
        stub.fail_producers = 2  # "not the owner" twice, as a broker losing a bundle says
        async with Client(stub.url) as client:
            p = await client.create_producer("moving-topic")
            await p.send(b"after")
        assert len(stub.producer_cmds) == 3
        assert len(stub.lookups) == 3  # one lookup per attempt, not one for all
        assert len(stub.sent) == 1
        await stub.stop()

    run(main)


def test_close_with_assigned_url_goes_straight_to_the_new_owner() -> None:
    async def main() -> None:
        old, new = await StubBroker().start(), await StubBroker().start()
        async with Client(old.url) as client:
            producer = await client.create_producer("moving-topic")
            await client.subscribe("moving-topic", "sub")
            await producer.send(b"before")
            lookups_before = len(old.lookups)
            assert old.close_all(assigned_url=new.url) == 2
            for _ in range(500):  # bounded poll: both reattached at the new owner
                if new.subscribes and new.producer_cmds:
                    break
                await asyncio.sleep(0.01)
            await producer.send(b"after")
        assert [s.subscription for s in new.subscribes] == ["sub"]
        assert len(new.producer_cmds) == 1 and len(new.sent) == 1 and len(old.sent) == 1
        assert not new.lookups and len(old.lookups) == lookups_before  # no lookup at all
        await old.stop()
        await new.stop()

    run(main)


def test_close_without_assigned_url_looks_up_again() -> None:
    async def main() -> None:
        stub = await StubBroker().start()
        async with Client(stub.url) as client:
            producer = await client.create_producer("unloaded-topic")
            await producer.send(b"one")
            stub.close_all()
            await producer.send(b"two")
        assert len(stub.lookups) == 2 and len(stub.producer_cmds) == 2
        await stub.stop()

    run(main)
