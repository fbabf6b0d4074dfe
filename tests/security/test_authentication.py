"""Authentication on the binary port with the official client and our own, over TCP.

Tokens (HS256 from a secret key, RS256 and ES256 from key pairs, audience), given to the
official client as a string, a ``file:`` reference and a supplier function; basic auth with
htpasswd-style hashes; expiring tokens refreshed through AuthChallenge; the proxy fields.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar import sync
from magnetar.broker.security.auth.passwords import md5_crypt
from magnetar.cli.tokens import create_token
from magnetar.client import AuthenticationBasic, AuthenticationToken
from tests.broker.brokerproc import SILENT, wait_until
from tests.broker.conftest import QUIET, ThreadedBroker
from tests.broker.rawclient import RawClient

from .conftest import file_url, token_settings


def new_topic() -> str:
    return f"persistent://public/default/sec-{uuid.uuid4().hex[:10]}"


def round_trip(url: str, auth: Any, **client_args: Any) -> None:
    """Produce and consume one message with the official client and ``auth``."""
    client = pulsar.Client(url, authentication=auth, operation_timeout_seconds=10,
                           logger=QUIET, **client_args)
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"hello")
        assert consumer.receive(timeout_millis=10000).data() == b"hello"
    finally:
        client.close()


def refused(url: str, auth: Any, **client_args: Any) -> None:
    """The official client cannot create a producer with ``auth``."""
    # (the official client retries a refused Connect until its operation timeout)
    client = pulsar.Client(url, authentication=auth, operation_timeout_seconds=2,
                           logger=SILENT, **client_args)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(new_topic())
    finally:
        client.close()


def hmac_token(key: bytes, claims: dict[str, Any]) -> str:
    """An HS256 JWT signed with arbitrary bytes (pyjwt refuses to sign with public keys)."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(mac)}"


def secret(keys: dict[str, Path], name: str = "secret") -> str:
    return file_url(keys[name])


# ---------------------------------------------------------------------- tokens


def test_token_string_file_and_supplier(make_broker: Any, keys: dict[str, Path],
                                        tmp_path: Path) -> None:
    broker = make_broker(**token_settings(keys))
    token = create_token("alice", secret_key=secret(keys))
    round_trip(broker.url, pulsar.AuthenticationToken(token))
    token_file = tmp_path / "token.txt"
    token_file.write_text(token + "\n")
    round_trip(broker.url, pulsar.Authentication("token", f"file://{token_file}"))
    calls: list[int] = []

    def supplier() -> str:
        calls.append(1)
        return token

    round_trip(broker.url, pulsar.AuthenticationToken(supplier))
    assert calls
    assert broker.service.security.authentication.refused == 0


def test_token_refusals(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys))
    auth = broker.service.security.authentication
    refused(broker.url, None)  # no credentials, no anonymous role
    refused(broker.url, pulsar.AuthenticationToken(
        create_token("eve", secret_key=secret(keys, "other-secret"))))  # wrong key
    refused(broker.url, pulsar.AuthenticationToken(
        create_token("eve", secret_key=secret(keys), expiry_seconds=-60)))  # expired
    refused(broker.url, pulsar.AuthenticationToken("not-a-jwt"))
    assert auth.refused >= 4
    round_trip(broker.url, pulsar.AuthenticationToken(create_token("ok", secret_key=secret(keys))))


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_token_key_pair_and_audience(make_broker: Any, keys: dict[str, Path], alg: str) -> None:
    broker = make_broker(**token_settings(
        keys, tokenSecretKey="", tokenPublicKey=file_url(keys[f"{alg}-public"]),
        tokenAudience="magnetar-test", tokenAuthClaim="role"))
    private = file_url(keys[f"{alg}-private"])
    good = create_token("x", private_key=private,
                        claims={"aud": ["other", "magnetar-test"], "role": "bob"})
    round_trip(broker.url, pulsar.AuthenticationToken(good))
    refused(broker.url, pulsar.AuthenticationToken(
        create_token("x", private_key=private, claims={"aud": "other", "role": "bob"})))
    refused(broker.url, pulsar.AuthenticationToken(  # no role claim
        create_token("x", private_key=private, claims={"aud": "magnetar-test"})))
    # an HMAC token "signed" with the public key's bytes must not pass (algorithm confusion)
    refused(broker.url, pulsar.AuthenticationToken(hmac_token(
        keys[f"{alg}-public"].read_bytes(), {"aud": "magnetar-test", "role": "bob"})))


def test_our_client_with_token(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys))
    token = create_token("alice", secret_key=secret(keys))
    client = sync.Client(broker.url, authentication=AuthenticationToken(token))
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"ours")
        assert consumer.receive(timeout_millis=10000).data() == b"ours"
    finally:
        client.close()
    bad = sync.Client(broker.url, authentication=AuthenticationToken("nope"),
                      operation_timeout_seconds=5)
    try:
        with pytest.raises(Exception):  # noqa: B017 - our client's connect error
            bad.create_producer(new_topic())
    finally:
        bad.close()


def test_anonymous_role(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, anonymousUserRole="guest"))
    round_trip(broker.url, None)
    with RawClient.for_url(broker.url) as raw:
        raw.connect()
        wait_until(lambda: any(c.principal == "guest" for c in list(broker.service.connections)),
                   10, "the anonymous connection")


# ---------------------------------------------------------------------- expiry and refresh


def test_expiring_token_is_refreshed_through_auth_challenge(
        make_broker: Any, keys: dict[str, Path]) -> None:
    # a challenge goes out one check interval before expiry: 2 s for the client to answer
    broker = make_broker(**token_settings(keys, authenticationRefreshCheckSeconds=2))
    auth = broker.service.security.authentication

    def supplier() -> str:  # each answer to a challenge gets a fresh short-lived token
        return create_token("refresher", secret_key=secret(keys), expiry_seconds=5)

    client = pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(supplier),
                           operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        wait_until(lambda: auth.refreshed >= 2, 40, "two credential refreshes")
        producer.send(b"after refreshes")
        assert consumer.receive(timeout_millis=10000).data() == b"after refreshes"
        assert auth.refused == 0
    finally:
        client.close()


def test_expired_token_not_refreshed_closes_connection(
        make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, authenticationRefreshCheckSeconds=1))
    auth = broker.service.security.authentication
    token = create_token("shortlived", secret_key=secret(keys), expiry_seconds=2)
    client = pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(token),
                           operation_timeout_seconds=5,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(new_topic(), send_timeout_millis=3000)
        # the client answers the challenge with the same token, which then expires
        wait_until(lambda: auth.refused >= 1, 30, "the expired connection to be refused")
        wait_until(lambda: not any(c.principal == "shortlived"
                                   for c in list(broker.service.connections)),
                   30, "no connection left for the expired role")
        with pytest.raises(pulsar.PulsarException):
            producer.send(b"too late")
    finally:
        client.close()


def test_raw_client_without_refresh_support_is_closed_at_expiry(
        make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, authenticationRefreshCheckSeconds=1))
    token = create_token("raw", secret_key=secret(keys), expiry_seconds=2)
    with RawClient.for_url(broker.url, timeout=30) as raw:
        raw.connect(auth_method_name="token", auth_data=token.encode())
        start = time.monotonic()
        assert raw.wait_closed(30)
        assert time.monotonic() - start < 30


# ---------------------------------------------------------------------- basic


def basic_settings(tmp_path: Path, users: dict[str, str]) -> dict[str, Any]:
    conf = tmp_path / "passwd"
    conf.write_text("# users\n" + "".join(f"{u}:{h}\n" for u, h in users.items()))
    return {
        "authenticationEnabled": True,
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
        "basicAuthConf": str(conf),
    }


def test_basic_auth(make_broker: Any, tmp_path: Path) -> None:
    import bcrypt

    users = {
        "apr": md5_crypt(b"apr-pass", "s4ltS4lt", "$apr1$"),
        "md5": md5_crypt(b"md5-pass", "x1y2", "$1$"),
        "bc": bcrypt.hashpw(b"bc-pass", bcrypt.gensalt(rounds=4)).decode(),
    }
    broker = make_broker(**basic_settings(tmp_path, users))
    for user in users:
        round_trip(broker.url, pulsar.AuthenticationBasic(user, f"{user}-pass"))
    refused(broker.url, pulsar.AuthenticationBasic("apr", "wrong"))
    refused(broker.url, pulsar.AuthenticationBasic("bc", "wrong"))
    refused(broker.url, pulsar.AuthenticationBasic("nobody", "x"))
    client = sync.Client(broker.url, authentication=AuthenticationBasic("apr", "apr-pass"))
    try:
        client.create_producer(new_topic()).send(b"ours")
    finally:
        client.close()


def test_basic_auth_conf_as_data_url(make_broker: Any) -> None:
    import base64

    text = f"carol:{md5_crypt(b'pw', 'abc', '$apr1$')}\n".encode()
    broker = make_broker(
        authenticationEnabled=True,
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
        basicAuthConf="data:;base64," + base64.b64encode(text).decode())
    round_trip(broker.url, pulsar.AuthenticationBasic("carol", "pw"))


# ---------------------------------------------------------------------- proxies


def test_original_principal_only_from_proxy_roles(make_broker: Any, keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, proxyRoles="proxy"))
    proxy = create_token("proxy", secret_key=secret(keys)).encode()
    user = create_token("user", secret_key=secret(keys)).encode()
    with RawClient.for_url(broker.url) as raw:  # a client may not claim to speak for another
        raw.send("CONNECT", client_version="raw", protocol_version=21, auth_method_name="token",
                 auth_data=user, original_principal="admin")
        frame = raw.read()
        assert frame is not None and frame.command.type == pb_error()
        assert raw.wait_closed(10)
    with RawClient.for_url(broker.url) as raw:  # a proxy must say whom it speaks for
        raw.send("CONNECT", client_version="raw", protocol_version=21, auth_method_name="token",
                 auth_data=proxy)
        assert raw.wait_closed(10)
    with RawClient.for_url(broker.url) as raw:
        raw.connect(auth_method_name="token", auth_data=proxy, original_principal="user")
        wait_until(lambda: any(c.principal == "user" and c.identity.role == "proxy"
                               for c in list(broker.service.connections)), 10, "proxied connection")


def pb_error() -> int:
    from magnetar.protocol import pb

    return pb.BaseCommand.ERROR


def broker_of(b: ThreadedBroker) -> Any:
    return b.service


# ---------------------------------------------------------------------- every refusal answered


def _refused_connect(url: str, code: int, **connect: Any) -> str:
    """Send a Connect; the broker must answer it with an Error (request id -1, ``code``)
    at once, then close: never leave it unanswered. Returns the Error's message."""
    from magnetar.protocol import pb

    with RawClient.for_url(url, timeout=5) as raw:
        raw.send("CONNECT", client_version="raw", protocol_version=21, **connect)
        error = raw.expect(pb.BaseCommand.ERROR, timeout=5).error
        assert (error.request_id, error.error) == ((1 << 64) - 1, code), error
        assert raw.wait_closed(5)
        return str(error.message)


def test_every_connect_refusal_is_answered_at_once(make_broker: Any, keys: dict[str, Path]) -> None:
    from magnetar.protocol import pb

    broker = make_broker(**token_settings(keys, proxyRoles="proxy"))
    user = create_token("user", secret_key=secret(keys)).encode()
    proxy = create_token("proxy", secret_key=secret(keys)).encode()
    bad = create_token("user", secret_key=secret(keys, "other-secret")).encode()
    refusals = {
        "no credentials, no anonymous role": {},
        "an unknown method, no anonymous role": {"auth_method_name": "athenz"},
        "a token signed with another key": {"auth_method_name": "token", "auth_data": bad},
        "not a token": {"auth_method_name": "token", "auth_data": b"junk"},
        "a client speaking for another": {"auth_method_name": "token", "auth_data": user,
                                          "original_principal": "admin"},
        "a proxy that does not say for whom": {"auth_method_name": "token", "auth_data": proxy},
    }
    for what, fields in refusals.items():
        message = _refused_connect(broker.url, pb.AuthenticationError, **fields)
        assert message, what
    # a second Connect on a connection: answered, then the connection closes
    with RawClient.for_url(broker.url, timeout=5) as raw:
        raw.connect(auth_method_name="token", auth_data=user)
        raw.send("CONNECT", client_version="raw", protocol_version=21)
        error = raw.expect(pb.BaseCommand.ERROR, timeout=5).error
        assert error.error == pb.NotAllowedError and "second Connect" in error.message
        assert raw.wait_closed(5)
    # past a connection limit: refused before any Connect, with an Error saying why
    limited = make_broker(brokerMaxConnections=1)
    with RawClient.for_url(limited.url) as held:
        held.connect()
        assert "brokerMaxConnections" in _refused_connect(limited.url, pb.NotAllowedError)


def test_unknown_method_with_anonymous_role_is_anonymous(make_broker: Any,
                                                         keys: dict[str, Path]) -> None:
    """As Pulsar does: the unknown method connects as ``anonymousUserRole``; authorization
    refuses what that role is not granted, as an answer to the request."""
    from magnetar.protocol import pb

    broker = make_broker(**token_settings(keys, anonymousUserRole="guest",
                                          authorizationEnabled=True))
    with RawClient.for_url(broker.url) as raw:
        raw.connect(auth_method_name="athenz", auth_data=b"whatever")
        answer = raw.create_producer(new_topic())
        assert answer.type == pb.BaseCommand.ERROR
        assert answer.error.error == pb.AuthorizationError
    # credentials a provider refuses are refused, anonymous role or not
    _refused_connect(broker.url, pb.AuthenticationError, auth_method_name="token",
                     auth_data=b"junk")
