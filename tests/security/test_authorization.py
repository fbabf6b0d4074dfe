"""Authorization: produce/consume/lookup permissions per namespace and topic, superusers,
proxies; refusals are AuthorizationError for the official client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.cli.tokens import create_token
from magnetar.protocol import pb
from tests.broker.brokerproc import SILENT
from tests.broker.conftest import ThreadedBroker
from tests.broker.rawclient import RawClient
from tests.security.pki import Pki

from .conftest import file_url, token_settings
from .test_authentication import new_topic
from .test_tls import TLS_PROVIDER, tls_settings, tls_url

T = pb.BaseCommand
NS = "public/default"


def authz_broker(make_broker: Any, keys: dict[str, Path], **extra: Any) -> ThreadedBroker:
    return make_broker(**token_settings(keys, authorizationEnabled=True, superUserRoles="admin",
                                        **extra))


def client_for(broker: ThreadedBroker, keys: dict[str, Path], role: str) -> pulsar.Client:
    token = create_token(role, secret_key=file_url(keys["secret"]))
    return pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(token),
                         operation_timeout_seconds=5, logger=SILENT)


def test_permissions_grant_revoke(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = authz_broker(make_broker, keys)
    authz = broker.service.security.authorization
    topic, other = new_topic(), new_topic()
    alice = client_for(broker, keys, "alice")
    admin = client_for(broker, keys, "admin")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            alice.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            alice.subscribe(topic, "s")
        broker.call(authz.grant_namespace, NS, "alice", ["consume"])
        consumer = alice.subscribe(topic, "s")
        with pytest.raises(pulsar.AuthorizationError):
            alice.create_producer(topic)
        broker.call(authz.grant_topic, topic, "alice", ["produce"])
        alice.create_producer(topic).send(b"granted")
        assert consumer.receive(timeout_millis=10000).data() == b"granted"
        with pytest.raises(pulsar.AuthorizationError):  # the grant was for one topic only
            alice.create_producer(other)
        assert broker.call(authz.topic_permissions, topic) == {"alice": ["consume", "produce"]}
        assert broker.call(authz.namespace_permissions, NS) == {"alice": ["consume"]}
        broker.call(authz.revoke_topic, topic, "alice")
        with pytest.raises(pulsar.AuthorizationError):
            alice.create_producer(topic)
        broker.call(authz.revoke_namespace, NS, "alice")
        with pytest.raises(pulsar.AuthorizationError):
            alice.subscribe(topic, "s2")
        # listing the namespace's topics needs some permission on it
        with RawClient.for_url(broker.url) as raw:
            raw.connect(auth_method_name="token", auth_data=create_token(
                "alice", secret_key=file_url(keys["secret"])).encode())
            raw.send("GET_TOPICS_OF_NAMESPACE", namespace=NS, request_id=3)
            reply = raw.read_reply()
            assert reply.type == T.ERROR and reply.error.error == pb.AuthorizationError
        # the superuser needs no grant
        admin.create_producer(other).send(b"admin")
        admin.subscribe(other, "s")
    finally:
        alice.close()
        admin.close()
    stored = broker.call(broker.service.metadata.get, f"permissions/{NS}")
    assert stored == {"namespace": {}, "topics": {}}


def test_partition_inherits_partitioned_topic_grant(make_broker: Any,
                                                     keys: dict[str, Path]) -> None:
    broker = authz_broker(make_broker, keys)
    authz = broker.service.security.authorization
    topic = new_topic()
    broker.call(broker.service.create_partitioned_topic, topic, 2)
    broker.call(authz.grant_topic, topic, "bob", ["produce", "consume"])
    bob = client_for(broker, keys, "bob")
    try:
        consumer = bob.subscribe(topic, "s")
        bob.create_producer(topic).send(b"part")
        assert consumer.receive(timeout_millis=10000).data() == b"part"
    finally:
        bob.close()


def test_unknown_action_is_refused(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = authz_broker(make_broker, keys)
    with pytest.raises(ValueError, match="unknown actions"):
        broker.call(broker.service.security.authorization.grant_namespace, NS, "x", ["delete"])


def test_proxy_needs_both_roles_authorized(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = authz_broker(make_broker, keys, proxyRoles="proxy")
    authz = broker.service.security.authorization
    topic = new_topic()
    proxy_token = create_token("proxy", secret_key=file_url(keys["secret"])).encode()
    broker.call(authz.grant_namespace, NS, "carol", ["produce"])

    def lookup() -> pb.CommandLookupTopicResponse:
        with RawClient.for_url(broker.url) as raw:
            raw.connect(auth_method_name="token", auth_data=proxy_token,
                        original_principal="carol")
            raw.send("LOOKUP", topic=topic, request_id=7)
            return raw.expect(T.LOOKUP_RESPONSE).lookupTopicResponse

    resp = lookup()  # the proxy role itself has no permission
    assert resp.response == pb.CommandLookupTopicResponse.Failed
    assert resp.error == pb.AuthorizationError
    broker.call(authz.grant_namespace, NS, "proxy", ["produce", "consume"])
    assert lookup().response == pb.CommandLookupTopicResponse.Connect
    broker.call(authz.revoke_namespace, NS, "carol")
    assert lookup().error == pb.AuthorizationError


def test_tls_certificate_role_is_authorized(make_broker: Any, pki: Pki) -> None:
    broker = make_broker(**tls_settings(
        pki, tlsRequireTrustedClientCertOnConnect=True, authenticationEnabled=True,
        authenticationProviders=TLS_PROVIDER, authorizationEnabled=True))
    topic = new_topic()
    cert, key = pki.issue("dave")
    client = pulsar.Client(tls_url(broker), authentication=pulsar.AuthenticationTLS(str(cert), str(key)),
                           tls_trust_certs_file_path=str(pki.ca_file), operation_timeout_seconds=5,
                           logger=SILENT)
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        broker.call(broker.service.security.authorization.grant_topic, topic, "dave", ["produce"])
        client.create_producer(topic).send(b"dave")
    finally:
        client.close()
