"""The transaction participants' admin paths (``/admin/v3/transactions/
transactionBufferStats``, ``pendingAckStats``, ``transactionInBufferStats``,
``transactionInPendingAckStats``) asked of the broker that does not serve the topic: a 307
to the owner's web service, as the v2 topic paths answer, and the owner's stats once
followed."""

from __future__ import annotations

import urllib.parse

import magnetar
from tests.client.conftest import run
from tests.cluster.brokers import Cluster, http_call, owner_port


def test_participant_stats_redirect_to_the_topic_owner(cluster: Cluster) -> None:
    # whichever broker owns the topic's bundle (the shared cluster's earlier tests may have
    # left every bundle of the namespace on one of them): ``a`` owns it, ``b`` does not
    topic = "persistent://public/default/txn-admin-0-partition-0"  # no partitions of its own
    owner = owner_port(cluster, topic)
    a, b = sorted(cluster.brokers, key=lambda broker: broker.port != owner)
    assert a.port == owner
    name = topic.removeprefix("persistent://")

    async def open_txn() -> tuple[int, int]:
        async with magnetar.Client(a.url, enable_transaction=True,
                                   operation_timeout_seconds=60) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            await producer.send(b"plain")
            txn = await client.new_transaction(timeout_ms=300_000)
            await producer.send(b"in-txn", txn=txn)
            await consumer.acknowledge(await consumer.receive(30_000), txn=txn)
            return txn.id

    most, least = run(open_txn, timeout=120)
    paths = {
        "transactionBufferStats": f"/transactionBufferStats/{name}",
        "pendingAckStats": f"/pendingAckStats/{name}/s",
        "transactionInBufferStats": f"/transactionInBufferStats/{name}/{most}/{least}",
        "transactionInPendingAckStats":
            f"/transactionInPendingAckStats/{name}/s/{most}/{least}",
    }
    answers = {}
    for what, path in paths.items():
        url = f"{b.web_url}/admin/v3/transactions{path}"
        status, body, location = http_call("GET", url, follow_redirects=False)
        assert status == 307, (what, status, body)
        target = urllib.parse.urlsplit(location)
        assert f"{target.scheme}://{target.netloc}" == a.web_url, (what, location)
        assert target.path == f"/admin/v3/transactions{path}"
        status, answers[what], _ = http_call("GET", url)  # followed: the owner answers
        assert status == 200, (what, answers[what])
        owner_status, owner_body, _ = http_call("GET", f"{a.web_url}/admin/v3/transactions{path}")
        assert (owner_status, owner_body) == (200, answers[what])
    assert answers["transactionBufferStats"]["ongoingTxnSize"] == 1
    assert answers["pendingAckStats"]["ongoingTxnSize"] == 1
    assert answers["transactionInBufferStats"]["startPosition"] is not None
    assert len(answers["transactionInPendingAckStats"]["individualAckPositions"]) == 1
