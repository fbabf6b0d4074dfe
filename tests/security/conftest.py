"""Fixtures for the security tests: brokers with security settings, keys, certificates."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.cli.tokens import create_key_pair, create_secret_key
from tests.broker.conftest import make_broker  # noqa: F401 - the broker tests' fixture, shared
from tests.security.pki import Pki
from tests.security.pulsar_ci import CiBroker, ci_broker


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A secret key (raw bytes), an RSA and an EC key pair (DER), as `tokens` writes them."""
    d = tmp_path_factory.mktemp("keys")
    out = {"secret": d / "secret.key", "other-secret": d / "other.key"}
    out["secret"].write_bytes(create_secret_key())
    out["other-secret"].write_bytes(create_secret_key())
    for alg in ("RS256", "ES256"):
        private, public = create_key_pair(alg)
        out[f"{alg}-private"] = d / f"{alg}.private.der"
        out[f"{alg}-public"] = d / f"{alg}.public.der"
        out[f"{alg}-private"].write_bytes(private)
        out[f"{alg}-public"].write_bytes(public)
    return out


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki-other"), "other")


def file_url(path: Path) -> str:
    return f"file://{path}"


def token_settings(keys: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {
        "authenticationEnabled": True,
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": file_url(keys["secret"]),
        **extra,
    }


@pytest.fixture(scope="module")
def pulsar_ci(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[CiBroker]:
    """A broker started and configured as the official Python client's CI starts Pulsar
    (``pulsar_ci.py``): TLS, token + basic + TLS authentication, authorization, its admin
    calls made. One per test module."""
    with ci_broker(tmp_path_factory.mktemp("pulsar-ci"), pki) as ci:
        yield ci
