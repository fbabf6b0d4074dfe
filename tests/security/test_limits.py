"""Connection, per-topic and lookup limits, refused with Pulsar's error codes."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pulsar
import pytest

import magnetar
from magnetar.admin.server import AdminServer
from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.protocol import pb
from magnetar.protocol.commands import command
from magnetar.protocol.frames import encode_command
from tests.broker.brokerproc import SILENT, wait_until
from tests.broker.rawclient import RawClient

from .test_authentication import new_topic, round_trip

T = pb.BaseCommand


def test_connections_per_ip_and_total(make_broker: Any) -> None:
    broker = make_broker(brokerMaxConnectionsPerIp=3, brokerMaxConnections=5)
    limits = broker.service.security.limits
    held = [RawClient.for_url(broker.url) for _ in range(3)]
    try:
        for raw in held:
            raw.connect()
        with RawClient.for_url(broker.url) as extra:  # the fourth from this address
            assert extra.wait_closed(10)
        assert limits.refused >= 1
        held.pop().close()
        wait_until(lambda: limits.total == 2, 10, "the closed connection to be released")
        round_trip(broker.url, None)  # a normal client gets in again
    finally:
        for raw in held:
            raw.close()


def test_handshake_timeout(make_broker: Any) -> None:
    broker = make_broker(magnetarHandshakeTimeoutSeconds=1)
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", broker.service.port), timeout=20) as silent:
        assert silent.recv(1) == b""  # closed by the broker
    assert time.monotonic() - start < 15
    with RawClient.for_url(broker.url) as raw:
        raw.connect()
        raw.send("PING")
        raw.expect(pulsar_pong())
        wait_until(lambda: broker.service.security.limits.total == 1, 10, "one connection")
        assert raw.is_alive()


def pulsar_pong() -> int:
    return pb.BaseCommand.PONG


def test_producers_per_topic(make_broker: Any) -> None:
    broker = make_broker(maxProducersPerTopic=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=SILENT)
    try:
        topic = new_topic()
        first = client.create_producer(topic)
        client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        first.close()
        client.create_producer(topic).send(b"room again")
    finally:
        client.close()


def test_consumers_and_subscriptions_per_topic(make_broker: Any) -> None:
    broker = make_broker(maxConsumersPerSubscription=1, maxConsumersPerTopic=2,
                         maxSubscriptionsPerTopic=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=SILENT)
    shared = pulsar.ConsumerType.Shared
    try:
        topic = new_topic()
        client.subscribe(topic, "a", consumer_type=shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "a", consumer_type=shared)
        client.subscribe(topic, "b", consumer_type=shared)
        with pytest.raises((pulsar.ConsumerBusy, pulsar.NotAllowedError)):
            client.subscribe(topic, "c", consumer_type=shared)
    finally:
        client.close()
    broker2 = make_broker(maxSubscriptionsPerTopic=1)
    client = pulsar.Client(broker2.url, operation_timeout_seconds=5, logger=SILENT)
    try:
        topic = new_topic()
        client.subscribe(topic, "a")
        with pytest.raises(pulsar.NotAllowedError):
            client.subscribe(topic, "b")
    finally:
        client.close()


def test_producers_per_connection(make_broker: Any) -> None:
    broker = make_broker(magnetarMaxProducersPerConnection=2)
    client = pulsar.Client(broker.url, operation_timeout_seconds=5, logger=SILENT)
    try:
        client.create_producer(new_topic())
        client.create_producer(new_topic())
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(new_topic())
    finally:
        client.close()


# ---------------------------------------------------------------------- lookups

def _lookup_flood(count: int, topic: str, first_id: int = 1) -> bytes:
    """``count`` Lookup and PartitionedMetadata requests (alternately), as one write."""
    frames = []
    for i in range(count):
        kind = "LOOKUP" if i % 2 == 0 else "PARTITIONED_METADATA"
        frames.append(encode_command(command(kind, topic=topic, request_id=first_id + i)))
    return b"".join(frames)


def _lookup_answers(raw: RawClient, count: int) -> dict[int, tuple[int, int | None]]:
    """request id -> (response type, error code or None), for ``count`` answers."""
    answers: dict[int, tuple[int, int | None]] = {}
    while len(answers) < count:
        cmd = raw.read_reply(30)
        if cmd.type == T.LOOKUP_RESPONSE:
            r = cmd.lookupTopicResponse
            failed = r.response == pb.CommandLookupTopicResponse.Failed
        else:
            assert cmd.type == T.PARTITIONED_METADATA_RESPONSE, cmd
            r = cmd.partitionMetadataResponse
            failed = r.response == pb.CommandPartitionedTopicMetadataResponse.Failed
        assert r.request_id not in answers, f"two answers for request {r.request_id}"
        answers[r.request_id] = (cmd.type, r.error if failed else None)
    return answers


def test_lookup_flood_beyond_the_limit_gets_too_many_requests(make_broker: Any) -> None:
    limit, count = 5, 300
    broker = make_broker(maxConcurrentLookupRequest=limit)
    limits = broker.service.security.limits
    topic = new_topic()
    with RawClient.for_url(broker.url, timeout=30) as raw:
        raw.connect()
        # one write: the broker takes it in with a read or a few, far more than 5 at a time
        raw.send_bytes(_lookup_flood(count, topic))
        answers = _lookup_answers(raw, count)
        assert set(answers) == set(range(1, count + 1))  # every request answered, once
        errors = [error for _, error in answers.values()]
        assert set(errors) <= {None, pb.TooManyRequests}, set(errors)
        assert errors.count(pb.TooManyRequests) > 0
        assert errors.count(None) >= limit
        assert limits.lookups_refused == errors.count(pb.TooManyRequests)
        # the slots are given back with the answers: the same connection looks up again
        wait_until(lambda: limits.lookups_in_progress == 0, 10, "the lookup slots to be free")
        raw.send_bytes(_lookup_flood(limit, topic, first_id=count + 1))
        again = _lookup_answers(raw, limit)
        assert all(error is None for _, error in again.values()), again
        assert raw.is_alive()
    round_trip(broker.url, None)


def test_partitioned_metadata_holds_its_slot_until_it_is_answered(make_broker: Any) -> None:
    """The metadata store is read off the event loop: the request keeps its lookup slot
    while that read is stalled, so a lookup meanwhile is over the limit of 1."""
    broker = make_broker(maxConcurrentLookupRequest=1)
    limits = broker.service.security.limits
    store = broker.service.metadata
    release, stalled = threading.Event(), threading.Event()
    real_get = store.get

    def slow_get(key: str) -> object:
        if "held-slot" in key and not release.is_set():
            stalled.set()
            release.wait(30)
        return real_get(key)

    broker.call(setattr, store, "get", slow_get)
    try:
        with RawClient.for_url(broker.url, timeout=30) as raw:
            raw.connect()
            raw.send_bytes(encode_command(command(
                "PARTITIONED_METADATA", topic="persistent://public/default/held-slot", request_id=1)))
            assert stalled.wait(10), "the metadata read was never made"
            assert raw.is_alive()  # other output on the connection does not free the slot
            raw.send_bytes(encode_command(command("LOOKUP", topic=new_topic(), request_id=2)))
            assert _lookup_answers(raw, 1) == {2: (T.LOOKUP_RESPONSE, pb.TooManyRequests)}
            release.set()
            assert _lookup_answers(raw, 1) == {1: (T.PARTITIONED_METADATA_RESPONSE, None)}
            wait_until(lambda: limits.lookups_in_progress == 0, 10, "the lookup slot to be free")
            raw.send_bytes(encode_command(command("LOOKUP", topic=new_topic(), request_id=3)))
            assert _lookup_answers(raw, 1) == {3: (T.LOOKUP_RESPONSE, None)}
    finally:
        release.set()


def test_topic_loads_past_the_limit_wait_for_a_slot(make_broker: Any) -> None:
    """maxConcurrentTopicLoadRequest=1: while one topic's load is stalled, another topic's
    load waits; both complete once the first is released."""
    broker = make_broker(maxConcurrentTopicLoadRequest=1)
    service = broker.service
    release, stalled = threading.Event(), threading.Event()
    real_admit = service.admit_persistent

    def slow_admit(*args: Any) -> object:
        if "stuck-load" in str(args[0]) and not release.is_set():
            stalled.set()
            release.wait(30)
        return real_admit(*args)

    broker.call(setattr, service, "admit_persistent", slow_admit)
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(
        pulsar.LoggerLevel.Error))
    try:
        made: dict[str, pulsar.Producer] = {}
        threads = [threading.Thread(target=lambda name=name: made.__setitem__(
            name, client.create_producer(f"persistent://public/default/{name}")))
            for name in ("stuck-load", "waiting-load")]
        threads[0].start()
        assert stalled.wait(10), "the first load never started"
        threads[1].start()
        wait_until(lambda: broker.call(lambda: service.topic_load_slots._waiters is not None
                                       and len(service.topic_load_slots._waiters) == 1),
                   10, "the second load to wait for a slot")
        assert not made
        release.set()
        for thread in threads:
            thread.join(30)
        assert set(made) == {"stuck-load", "waiting-load"}
        made["waiting-load"].send(b"loaded after the first")
    finally:
        release.set()
        client.close()


def test_official_client_through_lookup_floods(make_broker: Any) -> None:
    """Floods on two other connections meanwhile. The official client (C++ 3.13) does not
    retry a lookup refused with TooManyRequests (TooManyLookupRequestException is fatal to
    it, as against a Pulsar broker): creating a producer or consumer may fail with it and
    succeeds when the application tries again. It also closes its connection on that error,
    so its producers and consumers reconnect: a send may then be stored twice (at least
    once, as Pulsar without deduplication) but no message is lost."""
    broker = make_broker(maxConcurrentLookupRequest=3)
    stop = threading.Event()
    refused = [0]

    def flood() -> None:
        topic = new_topic()
        with RawClient.for_url(broker.url, timeout=30) as raw:
            raw.connect()
            for round_no in range(300):
                if stop.is_set():
                    break
                raw.send_bytes(_lookup_flood(50, topic, first_id=round_no * 50 + 1))
                answers = _lookup_answers(raw, 50)
                refused[0] += sum(1 for _, e in answers.values() if e == pb.TooManyRequests)

    def retried(make: Any) -> Any:
        for _ in range(100):
            try:
                return make()
            except pulsar.TooManyLookupRequestException:
                continue
        raise AssertionError("refused 100 times in a row")

    flooders = [threading.Thread(target=flood) for _ in range(2)]
    for t in flooders:
        t.start()
    client = pulsar.Client(broker.url, operation_timeout_seconds=30, logger=SILENT)
    try:
        topics = [new_topic() for _ in range(5)]
        consumers = [retried(lambda t=t: client.subscribe(t, "s")) for t in topics]
        producers = [retried(lambda t=t: client.create_producer(t)) for t in topics]
        for p in producers:
            for i in range(20):
                p.send(f"m{i}".encode())
        expected = [f"m{i}".encode() for i in range(20)]
        for c in consumers:
            got: list[bytes] = []
            while len(set(got)) < 20:
                msg = c.receive(timeout_millis=30000)
                c.acknowledge(msg)
                got.append(msg.data())
            assert list(dict.fromkeys(got)) == expected  # all there, first copies in order
    finally:
        stop.set()
        for t in flooders:
            t.join(60)
        client.close()
    assert refused[0] > 0  # the floods did hit the limit


def test_magnetar_client_retries_refused_lookups(make_broker: Any) -> None:
    """Magnetar's client retries TooManyRequests with backoff: the refusal does not reach
    the caller, which gets its producer once a slot is free."""
    broker = make_broker(maxConcurrentLookupRequest=3)
    limits = broker.service.security.limits
    broker.call(lambda: setattr(limits, "lookups_in_progress", 3))  # as 3 lookups in progress
    outcome: list[Any] = []

    async def use() -> None:
        async with magnetar.Client(broker.url, operation_timeout_seconds=60) as client:
            producer = await client.create_producer(new_topic())
            outcome.append(await producer.send(b"x"))

    def run() -> None:
        try:
            asyncio.run(use())
        except BaseException as exc:  # reported by the assertion below
            outcome.append(exc)

    user = threading.Thread(target=run)
    user.start()
    try:
        wait_until(lambda: limits.lookups_refused >= 2, 30, "the client to be refused twice")
        assert not outcome  # still trying
    finally:
        broker.call(limits.release_lookups, 3)
        user.join(90)
    assert len(outcome) == 1 and not isinstance(outcome[0], BaseException), outcome


def test_http_lookup_is_503_while_no_lookup_slot_is_free(make_broker: Any) -> None:
    broker = make_broker(maxConcurrentLookupRequest=2)
    limits = broker.service.security.limits
    server = AdminServer(broker.service, "127.0.0.1", 0)
    broker.call_async(server.start)
    try:
        url = f"http://127.0.0.1:{server.port}/lookup/v2/topic/persistent/public/default/x"
        assert _http_get(url)[0] == 200
        # hold both slots, as two lookups in progress would
        broker.call(lambda: setattr(limits, "lookups_in_progress", 2))
        status, body = _http_get(url)
        assert status == 503 and "maxConcurrentLookupRequest" in json.loads(body)["reason"]
        broker.call(limits.release_lookups, 2)
        assert _http_get(url)[0] == 200
    finally:
        broker.call_async(server.stop)


def _http_get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_lookup_limits_are_checked() -> None:
    for key in ("maxConcurrentLookupRequest", "maxConcurrentTopicLoadRequest"):
        with pytest.raises(ConfigError, match=key):
            BrokerConfig.load(None, **{key: 0})
    assert BrokerConfig().maxConcurrentLookupRequest == 50000  # Pulsar's defaults
    assert BrokerConfig().maxConcurrentTopicLoadRequest == 5000
