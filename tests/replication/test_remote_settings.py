"""How a replicator reaches a remote cluster (`remote_settings`): the cluster record's
credentials and TLS settings before the broker's ``brokerClient*`` keys, as Pulsar's
replication client; URLs by TLS; clear errors for what is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.broker.config.broker_config import BrokerConfig
from magnetar.broker.replication.remote_producer import RemoteError, broker_hosts, parse_broker_url
from magnetar.broker.replication.remote_settings import (
    RemoteConfigError,
    remote_settings,
    tls_auth_files,
)
from tests.security.pki import Pki

TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


RECORD = {"serviceUrl": "http://b:8080", "brokerServiceUrl": "pulsar://b:6650",
          "serviceUrlTls": "https://b:8443", "brokerServiceUrlTls": "pulsar+ssl://b:6651"}


def _config(**keys: object) -> BrokerConfig:
    config = BrokerConfig()
    for key, value in keys.items():
        setattr(config, key, value)
    return config


def test_plain_without_credentials() -> None:
    s = remote_settings("B", RECORD, _config())
    assert (s.broker_url, s.admin_url, s.ssl_context, s.auth_method) == (
        "pulsar://b:6650", "http://b:8080", None, "")
    assert s.auth_data() == b"" and s.http_headers() == {}


def test_broker_client_token_is_sent(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("jwt-1\n")
    s = remote_settings("B", RECORD, _config(brokerClientAuthenticationPlugin=TOKEN,
                                             brokerClientAuthenticationParameters=f"file://{token_file}"))
    assert (s.auth_method, s.auth_data()) == ("token", b"jwt-1")
    token_file.write_text("jwt-2\n")  # read again at each connection: a rotated token is used
    assert s.auth_data() == b"jwt-2" and s.http_headers() == {"Authorization": "Bearer jwt-2"}


def test_the_records_credentials_come_first() -> None:
    record = {**RECORD, "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
              "authenticationParameters": '{"userId": "u", "password": "p"}'}
    s = remote_settings("B", record, _config(brokerClientAuthenticationPlugin=TOKEN,
                                             brokerClientAuthenticationParameters="token:x"))
    assert (s.auth_method, s.auth_data()) == ("basic", b"u:p")
    # a plugin without parameters in the record: the broker's keys apply (both must be set)
    s = remote_settings("B", {**RECORD, "authenticationPlugin": "basic"},
                        _config(brokerClientAuthenticationPlugin=TOKEN,
                                brokerClientAuthenticationParameters="token:x"))
    assert (s.auth_method, s.auth_data()) == ("token", b"x")


def test_tls_from_the_broker_or_the_record(pki: Pki) -> None:
    s = remote_settings("B", RECORD, _config(brokerClientTlsEnabled=True,
                                             brokerClientTrustCertsFilePath=str(pki.ca_file)))
    assert (s.broker_url, s.admin_url) == ("pulsar+ssl://b:6651", "https://b:8443")
    assert s.ssl_context is not None and not s.ssl_context.check_hostname  # Pulsar's default
    record = {**RECORD, "brokerClientTlsEnabled": True, "tlsAllowInsecureConnection": True}
    s = remote_settings("B", record, _config(tlsHostnameVerificationEnabled=True))
    assert s.ssl_context is not None and s.ssl_context.verify_mode.name == "CERT_NONE"
    s = remote_settings("B", {**RECORD, "brokerClientTlsEnabled": True,
                              "brokerClientTrustCertsFilePath": str(pki.ca_file)},
                        _config(tlsHostnameVerificationEnabled=True))
    assert s.ssl_context is not None and s.ssl_context.check_hostname


def test_tls_authentication_presents_the_certificate(pki: Pki) -> None:
    cert, key = pki.issue("repl")
    params = f"tlsCertFile:{cert},tlsKeyFile:{key}"
    assert tls_auth_files(params) == (str(cert), str(key))
    assert tls_auth_files(f'{{"tlsCertFile": "{cert}", "tlsKeyFile": "{key}"}}') == (str(cert), str(key))
    s = remote_settings("B", RECORD, _config(
        brokerClientTlsEnabled=True, brokerClientTrustCertsFilePath=str(pki.ca_file),
        brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationTls",
        brokerClientAuthenticationParameters=params))
    assert s.auth_method == "tls" and s.auth_data() == b""
    with pytest.raises(RemoteConfigError, match="brokerClientTlsEnabled is off"):
        remote_settings("B", RECORD, _config(brokerClientAuthenticationPlugin="tls",
                                             brokerClientAuthenticationParameters=params))


@pytest.mark.parametrize(("record", "keys", "message"), [
    ({"serviceUrl": "http://b:8080"}, {}, "no brokerServiceUrl"),
    ({"brokerServiceUrl": "pulsar://b:6650"}, {"brokerClientTlsEnabled": True}, "no brokerServiceUrlTls"),
    (RECORD, {"brokerClientAuthenticationPlugin": "com.example.Kerberos"}, "not supported"),
    (RECORD, {"brokerClientAuthenticationPlugin": TOKEN}, "needs its authentication parameters"),
    ({**RECORD, "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": "/nonexistent.pem"},
     {}, "cannot be loaded"),
])
def test_what_is_missing_is_named(record: dict[str, object], keys: dict[str, object], message: str) -> None:
    with pytest.raises(RemoteConfigError, match=message):
        remote_settings("B", record, _config(**keys))


def test_broker_urls() -> None:
    assert parse_broker_url("pulsar://h:1,h2:2") == ("h", 1)
    assert parse_broker_url("pulsar+ssl://h") == ("h", 6651)
    assert broker_hosts("pulsar://h:1, h2,h3:3/") == [("h", 1), ("h2", 6650), ("h3", 3)]
    with pytest.raises(RemoteError):
        parse_broker_url("http://h:1")
