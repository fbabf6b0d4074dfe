"""Transactions on a broker listening on TLS only (``brokerServicePort=-1``): a commit
completes and shows its messages. Its topic and subscription, served here, are told
in-process; a topic another broker serves would be told over that broker's TLS port (the
broker-to-broker connection trusting ``tlsTrustCertsFilePath`` when no
``brokerClientTrustCertsFilePath`` is set)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import magnetar
from magnetar.broker.config import BrokerConfig
from magnetar.client.errors import Timeout
from tests.broker.conftest import ThreadedBroker
from tests.client.conftest import run
from tests.security.pki import Pki

from .test_tls import tls_settings, tls_url


@pytest.fixture
def tls_only(tmp_path: Path, pki: Pki) -> Iterator[ThreadedBroker]:
    broker = ThreadedBroker(tmp_path / "data")
    broker.config = BrokerConfig.load(None, magnetarDataDir=str(tmp_path / "data"),
                                      brokerServicePort=-1, bindAddress="127.0.0.1",
                                      **tls_settings(pki))
    broker.start()
    yield broker
    broker.stop()


def test_commit_on_a_tls_only_broker(tls_only: ThreadedBroker, pki: Pki) -> None:
    broker = tls_only
    url = tls_url(broker)
    topic = f"persistent://public/default/txn-tls-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with magnetar.Client(url, tls_trust_certs_file_path=str(pki.ca_file),
                                   enable_transaction=True,
                                   operation_timeout_seconds=30) as client:
            consumer = await client.subscribe(
                topic, "s", initial_position=magnetar.InitialPosition.Earliest)
            producer = await client.create_producer(topic)
            await producer.send(b"plain")
            plain = await consumer.receive(30_000)
            txn = await client.new_transaction(timeout_ms=120_000)
            await producer.send(b"in-txn", txn=txn)
            await consumer.acknowledge(plain, txn=txn)
            await txn.commit()
            assert txn.state == "COMMITTED"
            assert (await consumer.receive(30_000)).data() == b"in-txn"
            await consumer.redeliver_unacknowledged_messages()
            again = await consumer.receive(30_000)  # in-txn (unacked); plain stays acked
            assert again.data() == b"in-txn"
            try:
                extra = await consumer.receive(1_000)
            except Timeout:
                extra = None
            assert extra is None, extra.data()

    run(go, timeout=120)
