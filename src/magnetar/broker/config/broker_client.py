"""The broker's own credentials when it calls another broker (Pulsar's ``brokerClient*``
keys): today the leader's unload requests when it sheds load.

- ``brokerClientAuthenticationPlugin``: Pulsar's client plugin class names are understood,
  ``org.apache.pulsar.client.impl.auth.AuthenticationToken`` and
  ``org.apache.pulsar.client.impl.auth.AuthenticationBasic`` (or just ``token``,
  ``basic``); empty or ``...AuthenticationDisabled``: no credentials.
- ``brokerClientAuthenticationParameters``: for a token ``token:JWT``, ``file:///path``
  (read again at each call, so a rotated file is picked up), ``{"token": "JWT"}`` or the
  bare JWT; for basic ``{"userId": "u", "password": "p"}`` or ``u:p``.
- ``brokerClientTlsEnabled``: call the other broker's TLS web URL (``webServiceUrlTls``),
  trusting ``brokerClientTrustCertsFilePath`` (default: the system's CAs), presenting
  ``brokerClientCertificateFilePath``/``brokerClientKeyFilePath`` when set; with
  ``tlsAllowInsecureConnection`` the other broker's certificate is not checked, and its
  host name only with ``tlsHostnameVerificationEnabled`` (both as Pulsar's brokers do).

The role these credentials authenticate as must be allowed to unload any bundle: with
``authorizationEnabled``, make it one of ``superUserRoles`` (docs/cluster.md).
"""

from __future__ import annotations

import base64
import json
import ssl
from dataclasses import dataclass
from typing import Any

__all__ = ["BrokerClientConfigError", "BrokerClientCredentials", "basic_from_params",
           "client_context", "token_from_params"]

_TOKEN = {"org.apache.pulsar.client.impl.auth.authenticationtoken", "token"}
_BASIC = {"org.apache.pulsar.client.impl.auth.authenticationbasic", "basic"}
_NONE = {"", "org.apache.pulsar.client.impl.auth.authenticationdisabled", "none"}


def client_context(trust_certs: str | None = None, cert_file: str | None = None,
                   key_file: str | None = None, allow_insecure: bool = False,
                   check_hostname: bool = True) -> ssl.SSLContext:
    """The SSLContext of an HTTPS or TLS client (the admin CLI, the broker's own calls to
    other brokers): the server's certificate must chain to ``trust_certs`` (a PEM file;
    default: the system's CAs) unless ``allow_insecure``; ``cert_file``/``key_file``: a
    client certificate (TLS authentication)."""
    context = ssl.create_default_context(cafile=trust_certs or None)
    if allow_insecure or not check_hostname:
        context.check_hostname = False
    if allow_insecure:
        context.verify_mode = ssl.CERT_NONE
    if cert_file:
        context.load_cert_chain(cert_file, key_file or None)
    return context


class BrokerClientConfigError(ValueError):
    """brokerClient* settings that cannot be used."""


def token_from_params(params: str) -> str:
    """The JWT that Pulsar-style token parameters name: ``token:JWT``, ``file:///path``
    (the file is read now), ``{"token": "JWT"}``, or the bare JWT."""
    params = params.strip()
    if params.startswith("token:"):
        return params.removeprefix("token:").strip()
    if params.startswith("file://"):
        with open(params.removeprefix("file://")) as f:
            return f.read().strip()
    if params.startswith("{"):
        try:
            value = json.loads(params).get("token")
        except (ValueError, AttributeError):
            value = None
        if not isinstance(value, str):
            raise BrokerClientConfigError('token parameters in JSON need {"token": "JWT"}')
        return token_from_params(value)
    return params


def basic_from_params(params: str) -> tuple[str, str]:
    """``(user, password)`` from ``{"userId": u, "password": p}`` or ``u:p``."""
    params = params.strip()
    if params.startswith("{"):
        try:
            data = json.loads(params)
            user, password = data["userId"], data["password"]
        except (ValueError, KeyError, TypeError):
            raise BrokerClientConfigError(
                'basic parameters in JSON need {"userId": ..., "password": ...}') from None
        return str(user), str(password)
    user, sep, password = params.partition(":")
    if not sep:
        raise BrokerClientConfigError("basic parameters are user:password or "
                                      '{"userId": ..., "password": ...}')
    return user, password


@dataclass(frozen=True)
class BrokerClientCredentials:
    """What a broker's call to another broker carries: an ``Authorization`` header (none
    for ``kind`` "none") and, with ``tls``, an SSLContext for the TLS web URL."""

    kind: str = "none"
    params: str = ""
    tls: bool = False
    ssl_context: ssl.SSLContext | None = None

    @staticmethod
    def from_config(config: Any) -> BrokerClientCredentials:
        """From a ``BrokerConfig``; ``BrokerClientConfigError`` for an unknown plugin,
        unusable parameters or TLS files."""
        plugin = str(config.brokerClientAuthenticationPlugin).strip()
        low = plugin.lower()
        kind = "token" if low in _TOKEN else "basic" if low in _BASIC else \
            "none" if low in _NONE else None
        if kind is None:
            raise BrokerClientConfigError(
                f"brokerClientAuthenticationPlugin {plugin!r} is not supported: use "
                "org.apache.pulsar.client.impl.auth.AuthenticationToken or "
                "org.apache.pulsar.client.impl.auth.AuthenticationBasic")
        params = str(config.brokerClientAuthenticationParameters)
        if kind != "none" and not params.strip():
            raise BrokerClientConfigError(
                f"brokerClientAuthenticationPlugin {plugin} needs "
                "brokerClientAuthenticationParameters")
        context = None
        if config.brokerClientTlsEnabled:
            try:
                context = client_context(
                    config.brokerClientTrustCertsFilePath or None,
                    config.brokerClientCertificateFilePath or None,
                    config.brokerClientKeyFilePath or None,
                    bool(config.tlsAllowInsecureConnection),
                    bool(config.tlsHostnameVerificationEnabled))
            except (OSError, ssl.SSLError) as exc:
                raise BrokerClientConfigError(
                    f"brokerClientTrustCertsFilePath/brokerClientCertificateFilePath/"
                    f"brokerClientKeyFilePath cannot be loaded: {exc}") from None
        credentials = BrokerClientCredentials(kind, params, bool(config.brokerClientTlsEnabled),
                                              context)
        if kind == "basic":
            basic_from_params(params)  # checked now rather than at the first call
        return credentials

    def headers(self) -> dict[str, str]:
        """The HTTP headers carrying the credentials (a token file is read again)."""
        if self.kind == "token":
            return {"Authorization": "Bearer " + token_from_params(self.params)}
        if self.kind == "basic":
            user, password = basic_from_params(self.params)
            return {"Authorization": "Basic "
                    + base64.b64encode(f"{user}:{password}".encode()).decode()}
        return {}

    def web_url(self, web_url: str, web_url_tls: str) -> str:
        """The URL to call another broker at, given the two it registered."""
        if self.tls:
            if not web_url_tls:
                raise BrokerClientConfigError(
                    "brokerClientTlsEnabled=true but the other broker has no TLS web URL "
                    "(webServicePortTls)")
            return web_url_tls
        return web_url or web_url_tls
