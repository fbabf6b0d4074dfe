"""Replication to a remote that requires TLS and authentication: cluster A (no security
of its own) reaches B over ``pulsar+ssl://`` (and its admin API over ``https://``, to
create a partitioned topic there) with its ``brokerClient*`` keys (TLS trusting B's CA, a
token read from a file), or with everything in B's cluster record (a client certificate
as the credentials). With wrong credentials each replicator reports ``connected: false``
and logs the cause once; with the credentials fixed it resumes and B gets every message."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.cli.tokens import create_secret_key, create_token
from tests.broker.brokerproc import SILENT, BrokerProcess, free_port, wait_until
from tests.security.pki import Pki

pytestmark = pytest.mark.slow

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


def _admin(broker: BrokerProcess, method: str, path: str, body: object | None = None,
           token: str | None = None) -> object:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{broker.http_port}{path}", data=data,
                                     method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def _replicated_namespace(a: BrokerProcess, b: BrokerProcess, b_token: str) -> None:
    """geo/ns in both clusters (B asks for ``b_token``), replicated to A and B from A."""
    for broker, token in ((a, None), (b, b_token)):
        _admin(broker, "PUT", "/admin/v2/tenants/geo",
               {"adminRoles": [], "allowedClusters": ["A", "B"]}, token)
        _admin(broker, "PUT", "/admin/v2/namespaces/geo/ns", None, token)
    _admin(a, "POST", "/admin/v2/namespaces/geo/ns/replication", ["A", "B"])


def _clients(a: BrokerProcess, b_tls_port: int, b_token: str, pki: Pki
             ) -> tuple[pulsar.Client, pulsar.Client]:
    """A plain client of A; one of B over TLS with ``b_token``."""
    return (pulsar.Client(a.url, logger=SILENT, operation_timeout_seconds=30),
            pulsar.Client(f"pulsar+ssl://localhost:{b_tls_port}", logger=SILENT,
                          authentication=pulsar.AuthenticationToken(b_token),
                          tls_trust_certs_file_path=str(pki.ca_file),
                          operation_timeout_seconds=30))


def test_tls_and_token_towards_the_remote(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    cert, key = pki.issue("localhost", server=True, stem="b")
    secret = tmp_path / "secret.key"
    secret.write_bytes(create_secret_key())
    admin_token = create_token("admin", secret_key=f"file://{secret}")
    repl_token = create_token("repl", secret_key=f"file://{secret}")
    other = tmp_path / "other.key"
    other.write_bytes(create_secret_key())
    wrong_token = create_token("repl", secret_key=f"file://{other}")  # signed by another key
    token_file = tmp_path / "repl.token"
    token_file.write_text(wrong_token)
    tls_port, https_port = free_port(), free_port()
    (tmp_path / "B").mkdir()
    (tmp_path / "A").mkdir()
    b = BrokerProcess(tmp_path / "B", {
        "clusterName": "B", "brokerServicePortTls": str(tls_port),
        "webServicePortTls": str(https_port),
        "tlsCertificateFilePath": str(cert), "tlsKeyFilePath": str(key),
        "authenticationEnabled": "true", "authenticationProviders": TOKEN_PROVIDER,
        "tokenSecretKey": f"file://{secret}", "authorizationEnabled": "true",
        "superUserRoles": "admin,repl"})
    a = BrokerProcess(tmp_path / "A", {
        "clusterName": "A", "brokerClientTlsEnabled": "true",
        "brokerClientTrustCertsFilePath": str(pki.ca_file),
        "brokerClientAuthenticationPlugin": TOKEN_PLUGIN,
        "brokerClientAuthenticationParameters": f"file://{token_file}"})
    topic = f"persistent://geo/ns/t-{uuid.uuid4().hex[:10]}"
    stats_path = f"/admin/v2/persistent/{topic.split('://')[1]}/stats"
    try:
        b.start()
        a.start()
        wait_until(lambda: _up(a) and _up(b), 60, "the admin APIs")
        # only the TLS URLs: the replicators must use them (B's plain ports want a token too)
        _admin(a, "PUT", "/admin/v2/clusters/B", {
            "brokerServiceUrlTls": f"pulsar+ssl://localhost:{tls_port}",
            "serviceUrlTls": f"https://localhost:{https_port}"})
        _admin(b, "PUT", "/admin/v2/clusters/A", {"brokerServiceUrl": a.url}, admin_token)
        _replicated_namespace(a, b, admin_token)

        ca, cb = _clients(a, tls_port, admin_token, pki)
        try:
            consumer, sent = _sent_while_refused(a, ca, cb, topic, _cause_lines)
            # B refuses again at each retry; A says it once
            wait_until(lambda: b.log_path.read_text(errors="replace").count("Connect refused")
                       >= 3, 60, "B to refuse the replicator three times")
            token_file.write_text(repl_token)  # fixed: read again at the next connection
            _receive_all(consumer, set(sent))
            wait_until(lambda: _admin(a, "GET", stats_path)["replication"]["B"]["connected"],  # type: ignore[index]
                       30, "the replicator connected")
            assert _cause_lines(a) == 1, a.log()

            # a partitioned topic: created in B over https (serviceUrlTls) with the token
            parted = f"{topic}-parted"
            rest = parted.split("://")[1]
            _admin(a, "PUT", f"/admin/v2/persistent/{rest}/partitions", 2)
            producer = ca.create_producer(parted)
            sent = [f"p-{i}".encode() for i in range(20)]
            for data in sent:
                producer.send(data)
            wait_until(lambda: http_ok(b, f"/admin/v2/persistent/{rest}/partitions", admin_token)
                       == {"partitions": 2}, 60, "the partitioned topic in B")
            consumer = cb.subscribe(parted, "s", initial_position=pulsar.InitialPosition.Earliest)
            _receive_all(consumer, set(sent))
        finally:
            ca.close()
            cb.close()
    finally:
        a.stop()
        b.stop()


def _sent_while_refused(a: BrokerProcess, ca: pulsar.Client, cb: pulsar.Client, topic: str,
                        error_lines: Callable[[BrokerProcess], int]
                        ) -> tuple[pulsar.Consumer, list[bytes]]:
    """A consumer of ``topic`` in B, and 20 messages sent to it in A while B refuses A's
    replicator: once A logged why (``error_lines``), its stats show the replicator
    disconnected with all 20 waiting."""
    consumer = cb.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = ca.create_producer(topic)
    sent = [f"m-{i}".encode() for i in range(20)]
    for data in sent:
        producer.send(data)
    wait_until(lambda: error_lines(a) >= 1, 60, "the replicator's error in A's log")
    stats = _admin(a, "GET", f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
    repl = stats["replication"]["B"]  # type: ignore[index]
    assert repl["connected"] is False and repl["replicationBacklog"] == 20
    return consumer, sent


def _receive_all(consumer: pulsar.Consumer, sent: set[bytes]) -> None:
    got: set[bytes] = set()
    while got != sent:
        msg = consumer.receive(timeout_millis=60000)
        consumer.acknowledge(msg)
        got.add(msg.data())


def http_ok(broker: BrokerProcess, path: str, token: str) -> object:
    """The answer to a GET, None for an error status (not there yet)."""
    try:
        return _admin(broker, "GET", path, None, token)
    except urllib.error.HTTPError:
        return None


def _up(broker: BrokerProcess) -> bool:
    try:
        socket.create_connection(("127.0.0.1", broker.http_port), timeout=0.5).close()
        return True
    except OSError:
        return False


def _cause_lines(broker: BrokerProcess) -> int:
    """A's log lines reporting a replicator's failure with its cause (B's refusal)."""
    return sum(1 for line in broker.log_path.read_text(errors="replace").splitlines()
               if "replicator" in line and "-> B" in line and "Authentication" in line)


def test_tls_authentication_from_the_cluster_record(tmp_path: Path) -> None:
    """Everything in B's record (A's broker.conf has no brokerClient* keys): TLS trusting
    B's CA and a client certificate as the credentials (``AuthenticationTls``). A
    certificate from another CA is refused; the record updated with the right one, the
    replicator picks it up at its next try."""
    pki, other = Pki(tmp_path / "pki"), Pki(tmp_path / "pki-other", "other")
    cert, key = pki.issue("localhost", server=True, stem="b")
    good_cert, good_key = pki.issue("repl")
    bad_cert, bad_key = other.issue("repl")
    secret = tmp_path / "secret.key"
    secret.write_bytes(create_secret_key())
    admin_token = create_token("admin", secret_key=f"file://{secret}")
    tls_port = free_port()
    (tmp_path / "B").mkdir()
    (tmp_path / "A").mkdir()
    b = BrokerProcess(tmp_path / "B", {
        "clusterName": "B", "brokerServicePortTls": str(tls_port),
        "tlsCertificateFilePath": str(cert), "tlsKeyFilePath": str(key),
        "tlsTrustCertsFilePath": str(pki.ca_file), "authenticationEnabled": "true",
        "authenticationProviders": f"{TLS_PROVIDER},{TOKEN_PROVIDER}",
        "tokenSecretKey": f"file://{secret}", "authorizationEnabled": "true",
        "superUserRoles": "admin,repl"})
    a = BrokerProcess(tmp_path / "A", {"clusterName": "A"})

    def record(cert_file: Path, key_file: Path) -> dict[str, object]:
        return {"brokerServiceUrlTls": f"pulsar+ssl://localhost:{tls_port}",
                "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": str(pki.ca_file),
                "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationTls",
                "authenticationParameters": f"tlsCertFile:{cert_file},tlsKeyFile:{key_file}"}

    topic = f"persistent://geo/ns/t-{uuid.uuid4().hex[:10]}"
    try:
        b.start()
        a.start()
        wait_until(lambda: _up(a) and _up(b), 60, "the admin APIs")
        _admin(a, "PUT", "/admin/v2/clusters/B", record(bad_cert, bad_key))
        _admin(b, "PUT", "/admin/v2/clusters/A", {"brokerServiceUrl": a.url}, admin_token)
        _replicated_namespace(a, b, admin_token)
        ca, cb = _clients(a, tls_port, admin_token, pki)
        try:
            consumer, sent = _sent_while_refused(a, ca, cb, topic, _replicator_lines)
            _admin(a, "POST", "/admin/v2/clusters/B", record(good_cert, good_key))
            _receive_all(consumer, set(sent))
            assert _replicator_lines(a) == 1, a.log()
            assert "client certificate" in a.log()
        finally:
            ca.close()
            cb.close()
    finally:
        a.stop()
        b.stop()


def _replicator_lines(broker: BrokerProcess) -> int:
    """A's warnings about the replicator to B."""
    return sum(1 for line in broker.log_path.read_text(errors="replace").splitlines()
               if "WARNING" in line and "replicator" in line and "-> B" in line)
