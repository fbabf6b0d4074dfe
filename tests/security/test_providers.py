"""The providers on their own: password hashes, key values, and the HTTP entry point the
admin layer will call (``authenticate_http``)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.security.auth.base import AuthenticationError, AuthSource
from magnetar.broker.security.auth.basic import BasicAuthenticationProvider, parse_users
from magnetar.broker.security.auth.keys import KeyMaterialError, read_key_value
from magnetar.broker.security.auth.passwords import check_password, md5_crypt
from magnetar.broker.security.auth.service import AuthenticationService, provider_class
from magnetar.cli.tokens import create_token

# hashes written by `openssl passwd -1` / `-apr1` for "p" and for the empty password
OPENSSL_VECTORS = [
    ("p", "$1$abcdefgh$HxWb8VZZ8HqzOKVuLaoxI."),
    ("p", "$apr1$xyz12345$nOUvDajmBV5/zfTZmt/nw."),
    ("", "$apr1$xyz12345$pY54s7LX3DRQiKoihbCKm1"),
]


@pytest.mark.parametrize(("password", "stored"), OPENSSL_VECTORS)
def test_md5_crypt_matches_openssl(password: str, stored: str) -> None:
    assert check_password(password, stored)
    assert not check_password(password + "x", stored)


def test_bcrypt_and_des() -> None:
    import bcrypt

    stored = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    assert check_password("pw", stored) and not check_password("px", stored)
    crypt = pytest.importorskip("crypt")
    des = crypt.crypt("pw", "ab")
    assert check_password("pw", des) and not check_password("px", des)


def test_users_file_format() -> None:
    assert parse_users("# c\n\nann:$apr1$x$y\n") == {"ann": "$apr1$x$y"}
    with pytest.raises(ValueError, match="line 1"):
        parse_users("no-colon-here\n")


def test_key_values(tmp_path: Path) -> None:
    f = tmp_path / "k"
    f.write_bytes(b"\x00\x01")
    assert read_key_value(f"file://{f}", "k") == b"\x00\x01"
    assert read_key_value("data:;base64,AAE=", "k") == b"\x00\x01"
    assert read_key_value("AAE=", "k") == b"\x00\x01"
    with pytest.raises(KeyMaterialError, match="tokenSecretKey"):
        read_key_value("file:///no/such/file", "tokenSecretKey")


def test_provider_class_names() -> None:
    for name in ("org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
                 "AuthenticationProviderToken", "token"):
        assert provider_class(name).method_name == "token"
    with pytest.raises(ValueError, match="not supported"):
        provider_class("org.apache.pulsar.broker.authentication.AuthenticationProviderSasl")


def test_config_errors() -> None:
    with pytest.raises(ConfigError, match="authenticationProviders"):
        BrokerConfig.load(None, authenticationEnabled=True)
    with pytest.raises(ConfigError, match="tlsCertificateFilePath"):
        BrokerConfig.load(None, brokerServicePortTls=6651)


def test_authenticate_http(tmp_path: Path) -> None:
    key = tmp_path / "secret"
    key.write_bytes(b"k" * 32)
    users = tmp_path / "users"
    users.write_text(f"ann:{md5_crypt(b'pw', 'salt', '$apr1$')}\n")
    config = BrokerConfig.load(
        None, authenticationEnabled=True, proxyRoles="proxy",
        authenticationProviders="AuthenticationProviderToken,AuthenticationProviderBasic",
        tokenSecretKey=f"file://{key}", basicAuthConf=str(users))
    service = AuthenticationService(config)
    token = create_token("bob", secret_key=f"file://{key}")
    assert service.authenticate_http({"Authorization": f"Bearer {token}"}).role == "bob"
    basic = base64.b64encode(b"ann:pw").decode()
    assert service.authenticate_http({"authorization": f"Basic {basic}"}).principal == "ann"
    identity = asyncio.run(service.authenticate_http_async({"Authorization": f"Basic {basic}"}))
    assert identity.role == "ann"
    with pytest.raises(AuthenticationError):
        service.authenticate_http({"Authorization": "Basic " + base64.b64encode(b"ann:no").decode()})
    with pytest.raises(AuthenticationError):
        service.authenticate_http({})
    proxy = create_token("proxy", secret_key=f"file://{key}")
    identity = service.authenticate_http({"Authorization": f"Bearer {proxy}",
                                          "X-Original-Principal": "carol"})
    assert (identity.role, identity.principal) == ("proxy", "carol")
    with pytest.raises(AuthenticationError, match="proxy role"):
        service.authenticate_http({"Authorization": f"Bearer {token}",
                                   "X-Original-Principal": "carol"})


def test_basic_wrong_scheme() -> None:
    provider = BasicAuthenticationProvider({"a": "$apr1$x$y"})
    with pytest.raises(AuthenticationError):
        provider.authenticate(AuthSource(None, {"Authorization": "Bearer abc"}))
