"""``magnetar tokens``: keys and tokens made by the CLI work with the broker's providers."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.broker.security.auth.base import AuthSource
from magnetar.broker.security.auth.token import TokenAuthenticationProvider
from magnetar.cli.tokens import parse_duration

from .test_authentication import round_trip

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main", "tokens"]


def tokens(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MAGNETAR, *args], capture_output=True, text=True, check=check,
                          timeout=60)


def test_secret_key_token_round_trip(tmp_path: Path, make_broker: Any) -> None:
    key = tmp_path / "secret.key"
    tokens("create-secret-key", "--output", str(key))
    assert len(key.read_bytes()) == 32
    token = tokens("create", "--secret-key", f"file://{key}", "--subject", "cli-user",
                   "--expiry-time", "1h").stdout.strip()
    claims = json.loads(tokens("validate", "--secret-key", f"file://{key}", "-i", token).stdout)
    assert claims["sub"] == "cli-user" and claims["exp"] > 0
    shown = tokens("show", "-i", token).stdout.splitlines()
    assert json.loads(shown[0])["alg"] == "HS256"
    broker = make_broker(authenticationEnabled=True,
                         authenticationProviders="org.apache.pulsar.broker.authentication."
                                                 "AuthenticationProviderToken",
                         tokenSecretKey=f"file://{key}")
    round_trip(broker.url, pulsar.AuthenticationToken(token))


def test_base64_secret_key_as_data_url(tmp_path: Path) -> None:
    text = tokens("create-secret-key", "--base64").stdout.strip()
    assert len(base64.b64decode(text)) == 32
    token = tokens("create", "--secret-key", f"data:;base64,{text}", "-s", "x").stdout.strip()
    provider = TokenAuthenticationProvider(secret_key=f"data:;base64,{text}")
    assert provider.authenticate(AuthSource(token.encode())).role == "x"
    provider = TokenAuthenticationProvider(secret_key=text)  # bare base64, as Pulsar accepts
    assert provider.authenticate(AuthSource(token.encode())).role == "x"


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_key_pair(tmp_path: Path, alg: str) -> None:
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    tokens("create-key-pair", "--signature-algorithm", alg, "--output-private-key", str(private),
           "--output-public-key", str(public))
    token = tokens("create", "--private-key", f"file://{private}", "--subject", "kp").stdout.strip()
    assert json.loads(tokens("show", "-i", token).stdout.splitlines()[0])["alg"] == alg
    ok = tokens("validate", "--public-key", f"file://{public}", "-i", token)
    assert json.loads(ok.stdout)["sub"] == "kp"
    other = tmp_path / "other.key"
    tokens("create-secret-key", "--output", str(other))
    bad = tokens("validate", "--secret-key", f"file://{other}", "-i", token, check=False)
    assert bad.returncode == 1 and "magnetar tokens:" in bad.stderr


def test_help_has_examples() -> None:
    out = tokens("--help").stdout
    assert "create-secret-key" in out and "tokenSecretKey=file:///" in out
    assert "--expiry-time" in tokens("create", "--help").stdout


def test_durations() -> None:
    assert parse_duration("90") == 90
    assert parse_duration("1h") == 3600
    assert parse_duration("2d") == 172800
    assert parse_duration("1y") == 365 * 86400
    with pytest.raises(ValueError):
        parse_duration("soon")
