"""A broker's own credentials for calls to other brokers (``brokerClient*``): parsing
Pulsar's plugin names and parameters, and a real HTTPS call with them to a broker that
has token authentication and authorization on (the call the leader makes to unload a
bundle when it sheds load)."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.config.broker_client import (
    BrokerClientConfigError,
    BrokerClientCredentials,
    basic_from_params,
    token_from_params,
)
from magnetar.broker.config.broker_config import ConfigError
from magnetar.cli.tokens import create_secret_key, create_token
from magnetar.testing import StandaloneBroker, standalone
from tests.security.pki import Pki

TOKEN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
BASIC = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"


def test_token_and_basic_parameters_in_pulsars_forms(tmp_path: Path) -> None:
    jwt = tmp_path / "broker.jwt"
    jwt.write_text("from-a-file\n")
    assert token_from_params("token:abc") == "abc"
    assert token_from_params(f"file://{jwt}") == "from-a-file"
    assert token_from_params('{"token": "abc"}') == "abc"
    assert token_from_params("abc") == "abc"
    with pytest.raises(BrokerClientConfigError):
        token_from_params('{"tok": "abc"}')
    assert basic_from_params('{"userId": "u", "password": "p:w"}') == ("u", "p:w")
    assert basic_from_params("u:p:w") == ("u", "p:w")
    with pytest.raises(BrokerClientConfigError):
        basic_from_params("no-password")


def test_credentials_from_the_broker_config(tmp_path: Path) -> None:
    jwt = tmp_path / "broker.jwt"
    jwt.write_text("first")
    config = BrokerConfig(brokerClientAuthenticationPlugin=TOKEN,
                          brokerClientAuthenticationParameters=f"file://{jwt}")
    credentials = BrokerClientCredentials.from_config(config)
    assert credentials.headers() == {"Authorization": "Bearer first"}
    jwt.write_text("rotated")  # read again at each call
    assert credentials.headers() == {"Authorization": "Bearer rotated"}
    assert credentials.web_url("http://a:8080", "https://a:8443") == "http://a:8080"
    basic = BrokerClientCredentials.from_config(BrokerConfig(
        brokerClientAuthenticationPlugin=BASIC,
        brokerClientAuthenticationParameters='{"userId": "u", "password": "p"}'))
    assert basic.headers() == {"Authorization": "Basic dTpw"}
    assert BrokerClientCredentials.from_config(BrokerConfig()).headers() == {}
    tls = BrokerClientCredentials.from_config(BrokerConfig(brokerClientTlsEnabled=True))
    assert tls.ssl_context is not None
    assert tls.web_url("http://a:8080", "https://a:8443") == "https://a:8443"
    with pytest.raises(BrokerClientConfigError, match="no TLS web URL"):
        tls.web_url("http://a:8080", "")


@pytest.mark.parametrize(("settings", "error"), [
    ({"brokerClientAuthenticationPlugin": "com.example.Kerberos"}, "not supported"),
    ({"brokerClientAuthenticationPlugin": TOKEN}, "needs brokerClientAuthenticationParameters"),
    ({"brokerClientAuthenticationPlugin": BASIC,
      "brokerClientAuthenticationParameters": "nopassword"}, "user:password"),
    ({"brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": "/nonexistent.pem"},
     "brokerClientTrustCertsFilePath"),
])
def test_unusable_settings_stop_the_broker_with_a_clear_error(
        tmp_path: Path, settings: dict[str, object], error: str) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n"
                            for k, v in settings.items()))
    with pytest.raises(ConfigError, match=error):
        BrokerConfig.load(conf).validate()


@pytest.fixture(scope="module")
def secured_https(tmp_path_factory: pytest.TempPathFactory, pki: Pki
                  ) -> Iterator[tuple[StandaloneBroker, Path]]:
    d = tmp_path_factory.mktemp("broker-client")
    key = d / "secret.key"
    key.write_bytes(create_secret_key())
    cert, cert_key = pki.issue("localhost", server=True, stem="broker-client")
    settings = {
        "webServicePortTls": 0, "tlsCertificateFilePath": cert, "tlsKeyFilePath": cert_key,
        "authenticationEnabled": True,
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{key}", "authorizationEnabled": True,
        "superUserRoles": "broker-internal",
    }
    with standalone(settings) as broker:
        yield broker, key


def _unload(credentials: BrokerClientCredentials, broker: StandaloneBroker) -> int:
    async def call() -> int:
        url = credentials.web_url(broker.web_service_url or "", broker.web_service_url_tls or "")
        async with aiohttp.ClientSession() as session, session.put(
                f"{url}/admin/v2/namespaces/public/default/0x00000000_0xffffffff/unload",
                headers=credentials.headers(), ssl=credentials.ssl_context or True) as resp:
            return resp.status
    return asyncio.run(call())


def test_the_unload_call_authenticates_over_https(
        secured_https: tuple[StandaloneBroker, Path], pki: Pki, other_pki: Pki,
        tmp_path: Path) -> None:
    broker, key = secured_https
    assert broker.web_service_url_tls
    internal = tmp_path / "internal.jwt"
    internal.write_text(create_token("broker-internal", secret_key=f"file://{key}"))
    someone = create_token("someone", secret_key=f"file://{key}")

    def credentials(**kw: object) -> BrokerClientCredentials:
        return BrokerClientCredentials.from_config(BrokerConfig(**{  # type: ignore[arg-type]
            "brokerClientTlsEnabled": True, "brokerClientTrustCertsFilePath": str(pki.ca_file),
            **kw}))

    ok = credentials(brokerClientAuthenticationPlugin=TOKEN,
                     brokerClientAuthenticationParameters=f"file://{internal}")
    assert _unload(ok, broker) == 204
    assert _unload(credentials(), broker) == 401  # no credentials: what shedding sent before
    not_super = credentials(brokerClientAuthenticationPlugin=TOKEN,
                            brokerClientAuthenticationParameters=json.dumps({"token": someone}))
    assert _unload(not_super, broker) == 403  # the role must be a superuser
    wrong_ca = credentials(brokerClientAuthenticationPlugin=TOKEN,
                           brokerClientAuthenticationParameters=f"file://{internal}",
                           brokerClientTrustCertsFilePath=str(other_pki.ca_file))
    with pytest.raises(aiohttp.ClientConnectorCertificateError) as info:
        _unload(wrong_ca, broker)
    assert isinstance(info.value.certificate_error, ssl.SSLCertVerificationError)
