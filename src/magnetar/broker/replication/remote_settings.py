"""`RemoteSettings`: how a replicator reaches a remote cluster, worked out (as Pulsar's
``BrokerService`` builds its replication client and admin) from the remote's cluster record
and this broker's ``brokerClient*`` keys.

- Credentials: the record's ``authenticationPlugin`` with ``authenticationParameters`` when
  both are set; otherwise this broker's ``brokerClientAuthenticationPlugin`` /
  ``brokerClientAuthenticationParameters``. Plugins: Pulsar's ``AuthenticationToken``,
  ``AuthenticationBasic`` and ``AuthenticationTls`` class names (or ``token``, ``basic``,
  ``tls``); TLS parameters ``tlsCertFile:/cert.pem,tlsKeyFile:/key.pem`` or the same as
  JSON. (Pulsar sends the ``brokerClient*`` credentials on the binary connection only when
  ``authenticationEnabled`` is on locally; here they are sent whenever configured.)
- TLS: with the record's ``brokerClientTlsEnabled``, its own ``brokerClientTrustCertsFilePath``,
  ``brokerClientCertificateFilePath``/``brokerClientKeyFilePath`` and
  ``tlsAllowInsecureConnection``; else, with this broker's ``brokerClientTlsEnabled``, the
  broker's keys of those names. The host name in the remote's certificate is checked with
  the broker's ``tlsHostnameVerificationEnabled`` (off by default, as Pulsar). With TLS the
  remote is reached at the record's ``brokerServiceUrlTls`` and ``serviceUrlTls``; without,
  at ``brokerServiceUrl`` and ``serviceUrl``.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.config.broker_client import (
    BrokerClientConfigError,
    basic_from_params,
    client_context,
    token_from_params,
)

__all__ = ["RemoteConfigError", "RemoteSettings", "remote_settings"]

_PLUGINS = {
    "org.apache.pulsar.client.impl.auth.authenticationtoken": "token", "token": "token",
    "org.apache.pulsar.client.impl.auth.authenticationbasic": "basic", "basic": "basic",
    "org.apache.pulsar.client.impl.auth.authenticationtls": "tls", "tls": "tls",
    "org.apache.pulsar.client.impl.auth.authenticationdisabled": "", "none": "", "": "",
}


class RemoteConfigError(ValueError):
    """The cluster record and ``brokerClient*`` keys do not say how to reach the remote."""


@dataclass(frozen=True)
class RemoteSettings:
    """Where and how to reach one remote cluster: its binary URL (``pulsar://`` or
    ``pulsar+ssl://``), its admin URL (may be empty), the TLS context (None: plain) and the
    credentials (``auth_method`` "": none, "token", "basic" or "tls"); the connection's
    keep-alive interval (the broker's ``keepAliveIntervalSeconds``), the time a connection
    attempt and a send get."""

    broker_url: str
    admin_url: str = ""
    ssl_context: ssl.SSLContext | None = None
    auth_method: str = ""
    auth_params: str = ""
    keepalive_s: float = 30.0
    connect_timeout_s: float = 10.0
    send_timeout_s: float = 30.0

    def auth_data(self) -> bytes:
        """The ``auth_data`` of Connect (a token file is read again at each connection)."""
        if self.auth_method == "token":
            return token_from_params(self.auth_params).encode()
        if self.auth_method == "basic":
            user, password = basic_from_params(self.auth_params)
            return f"{user}:{password}".encode()
        return b""

    def http_headers(self) -> dict[str, str]:
        """The headers of an admin call carrying the credentials."""
        if self.auth_method == "token":
            return {"Authorization": "Bearer " + token_from_params(self.auth_params)}
        if self.auth_method == "basic":
            return {"Authorization": "Basic " + base64.b64encode(self.auth_data()).decode()}
        return {}


def tls_auth_files(params: str) -> tuple[str, str]:
    """(certificate file, key file) from ``AuthenticationTls`` parameters:
    ``tlsCertFile:/a,tlsKeyFile:/b`` or ``{"tlsCertFile": "/a", "tlsKeyFile": "/b"}``."""
    params = params.strip()
    values: dict[str, str] = {}
    if params.startswith("{"):
        try:
            data = json.loads(params)
            values = {str(k): str(v) for k, v in data.items()}
        except (ValueError, AttributeError):
            values = {}
    else:
        for item in params.split(","):
            key, sep, value = item.partition(":")
            if sep:
                values[key.strip()] = value.strip()
    cert, key = values.get("tlsCertFile", ""), values.get("tlsKeyFile", "")
    if not cert or not key:
        raise RemoteConfigError("AuthenticationTls parameters need tlsCertFile and tlsKeyFile "
                                "(tlsCertFile:/cert.pem,tlsKeyFile:/key.pem)")
    return cert, key


def _text(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    return value.strip() if isinstance(value, str) else ""


def remote_settings(cluster: str, record: Mapping[str, Any], config: Any) -> RemoteSettings:
    """The settings to reach ``cluster`` (its stored ClusterData ``record``) from a broker
    with ``config`` (a ``BrokerConfig``); `RemoteConfigError` naming what is missing."""
    # credentials: the record's own, else the broker's (Pulsar's precedence)
    if record.get("authenticationPlugin") is not None and record.get("authenticationParameters") is not None:
        plugin, params, origin = (str(record["authenticationPlugin"]),
                                  str(record["authenticationParameters"]),
                                  f"cluster {cluster}'s authenticationPlugin")
    else:
        plugin, params, origin = (str(config.brokerClientAuthenticationPlugin),
                                  str(config.brokerClientAuthenticationParameters),
                                  "brokerClientAuthenticationPlugin")
    method = _PLUGINS.get(plugin.strip().lower())
    if method is None:
        raise RemoteConfigError(
            f"{origin} {plugin!r} is not supported: use org.apache.pulsar.client.impl.auth."
            "AuthenticationToken, AuthenticationBasic or AuthenticationTls")
    if method in ("token", "basic") and not params.strip():
        raise RemoteConfigError(f"{origin} {plugin} needs its authentication parameters")
    try:
        if method == "basic":
            basic_from_params(params)
    except BrokerClientConfigError as exc:
        raise RemoteConfigError(str(exc)) from None

    # TLS: the record's settings when it enables TLS, else the broker's
    if record.get("brokerClientTlsEnabled") is True:
        tls: Mapping[str, Any] | None = {
            "trust": _text(record, "brokerClientTrustCertsFilePath"),
            "cert": _text(record, "brokerClientCertificateFilePath"),
            "key": _text(record, "brokerClientKeyFilePath"),
            "insecure": record.get("tlsAllowInsecureConnection") is True}
    elif config.brokerClientTlsEnabled:
        tls = {"trust": str(config.brokerClientTrustCertsFilePath),
               "cert": str(config.brokerClientCertificateFilePath),
               "key": str(config.brokerClientKeyFilePath),
               "insecure": bool(config.tlsAllowInsecureConnection)}
    else:
        tls = None
    if tls is None:
        if method == "tls":
            raise RemoteConfigError(f"{origin} is AuthenticationTls but brokerClientTlsEnabled "
                                    f"is off (for cluster {cluster} and this broker)")
        url = _text(record, "brokerServiceUrl")
        if not url.startswith("pulsar://"):
            raise RemoteConfigError(f"cluster {cluster} has no brokerServiceUrl (pulsar://...)")
        return RemoteSettings(url, _text(record, "serviceUrl"), None, method, params,
                              **_timing(config))
    url = _text(record, "brokerServiceUrlTls")
    if not url.startswith("pulsar+ssl://"):
        raise RemoteConfigError(f"brokerClientTlsEnabled=true but cluster {cluster} has no "
                                "brokerServiceUrlTls (pulsar+ssl://...)")
    cert, key = tls["cert"], tls["key"]
    if method == "tls":
        cert, key = tls_auth_files(params)
    try:
        context = client_context(tls["trust"] or None, cert or None, key or None,
                                 bool(tls["insecure"]), bool(config.tlsHostnameVerificationEnabled))
    except (OSError, ssl.SSLError) as exc:
        raise RemoteConfigError(f"TLS files for cluster {cluster} cannot be loaded: {exc}") from None
    return RemoteSettings(url, _text(record, "serviceUrlTls"), context, method, params,
                          **_timing(config))


def _timing(config: Any) -> dict[str, float]:
    """The replication connection's keep-alive and timeouts from the broker's config: the
    keep-alive is ``keepAliveIntervalSeconds`` (the broker's own Ping interval, the
    Pulsar client's default 30 s); a connection attempt gets at most 10 s (the client's
    ``connectionTimeoutMs``) and at least two intervals when the keep-alive is longer."""
    keepalive = float(getattr(config, "keepAliveIntervalSeconds", 30) or 30)
    return {"keepalive_s": keepalive, "connect_timeout_s": min(10.0, 2 * keepalive),
            "send_timeout_s": max(30.0, 2 * keepalive)}
