"""Against a broker set up as the official Python client's CI sets up Pulsar (``pulsar_ci``),
the behaviours that client's own suite relies on, each with the official client:
partition indexes in message ids, the CI's admin calls taking effect, an unknown
authentication method admitted as the anonymous role, and a reader's seek by publish time
after seeks by message id."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pulsar
import pytest

from tests.broker.brokerproc import SILENT, wait_until
from tests.security.pulsar_ci import BASIC_USERS, CiBroker


def tls_client(ci: CiBroker, auth: Any = None, **kw: Any) -> pulsar.Client:
    return pulsar.Client(ci.service_url_tls, authentication=auth,
                         tls_trust_certs_file_path=str(ci.ca_file),
                         operation_timeout_seconds=kw.pop("operation_timeout_seconds", 15),
                         logger=SILENT, **kw)


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- the CI's admin calls


def test_ci_admin_calls_took_effect(pulsar_ci: CiBroker) -> None:
    """``private/auth`` exists only through ``PUT`` with a Policies body whose
    ``auth_policies`` grants ``token-principal``: the grant is there and works."""
    status, perms = pulsar_ci.admin("GET", "/admin/v2/namespaces/private/auth/permissions")
    assert status == 200 and perms == {"token-principal": ["consume", "produce"]}
    status, policies = pulsar_ci.admin("GET", "/admin/v2/namespaces/private/auth")
    assert status == 200
    assert policies["auth_policies"]["namespace_auth"] == {"token-principal": ["consume", "produce"]}
    assert policies["replication_clusters"] == ["standalone"]
    topic = f"persistent://private/auth/{name('t')}"
    client = tls_client(pulsar_ci, pulsar.AuthenticationToken(pulsar_ci.token))
    try:
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"for token-principal")
        assert consumer.receive(timeout_millis=10000).data() == b"for token-principal"
    finally:
        client.close()
    anonymous = tls_client(pulsar_ci)
    try:
        with pytest.raises(pulsar.AuthorizationError):
            anonymous.create_producer(topic)
        # public/default: anonymous may produce and consume, as the CI granted
        topic = name("anon")
        consumer = anonymous.subscribe(topic, "s")
        anonymous.create_producer(topic).send(b"anyone")
        assert consumer.receive(timeout_millis=10000).data() == b"anyone"
    finally:
        anonymous.close()


def test_basic_and_tls_auth_as_the_ci_uses_them(pulsar_ci: CiBroker) -> None:
    user, password = next(iter(BASIC_USERS.items()))
    client = tls_client(pulsar_ci, pulsar.AuthenticationBasic(user, password))
    try:
        topic = f"persistent://private/auth/{name('basic')}"  # admin is a superuser
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"basic")
        assert consumer.receive(timeout_millis=10000).data() == b"basic"
    finally:
        client.close()


# ---------------------------------------------------------------- partition indexes


def test_message_ids_carry_the_partition_index(pulsar_ci: CiBroker) -> None:
    """A consumer of a partitioned topic, of one partition, and of several topics sees the
    partition index in ``message_id().partition()``, as Pulsar's broker fills it in."""
    base = f"persistent://public/default/{name('parted')}"
    status, answer = pulsar_ci.admin("PUT", f"/admin/v2/{base.replace('://', '/')}/partitions", 3)
    assert status == 204, answer
    client = tls_client(pulsar_ci)
    try:
        whole = client.subscribe(base, "whole")
        one = client.subscribe(f"{base}-partition-2", "one")
        multi = client.subscribe([f"{base}-partition-0", f"{base}-partition-1"], "multi")
        plain_topic = name("plain")
        plain = client.subscribe(plain_topic, "plain")
        producer = client.create_producer(base, batching_enabled=False,
                                          message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        sent = {}
        for i in range(9):
            mid = producer.send(b"%d" % i)
            sent[b"%d" % i] = mid.partition()
        assert sorted(sent.values()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
        client.create_producer(plain_topic).send(b"plain")

        for _ in range(9):
            msg = whole.receive(timeout_millis=10000)
            assert msg.message_id().partition() == sent[msg.data()]
            assert msg.topic_name().endswith(f"-partition-{sent[msg.data()]}")
            whole.acknowledge(msg)
        for _ in range(3):
            msg = one.receive(timeout_millis=10000)
            assert msg.message_id().partition() == 2 == sent[msg.data()]
        got = set()
        for _ in range(6):
            msg = multi.receive(timeout_millis=10000)
            assert msg.message_id().partition() == sent[msg.data()]
            got.add(msg.message_id().partition())
            multi.acknowledge(msg)
        assert got == {0, 1}
        # acknowledgements by those ids land: the subscriptions have no backlog left
        path = f"/admin/v2/{base.replace('://', '/')}/partitioned-stats"

        def backlog(sub: str) -> int:
            status, stats = pulsar_ci.admin("GET", path)
            assert status == 200, stats
            return int(stats["subscriptions"][sub]["msgBacklog"])

        wait_until(lambda: (backlog("whole"), backlog("multi"), backlog("one")) == (0, 0, 3), 10,
                   "the acknowledgements")
        assert plain.receive(timeout_millis=10000).message_id().partition() == -1

        # GetLastMessageId names the partition too (a reader of one partition asks it)
        reader = client.create_reader(f"{base}-partition-1", pulsar.MessageId.earliest)
        assert reader.has_message_available()
        last = reader.read_next(timeout_millis=10000)
        assert last.message_id().partition() == 1
        # ...and a seek by such an id lands where it says
        one.seek(pulsar.MessageId.earliest)
        first = one.receive(timeout_millis=10000)
        assert first.message_id().partition() == 2
    finally:
        client.close()


# ---------------------------------------------------------------- unknown auth method


def test_unknown_auth_method_connects_as_the_anonymous_role(pulsar_ci: CiBroker) -> None:
    """Athenz is a method this broker has no provider for: with ``anonymousUserRole`` set
    the client connects as that role, and authorization decides at once (no waiting out
    the operation timeout)."""
    athenz = pulsar.AuthenticationAthenz(
        '{"tenantDomain": "t", "tenantService": "s", "providerDomain": "p", '
        '"privateKey": "file:///nonexistent", "ztsUrl": "http://127.0.0.1:1"}')
    client = tls_client(pulsar_ci, athenz, operation_timeout_seconds=30)
    try:
        started = time.monotonic()
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(f"persistent://private/auth/{name('athenz')}")
        assert time.monotonic() - started < 15  # answered, not timed out
        topic = name("athenz-anon")  # public/default: the anonymous role may produce
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"as anonymous")
        assert consumer.receive(timeout_millis=10000).data() == b"as anonymous"
    finally:
        client.close()


def test_http_request_without_accepted_credentials_is_the_anonymous_role(
        pulsar_ci: CiBroker) -> None:
    """Over HTTP too, as Pulsar's web service decides: an unknown scheme or credentials no
    provider accepts get ``anonymousUserRole`` (authorization then decides: 200 where the
    anonymous role administers, 403 elsewhere, never 401); a request that names its method
    in ``X-Pulsar-Auth-Method-Name`` must authenticate with it (401)."""
    public = "/admin/v2/namespaces/public/default/permissions"
    private = "/admin/v2/namespaces/private/auth/permissions"
    for auth in ("Athenz t.s:signature", "Bearer not-a-jwt", "Negotiate abc"):
        assert pulsar_ci.admin("GET", public, headers={"Authorization": auth})[0] == 200, auth
        assert pulsar_ci.admin("GET", private, headers={"Authorization": auth})[0] == 403, auth
    named = {"Authorization": "Bearer not-a-jwt", "X-Pulsar-Auth-Method-Name": "token"}
    assert pulsar_ci.admin("GET", public, headers=named)[0] == 401
    unknown = {"X-Pulsar-Auth-Method-Name": "athenz"}
    assert pulsar_ci.admin("GET", public, headers=unknown)[0] == 401
    good = {"Authorization": f"Bearer {pulsar_ci.admin_token}", "X-Pulsar-Auth-Method-Name": "token"}
    assert pulsar_ci.admin("GET", private, headers=good)[0] == 200


def test_seek_by_publish_time_after_seeks_by_id(pulsar_ci: CiBroker) -> None:
    """The sequence of the official suite's reader seek test: 100 unbatched messages sent
    20 ms apart, a reader at latest; seeks by id, then by the publish time of m79."""
    topic = name("seek-time")
    client = tls_client(pulsar_ci)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.latest)
        producer = client.create_producer(topic, batching_enabled=False)
        ids = []
        for i in range(100):
            ids.append(producer.send(b"m%d" % i))
            time.sleep(0.02)  # the suite's spacing: publish times 20 ms apart (not a sync)
        reader.seek(pulsar.MessageId.earliest)
        assert reader.read_next(timeout_millis=10000).data() == b"m0"
        assert reader.read_next(timeout_millis=10000).data() == b"m1"
        reader.seek(ids[33])
        assert reader.read_next(timeout_millis=10000).data() == b"m34"
        assert reader.read_next(timeout_millis=10000).data() == b"m35"
        reader.seek(pulsar.MessageId(-1, ids[44].ledger_id(), ids[44].entry_id(), -1))
        assert reader.read_next(timeout_millis=10000).data() == b"m45"
        # the publish time of m79, as the broker stamped it
        peek = client.create_reader(topic, ids[79], start_message_id_inclusive=True)
        m79 = peek.read_next(timeout_millis=10000)
        assert m79.data() == b"m79"
        peek.close()
        reader.seek(m79.publish_timestamp())
        assert reader.read_next(timeout_millis=10000).data() == b"m79"
        assert reader.read_next(timeout_millis=10000).data() == b"m80"
    finally:
        client.close()
