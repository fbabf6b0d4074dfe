"""Who may add to and end a transaction, with token authentication and authorization on:
the role that opened it (its record's owner) and superusers; another role's
AddPartitionToTxn, AddSubscriptionToTxn and EndTxn answer ``TransactionNotFound`` (Pulsar's
answer) and change nothing; EndTxnOnPartition and EndTxnOnSubscription (brokers telling
participants) are refused the same way to a role that is not a superuser."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import magnetar
from magnetar.cli.tokens import create_token
from magnetar.client.errors import TransactionNotFound
from magnetar.protocol import pb
from tests.broker.rawclient import RawClient
from tests.client.conftest import run

from .conftest import file_url, token_settings
from .test_authentication import new_topic

NS = "public/default"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def test_only_the_owner_or_a_superuser_adds_to_and_ends_a_transaction(
        make_broker: Any, keys: dict[str, Path]) -> None:
    # the broker tells a transaction's topics its end as a superuser (brokerClient*)
    broker = make_broker(**token_settings(
        keys, authorizationEnabled=True, superUserRoles="admin",
        brokerClientAuthenticationPlugin=TOKEN_PLUGIN,
        brokerClientAuthenticationParameters="token:" + create_token(
            "admin", secret_key=file_url(keys["secret"]))))
    authz = broker.service.security.authorization
    for role in ("alice", "bob"):
        broker.call(authz.grant_namespace, NS, role, ["produce", "consume"])
        # as in Pulsar (#18716), looking up the coordinators needs a grant on pulsar/system
        broker.call(authz.grant_namespace, "pulsar/system", role, ["consume"])
    topic = new_topic()

    def client(role: str) -> magnetar.Client:
        token = create_token(role, secret_key=file_url(keys["secret"]))
        return magnetar.Client(broker.url, authentication=magnetar.AuthenticationToken(token),
                               enable_transaction=True, operation_timeout_seconds=10)

    def raw_participant_command(kind: str, fields: dict[str, Any],
                                txn_id: tuple[int, int]) -> Any:
        """Bob's EndTxnOnPartition/Subscription (COMMIT), sent as raw frames; the answer."""
        with RawClient.for_url(broker.url) as raw:
            raw.connect(auth_method_name="token", auth_data=create_token(
                "bob", secret_key=file_url(keys["secret"])).encode())
            raw.send(kind, request_id=7, txnid_most_bits=txn_id[0],
                     txnid_least_bits=txn_id[1], txn_action=pb.COMMIT, **fields)
            reply = raw.read_reply()
            return (reply.endTxnOnPartitionResponse if kind == "END_TXN_ON_PARTITION"
                    else reply.endTxnOnSubscriptionResponse)

    def owner_of(txn_id: tuple[int, int]) -> str:
        coordinator = broker.service.transactions.coordinators[txn_id[0]]
        return str(coordinator.txns[txn_id[1]].owner)

    async def go() -> None:
        async with client("alice") as alice, client("bob") as bob, client("admin") as admin:
            watcher = await admin.subscribe(
                topic, "watch", initial_position=magnetar.InitialPosition.Earliest)
            await (await alice.create_producer(topic)).send(b"plain")
            plain = await watcher.receive(10_000)
            await watcher.acknowledge(plain)
            bob_consumer = await bob.subscribe(
                topic, "bob", initial_position=magnetar.InitialPosition.Earliest)
            bobs_msg = await bob_consumer.receive(10_000)

            txn = await alice.new_transaction(timeout_ms=120_000)
            assert broker.call(owner_of, txn.id) == "alice"
            await (await alice.create_producer(topic)).send(b"alice's", txn=txn)
            theirs = bob.transaction(*txn.id)
            refused = "role bob is neither the owner of transaction"
            with pytest.raises(TransactionNotFound, match=refused):  # EndTxn
                await theirs.commit()
            with pytest.raises(TransactionNotFound, match=refused):
                await bob.transaction(*txn.id).abort()
            with pytest.raises(TransactionNotFound, match=refused):  # AddPartitionToTxn
                await (await bob.create_producer(topic)).send(b"bob's", txn=bob.transaction(*txn.id))
            with pytest.raises(TransactionNotFound, match=refused):  # AddSubscriptionToTxn
                await bob_consumer.acknowledge(bobs_msg, txn=bob.transaction(*txn.id))
            assert broker.call(lambda: broker.service.transactions.coordinators[txn.id[0]]
                               .txns[txn.id[1]].state) == "OPEN"
            # EndTxnOnPartition / EndTxnOnSubscription are the brokers' (superusers')
            for kind, fields in (
                    ("END_TXN_ON_PARTITION", {"topic": topic}),
                    ("END_TXN_ON_SUBSCRIPTION",
                     {"subscription": pb.Subscription(topic=topic, subscription="bob")})):
                reply = await asyncio.to_thread(raw_participant_command, kind, fields, txn.id)
                assert reply.error == pb.TransactionNotFound, reply
                assert "is not a superuser" in reply.message
            # a superuser may end anyone's transaction
            await admin.transaction(*txn.id).commit()
            assert (await watcher.receive(10_000)).data() == b"alice's"
            # the owner ends its own
            own = await alice.new_transaction(timeout_ms=120_000)
            await own.abort()
            assert own.state == "ABORTED"

    run(go)
