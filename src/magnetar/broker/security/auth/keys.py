"""Reading key material given the way Pulsar's settings give it.

A value such as ``tokenSecretKey`` or ``basicAuthConf`` is one of:

- ``file:///path/to/key`` (or ``file:/path``): the file's bytes;
- ``data:;base64,AAAA`` (or ``data:text/plain,...``): the inline bytes of a data URL;
- a path to an existing file (``basicAuthConf`` accepts that, as Pulsar does);
- otherwise the key itself in base64.

Asymmetric keys are accepted as DER (what ``pulsar tokens create-key-pair`` writes: PKCS#8
private keys, X.509 SubjectPublicKeyInfo public keys) or PEM.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa


class KeyMaterialError(ValueError):
    """A key value that cannot be read or decoded (the message names the setting)."""


def read_key_value(value: str, setting: str, allow_path: bool = True) -> bytes:
    """The bytes ``value`` stands for (see the module docstring)."""
    value = value.strip()
    if value.startswith("file:"):
        parsed = urllib.parse.urlparse(value)
        path = urllib.parse.unquote(parsed.path)
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise KeyMaterialError(f"{setting}: cannot read {path}: {exc.strerror}") from None
    if value.startswith("data:"):
        return _data_url(value, setting)
    if allow_path and Path(value).is_file():
        return Path(value).read_bytes()
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KeyMaterialError(
            f"{setting}: expected file:///path, data:;base64,... or base64 key bytes"
        ) from None


def _data_url(value: str, setting: str) -> bytes:
    header, sep, payload = value[len("data:"):].partition(",")
    if not sep:
        raise KeyMaterialError(f"{setting}: a data: URL needs a comma before its content")
    if header.endswith(";base64"):
        try:
            return base64.b64decode(payload, validate=False)
        except (binascii.Error, ValueError):
            raise KeyMaterialError(f"{setting}: the data: URL is not valid base64") from None
    return urllib.parse.unquote_to_bytes(payload)


def load_public_key(data: bytes, setting: str) -> Any:
    """An RSA or EC public key from DER or PEM bytes."""
    try:
        if data.lstrip().startswith(b"-----"):
            key = serialization.load_pem_public_key(data)
        else:
            key = serialization.load_der_public_key(data)
    except ValueError as exc:
        raise KeyMaterialError(f"{setting}: not a DER or PEM public key ({exc})") from None
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise KeyMaterialError(f"{setting}: only RSA and EC public keys are supported")
    return key


def load_private_key(data: bytes, setting: str) -> Any:
    """An RSA or EC private key from DER (PKCS#8) or PEM bytes."""
    try:
        if data.lstrip().startswith(b"-----"):
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyMaterialError(f"{setting}: not a DER or PEM private key ({exc})") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise KeyMaterialError(f"{setting}: only RSA and EC private keys are supported")
    return key


def algorithms_for_key(key: Any) -> list[str]:
    """The JWT algorithms a key of this type can verify."""
    if isinstance(key, rsa.RSAPublicKey | rsa.RSAPrivateKey):
        return ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
    if isinstance(key, ec.EllipticCurvePublicKey | ec.EllipticCurvePrivateKey):
        return ["ES256", "ES384", "ES512"]
    return ["HS256", "HS384", "HS512"]
