"""Topics and subscriptions over HTTP, checked against what the official client sees."""

from __future__ import annotations

import time

import pulsar

from tests.admin.conftest import Api, wait_until

NS = "/admin/v2/persistent/public/default"


def full(name: str) -> str:
    return f"persistent://public/default/{name}"


def produce(client: pulsar.Client, topic: str, n: int, prefix: str = "m") -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"{prefix}{i}".encode(), properties={"i": str(i)}) for i in range(n)]
    producer.close()
    return ids


def test_create_list_delete(api: Api, client: pulsar.Client, name: str) -> None:
    assert api.put(f"{NS}/{name}")[0] == 204
    assert api.put(f"{NS}/{name}")[0] == 409
    assert full(name) in api.get(NS)[1]
    assert api.get(f"{NS}/{name}/partitions") == (200, {"partitions": 0})
    producer = client.create_producer(full(name))
    assert api.delete(f"{NS}/{name}")[0] == 412  # a producer is attached
    producer.close()
    assert api.delete(f"{NS}/{name}")[0] == 204
    assert full(name) not in api.get(NS)[1]
    assert api.delete(f"{NS}/{name}")[0] == 404
    assert api.get(f"{NS}/{name}/stats")[0] == 404
    assert api.get(f"/admin/v2/persistent/public/nowhere/{name}/stats")[0] == 404


def test_partitioned_topics(api: Api, client: pulsar.Client, name: str) -> None:
    assert api.put(f"{NS}/{name}/partitions", 2)[0] == 204
    assert api.put(f"{NS}/{name}/partitions", 2)[0] == 409
    assert api.put(f"{NS}/{name}", None)[0] == 409
    assert api.put(f"{NS}/other-{name}/partitions", 0)[0] == 412
    assert api.get(f"{NS}/{name}/partitions") == (200, {"partitions": 2})
    assert api.post(f"{NS}/{name}/partitions", 4)[0] == 204
    assert api.post(f"{NS}/{name}/partitions", 3)[0] == 422
    assert api.get(f"{NS}/{name}/partitions") == (200, {"partitions": 4})
    assert full(name) in api.get(f"{NS}/partitioned")[1]
    assert {f"{full(name)}-partition-{i}" for i in range(4)} <= set(api.get(NS)[1])
    producer = client.create_producer(full(name), batching_enabled=False)
    for i in range(20):
        producer.send(b"x" * 10, partition_key=str(i))
    producer.close()
    consumer = client.subscribe(full(name), "sub", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    stats = api.ok("GET", f"{NS}/{name}/partitioned-stats?perPartition=true")
    assert stats["metadata"] == {"partitions": 4}
    assert stats["msgInCounter"] == 20
    assert stats["subscriptions"]["sub"]["msgBacklog"] + 5 >= 20
    assert len(stats["partitions"]) == 4
    assert api.get(f"{NS}/{name}/stats")[0] == 404  # as Pulsar: partitioned-stats instead
    assert api.get(f"{NS}/{name}/subscriptions") == (200, ["sub"])
    consumer.close()
    assert api.delete(f"{NS}/{name}/partitions")[0] == 204
    assert api.get(f"{NS}/{name}/partitions") == (200, {"partitions": 0})
    assert not [t for t in api.get(NS)[1] if t.startswith(full(name))]


def test_stats_field_names_and_rates(api: Api, client: pulsar.Client, name: str) -> None:
    topic = full(name)
    consumer = client.subscribe(topic, "s1", consumer_name="c1")
    producer = client.create_producer(topic, producer_name="p1")
    for _ in range(10):
        producer.send(b"y" * 100)
    for _ in range(4):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    stats = api.ok("GET", f"{NS}/{name}/stats")
    for key in ("msgRateIn", "msgRateOut", "msgThroughputIn", "msgThroughputOut", "msgInCounter",
                "bytesInCounter", "storageSize", "backlogSize", "publishers", "subscriptions",
                "averageMsgSize", "deduplicationStatus"):
        assert key in stats, key
    assert stats["msgInCounter"] == 10
    assert stats["storageSize"] > 1000
    assert stats["publishers"][0]["producerName"] == "p1"
    sub = stats["subscriptions"]["s1"]
    assert sub["type"] == "Exclusive"
    assert sub["consumers"][0]["consumerName"] == "c1"
    assert 6 <= sub["msgBacklog"] <= 10  # the client sends acks asynchronously
    # rates appear within a stats interval (1 s here) while producing
    def rate_seen() -> bool:
        producer.send(b"z" * 100)
        return api.ok("GET", f"{NS}/{name}/stats")["msgRateIn"] > 0
    wait_until(rate_seen, 20, "a non-zero msgRateIn")
    internal = api.ok("GET", f"{NS}/{name}/internalStats")
    assert internal["numberOfEntries"] >= 11
    assert internal["ledgers"] and "s1" in internal["cursors"]
    assert ":" in internal["cursors"]["s1"]["markDeletePosition"]
    producer.close()
    consumer.close()
    # the out counters outlive the consumer that received the messages (as Pulsar's do)
    after = api.ok("GET", f"{NS}/{name}/stats")
    assert after["subscriptions"]["s1"]["msgOutCounter"] >= 10
    assert after["msgOutCounter"] == after["subscriptions"]["s1"]["msgOutCounter"]
    assert after["bytesOutCounter"] >= 1000


def test_terminate_unload_last_message_id(api: Api, client: pulsar.Client, name: str) -> None:
    ids = produce(client, full(name), 3)
    last = api.ok("GET", f"{NS}/{name}/lastMessageId")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    producer = client.create_producer(full(name))
    assert api.put(f"{NS}/{name}/unload")[0] == 204
    after = producer.send(b"after unload")  # the client reconnects by itself
    producer.close()
    terminated = api.ok("POST", f"{NS}/{name}/terminate")
    assert (terminated["ledgerId"], terminated["entryId"]) == (after.ledger_id(), after.entry_id())
    try:
        client.create_producer(full(name))
        raise AssertionError("a terminated topic accepted a producer")
    except pulsar.TopicTerminated:
        pass
    assert api.ok("GET", f"{NS}/{name}/stats")["terminated"] is True


def test_subscription_operations(api: Api, client: pulsar.Client, name: str) -> None:
    topic = full(name)
    api.ok("PUT", f"{NS}/{name}")
    S = f"{NS}/{name}/subscription"
    assert api.put(f"{S}/early", {"ledgerId": -1, "entryId": -1})[0] == 204
    assert api.put(f"{S}/late")[0] == 204
    assert api.put(f"{S}/late")[0] == 409
    before = int(time.time() * 1000)
    ids = produce(client, topic, 10)
    assert api.get(f"{NS}/{name}/subscriptions") == (200, ["early", "late"])

    def backlog(sub: str) -> int:
        return api.ok("GET", f"{NS}/{name}/stats")["subscriptions"][sub]["msgBacklog"]

    assert backlog("early") == 10 and backlog("late") == 10
    # peek: the first unacknowledged message, with its headers
    status, payload, headers = api.response("GET", f"{S}/early/position/1")
    assert status == 200 and payload == b"m0"
    assert headers["X-Pulsar-Message-ID"] == f"{ids[0].ledger_id()}:{ids[0].entry_id()}"
    assert headers["X-Pulsar-PROPERTY-i"] == "0"
    assert api.response("GET", f"{S}/early/position/3")[1] == b"m2"
    assert api.response("GET", f"{S}/early/position/11")[0] == 404
    # skip, skip_all
    api.ok("POST", f"{S}/early/skip/3")
    assert backlog("early") == 7
    assert api.response("GET", f"{S}/early/position/1")[1] == b"m3"
    api.ok("POST", f"{S}/early/skip_all")
    assert backlog("early") == 0
    # reset by message id and by time
    api.ok("POST", f"{S}/early/resetcursor", {"ledgerId": ids[5].ledger_id(), "entryId": ids[5].entry_id()})
    assert backlog("early") == 5
    api.ok("POST", f"{S}/early/resetcursor/{before}")
    assert backlog("early") == 10
    consumer = client.subscribe(topic, "early")
    assert consumer.receive(timeout_millis=10000).data() == b"m0"
    # expiry: nothing is older than an hour; everything is older than 0 s
    api.ok("POST", f"{S}/late/expireMessages/3600")
    assert backlog("late") == 10
    api.ok("POST", f"{S}/late/expireMessages/0")
    assert backlog("late") == 0
    api.ok("POST", f"{NS}/{name}/all_subscription/expireMessages/0")
    assert backlog("early") == 0
    # delete: refused while a consumer is connected, unless forced
    assert api.delete(f"{S}/early")[0] == 412
    assert api.delete(f"{S}/early?force=true")[0] == 204
    assert api.delete(f"{S}/late")[0] == 204
    assert api.delete(f"{S}/late")[0] == 404
    assert api.get(f"{NS}/{name}/subscriptions") == (200, [])
    assert api.post(f"{S}/none/skip_all")[0] == 404
    assert api.post(f"{S}/none/skip/x")[0] in (400, 404)
    consumer.close()


def test_non_persistent_topics(api: Api, client: pulsar.Client, name: str) -> None:
    base = "/admin/v2/non-persistent/public/default"
    topic = f"non-persistent://public/default/{name}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"np")
    assert consumer.receive(timeout_millis=10000).data() == b"np"
    assert topic in api.get(base)[1]
    stats = api.ok("GET", f"{base}/{name}/stats")
    assert stats["msgInCounter"] == 1 and "s" in stats["subscriptions"]
    assert api.get(f"{base}/{name}/internalStats")[0] == 405
    producer.close()
    consumer.close()
    assert api.delete(f"{base}/{name}")[0] == 204


def test_peek_carries_properties_http_cannot_carry_as_they_are(
        api: Api, client: pulsar.Client, name: str) -> None:
    """A property key with markup or a space, a value with a line break: the peek answers a
    valid response (as browsers require), those parts percent-encoded, the others as sent."""
    producer = client.create_producer(full(name))
    api.ok("PUT", f"{NS}/{name}/subscription/s", {"ledgerId": -1, "entryId": -1})
    producer.send(b"x", properties={"<b>k</b>": "v", "plain": "<i>ok</i>",
                                    "two words": "a\r\nSet-Cookie: y"})
    status, payload, headers = api.response("GET", f"{NS}/{name}/subscription/s/position/1")
    assert status == 200 and payload == b"x"
    assert headers["X-Pulsar-PROPERTY-%3Cb%3Ek%3C%2Fb%3E"] == "v"
    assert headers["X-Pulsar-PROPERTY-plain"] == "<i>ok</i>"
    assert headers["X-Pulsar-PROPERTY-two%20words"] == "a%0D%0ASet-Cookie%3A y"
    assert "Set-Cookie" not in headers


def test_listing_pages_cover_the_list_once(api: Api, name: str) -> None:
    """?limit=N&after=NAME pages (each starting after the last name of the one before)
    hold every name of the whole list once, in order, partitions included; a topic
    created between two pages past the cursor is in a later one; bad limits are refused."""
    ns = f"public/pages-{name}"
    listing = f"/admin/v2/persistent/{ns}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    for i in range(7):
        api.ok("PUT", f"{listing}/t{i}")
    api.ok("PUT", f"{listing}/p/partitions", 3)
    whole = api.ok("GET", listing)
    assert len(whole) == 10 and whole == sorted(whole)
    pages: list[list[str]] = []
    after = ""
    while True:
        page = api.ok("GET", f"{listing}?limit=3" + (f"&after={after}" if after else ""))
        pages.append(page)
        if len(pages) == 2:  # past the cursor: listed later
            api.ok("PUT", f"{listing}/zz")
        if len(page) < 3:
            break
        after = page[-1]
    listed = [n for page in pages for n in page]
    assert listed == [*whole, f"persistent://{ns}/zz"]
    assert api.ok("GET", f"{listing}?after={whole[4]}") == [*whole[5:], f"persistent://{ns}/zz"]
    assert api.get(f"{listing}?limit=0")[0] == 412
    assert api.get(f"{listing}?limit=x")[0] == 412
