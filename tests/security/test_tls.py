"""TLS on brokerServicePortTls: server-only, mutual (certificate CN as role), token over TLS,
a client certificate from another CA, protocol limits, and certificate reload."""

from __future__ import annotations

import shutil
import socket
import ssl
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulsar
import pytest
from cryptography import x509

from magnetar import sync
from magnetar.broker.security.tls import TlsConfigError, TlsContextManager, openssl_cipher_name
from magnetar.cli.tokens import create_token
from tests.broker.brokerproc import wait_until
from tests.broker.conftest import ThreadedBroker
from tests.security.pki import Pki

from .conftest import file_url, token_settings
from .test_authentication import new_topic, refused, round_trip

DEFAULTS = {"tlsRequireTrustedClientCertOnConnect": False, "tlsAllowInsecureConnection": False,
            "tlsProtocols": "", "tlsCiphers": ""}
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


def tls_settings(pki: Pki, **extra: Any) -> dict[str, Any]:
    cert, key = pki.issue("localhost", server=True, stem="broker")
    return {
        "brokerServicePortTls": 0,
        "tlsCertificateFilePath": str(cert),
        "tlsKeyFilePath": str(key),
        "tlsTrustCertsFilePath": str(pki.ca_file),
        **extra,
    }


def tls_url(broker: ThreadedBroker) -> str:
    assert broker.service is not None
    return f"pulsar+ssl://127.0.0.1:{broker.service.security.tls_port}"


def test_server_tls_official_and_our_client(make_broker: Any, pki: Pki) -> None:
    broker = make_broker(**tls_settings(pki))
    round_trip(tls_url(broker), None, tls_trust_certs_file_path=str(pki.ca_file))
    client = sync.Client(tls_url(broker), tls_trust_certs_file_path=str(pki.ca_file),
                         tls_validate_hostname=True)
    try:
        topic = new_topic()
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(b"over tls")
        assert consumer.receive(timeout_millis=10000).data() == b"over tls"
    finally:
        client.close()
    # the plain port still serves, as in Pulsar (close it by not listening on it)
    round_trip(broker.url, None)


def test_untrusted_server_is_refused_by_client(make_broker: Any, pki: Pki, other_pki: Pki) -> None:
    broker = make_broker(**tls_settings(pki))
    refused(tls_url(broker), None, tls_trust_certs_file_path=str(other_pki.ca_file))


def test_mutual_tls_role_is_the_certificate_cn(make_broker: Any, pki: Pki, other_pki: Pki) -> None:
    broker = make_broker(**tls_settings(
        pki, tlsRequireTrustedClientCertOnConnect=True, authenticationEnabled=True,
        authenticationProviders=TLS_PROVIDER))
    cert, key = pki.issue("alice")
    round_trip(tls_url(broker), pulsar.AuthenticationTLS(str(cert), str(key)),
               tls_trust_certs_file_path=str(pki.ca_file))
    assert broker.service.security.authentication.refused == 0
    # a certificate from another CA fails the handshake; so does none at all
    foreign_cert, foreign_key = other_pki.issue("mallory")
    refused(tls_url(broker), pulsar.AuthenticationTLS(str(foreign_cert), str(foreign_key)),
            tls_trust_certs_file_path=str(pki.ca_file))
    refused(tls_url(broker), None, tls_trust_certs_file_path=str(pki.ca_file))
    # and the plain port cannot authenticate with TLS
    refused(broker.url, pulsar.AuthenticationTLS(str(cert), str(key)))
    # a normal client still works
    round_trip(tls_url(broker), pulsar.AuthenticationTLS(str(cert), str(key)),
               tls_trust_certs_file_path=str(pki.ca_file))
    # our client: the client certificate alone authenticates (method tls)
    ours = sync.Client(tls_url(broker), tls_trust_certs_file_path=str(pki.ca_file),
                       tls_certificate_file_path=str(cert), tls_private_key_file_path=str(key))
    try:
        ours.create_producer(new_topic()).send(b"mtls")
        assert any(c.principal == "alice" for c in list(broker.service.connections))
    finally:
        ours.close()


def test_token_over_tls(make_broker: Any, pki: Pki, keys: dict[str, Path]) -> None:
    broker = make_broker(**tls_settings(pki), **token_settings(keys))
    token = create_token("tls-user", secret_key=file_url(keys["secret"]))
    round_trip(tls_url(broker), pulsar.AuthenticationToken(token),
               tls_trust_certs_file_path=str(pki.ca_file))
    refused(tls_url(broker), None, tls_trust_certs_file_path=str(pki.ca_file))


def test_tls_protocols_limit(make_broker: Any, pki: Pki) -> None:
    broker = make_broker(**tls_settings(pki, tlsProtocols="TLSv1.3"))
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    port = broker.service.security.tls_port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            pytest.raises(ssl.SSLError):
        ctx.wrap_socket(sock, server_hostname="localhost")
    round_trip(tls_url(broker), None, tls_trust_certs_file_path=str(pki.ca_file))


def _tls12_handshake(port: int, pki: Pki, ciphers: str) -> str:
    """The suite a TLS 1.2 client offering only ``ciphers`` (OpenSSL names) negotiates."""
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(ciphers)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            ctx.wrap_socket(sock, server_hostname="localhost") as tls:
        cipher = tls.cipher()
    assert cipher is not None
    return cipher[0]


def test_tls_ciphers_by_their_java_names(make_broker: Any, pki: Pki) -> None:
    # a broker.conf line as Pulsar's docs write it (the test certificates are EC keys)
    broker = make_broker(**tls_settings(
        pki, tlsCiphers="TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_AES_256_GCM_SHA384"))
    port = broker.service.security.tls_port
    assert _tls12_handshake(port, pki, "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256"
                            ) == "ECDHE-ECDSA-AES256-GCM-SHA384"
    with pytest.raises(ssl.SSLError):  # a suite the list leaves out
        _tls12_handshake(port, pki, "ECDHE-ECDSA-AES128-GCM-SHA256")
    round_trip(tls_url(broker), None, tls_trust_certs_file_path=str(pki.ca_file))


@pytest.mark.parametrize(("java", "openssl"), [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
    ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"),
    ("TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"),
    ("ECDHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES256-GCM-SHA384"),
])
def test_java_cipher_names_map_to_openssl_names(java: str, openssl: str) -> None:
    assert openssl_cipher_name(java) == openssl
    ssl.create_default_context().set_ciphers(openssl)  # a name OpenSSL knows


def test_tls13_suites_only_mean_tls13_only(make_broker: Any, pki: Pki) -> None:
    broker = make_broker(**tls_settings(pki, tlsCiphers="TLS_AES_128_GCM_SHA256"))
    with pytest.raises(ssl.SSLError):
        _tls12_handshake(broker.service.security.tls_port, pki, "ECDHE-ECDSA-AES256-GCM-SHA384")
    round_trip(tls_url(broker), None, tls_trust_certs_file_path=str(pki.ca_file))


def test_unknown_cipher_names_are_a_config_error(pki: Pki) -> None:
    settings = tls_settings(pki, tlsCiphers="TLS_FOO_WITH_BAR_SHA")
    with pytest.raises(TlsConfigError, match="unsupported cipher suite 'TLS_FOO_WITH_BAR_SHA'"):
        TlsContextManager(SimpleNamespace(**{**DEFAULTS, **settings}))
    settings = tls_settings(pki, tlsCiphers="NOT-A-CIPHER")
    with pytest.raises(TlsConfigError, match="OpenSSL knows none of"):
        TlsContextManager(SimpleNamespace(**{**DEFAULTS, **settings}))


def served_certificate(port: int, ca_files: list[Path]) -> x509.Certificate:
    ctx = ssl.create_default_context()
    for ca in ca_files:
        ctx.load_verify_locations(str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            ctx.wrap_socket(sock, server_hostname="localhost") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_certificate_reload(make_broker: Any, pki: Pki, tmp_path: Path) -> None:
    fresh = Pki(tmp_path / "renewed", "renewed")
    settings = tls_settings(pki, tlsCertRefreshCheckDurationSec=1)
    live_cert, live_key = tmp_path / "broker.cert.pem", tmp_path / "broker.key.pem"
    shutil.copy(settings["tlsCertificateFilePath"], live_cert)
    shutil.copy(settings["tlsKeyFilePath"], live_key)
    settings.update(tlsCertificateFilePath=str(live_cert), tlsKeyFilePath=str(live_key))
    broker = make_broker(**settings)
    port = broker.service.security.tls_port
    first = served_certificate(port, [pki.ca_file])
    new_cert, new_key = fresh.issue("localhost", server=True, stem="renewed-broker")
    # write the key first, then the certificate: the reload must not use a mismatched pair
    shutil.copy(new_key, live_key)
    shutil.copy(new_cert, live_cert)
    wait_until(lambda: broker.service.security.tls.reloads >= 1, 30, "the TLS files reload")
    second = served_certificate(port, [pki.ca_file, fresh.ca_file])
    assert second.serial_number != first.serial_number
    assert second.issuer == fresh.ca_cert.subject
    round_trip(tls_url(broker), None, tls_trust_certs_file_path=str(fresh.ca_file))


