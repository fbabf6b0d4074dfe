"""AuthenticationService: the configured providers, and who a new connection or request is.

``authenticationProviders`` lists Pulsar's provider class names (or ours, or the bare method
names ``token``/``basic``/``tls``); each maps to one of our providers. A Connect names its
method in ``auth_method_name``; without one, or with a method no provider serves, the
connection gets ``anonymousUserRole`` if that is set (authorization then decides what it
may do, as in Pulsar), and is refused otherwise. Credentials a provider rejects are
refused whether or not there is an anonymous role.

Proxies, as Pulsar checks them: a connection that authenticates as one of ``proxyRoles``
must carry ``original_principal`` (the client it speaks for), which may not itself be a
proxy role; any other connection may not carry one. With ``authenticateOriginalAuthData``,
the forwarded ``original_auth_data`` is authenticated too and must prove that principal.

``authenticate_http(headers, peer_certificate)`` is the entry point for the admin HTTP
layer: it picks the provider from ``X-Pulsar-Auth-Method-Name``, else from the
``Authorization`` header's scheme (Bearer: token, Basic: basic) or the TLS client
certificate; as in Pulsar's web service, a request without a named method that no
provider accepts is the anonymous role when there is one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.security.auth.base import (
    AuthenticationError,
    AuthenticationProvider,
    AuthResult,
    AuthSource,
)
from magnetar.broker.security.auth.basic import BasicAuthenticationProvider
from magnetar.broker.security.auth.tls import TlsAuthenticationProvider
from magnetar.broker.security.auth.token import TokenAuthenticationProvider

log = logging.getLogger(__name__)

AUTH_METHOD_HEADER = "X-Pulsar-Auth-Method-Name"  # names the provider an HTTP request uses

_PULSAR_PACKAGE = "org.apache.pulsar.broker.authentication."
PROVIDER_CLASSES: dict[str, type[Any]] = {
    "AuthenticationProviderToken": TokenAuthenticationProvider,
    "AuthenticationProviderBasic": BasicAuthenticationProvider,
    "AuthenticationProviderTls": TlsAuthenticationProvider,
    "TokenAuthenticationProvider": TokenAuthenticationProvider,
    "BasicAuthenticationProvider": BasicAuthenticationProvider,
    "TlsAuthenticationProvider": TlsAuthenticationProvider,
    "token": TokenAuthenticationProvider,
    "basic": BasicAuthenticationProvider,
    "tls": TlsAuthenticationProvider,
}


def provider_class(name: str) -> type[Any]:
    """Our provider class for a Pulsar class name (or our own name)."""
    short = name.strip()
    for prefix in (_PULSAR_PACKAGE, "magnetar.broker.security.auth."):
        short = short.removeprefix(prefix)
    short = short.rsplit(".", 1)[-1] if short not in PROVIDER_CLASSES else short
    cls = PROVIDER_CLASSES.get(short)
    if cls is None:
        known = ", ".join(_PULSAR_PACKAGE + n for n in
                          ("AuthenticationProviderToken", "AuthenticationProviderBasic",
                           "AuthenticationProviderTls"))
        raise ValueError(f"authenticationProviders: {name!r} is not supported (use {known})")
    return cls


@dataclass
class Identity:
    """Who a connection is: the role it authenticated as, the principal it acts for
    (a proxied client's ``original_principal``, else the role), and until when."""

    method: str
    role: str
    original_principal: str | None = None
    expires_at: float | None = None

    @property
    def principal(self) -> str:
        return self.original_principal or self.role


class AuthenticationService:
    """Owns the providers; authenticates Connects, AuthResponses and HTTP requests."""

    def __init__(self, config: Any) -> None:
        self.enabled = bool(config.authenticationEnabled)
        self.anonymous_role = config.anonymousUserRole or None
        self.proxy_roles: set[str] = config.proxy_roles
        self.authenticate_original = bool(config.authenticateOriginalAuthData)
        self.refresh_check_seconds = config.authenticationRefreshCheckSeconds
        self.providers: dict[str, AuthenticationProvider] = {}
        # counters (for stats and tests): refused authentications, accepted refreshes
        self.refused = 0
        self.refreshed = 0
        if self.enabled:
            for name in config.authentication_providers_list:
                provider = provider_class(name).from_config(config)
                self.providers[provider.method_name] = provider
            log.info("authentication enabled: methods %s", ", ".join(sorted(self.providers)))

    async def verify(self, method: str, source: AuthSource) -> AuthResult:
        """Authenticate ``source`` with the provider of ``method``."""
        provider = self.providers.get(method)
        if provider is None:
            if self.anonymous_role:
                # as Pulsar does: no provider for the method (or none named) means the
                # anonymous role; authorization then decides what it may do
                if method not in ("", "none"):
                    log.info("%s: authentication method %r is not enabled: connected as the "
                             "anonymous role %s", source.peer, method, self.anonymous_role)
                return AuthResult(self.anonymous_role)
            raise AuthenticationError(
                f"authentication method {method or 'none'!r} is not enabled and anonymous "
                "access is not allowed"
            )
        if provider.slow:  # password hashing: keep the event loop serving others
            return await asyncio.to_thread(provider.authenticate, source)
        return provider.authenticate(source)

    async def authenticate_connect(self, connect: Any, peer_certificate: Any,
                                   peer: str) -> Identity:
        """The identity of a connection from its ``CommandConnect``."""
        method = connect.auth_method_name if connect.HasField("auth_method_name") else ""
        if not method and peer_certificate is not None and "tls" in self.providers:
            method = "tls"
        data = bytes(connect.auth_data) if connect.HasField("auth_data") else b""
        result = await self.verify(method, AuthSource(data, None, peer_certificate, peer))
        original = connect.original_principal if connect.HasField("original_principal") else ""
        self.check_proxy(result.role, original)
        if original and self.authenticate_original and connect.HasField("original_auth_data"):
            original_method = (connect.original_auth_method
                               if connect.HasField("original_auth_method") else method)
            proved = await self.verify(original_method, AuthSource(
                bytes(connect.original_auth_data), None, None, peer))
            if proved.role != original:
                raise AuthenticationError("original_auth_data does not prove original_principal")
        return Identity(method or "none", result.role, original or None, result.expires_at)

    def check_proxy(self, role: str, original_principal: str) -> None:
        if role in self.proxy_roles:
            if not original_principal:
                raise AuthenticationError(
                    "original_principal must be provided when connecting with a proxy role")
            if original_principal in self.proxy_roles:
                raise AuthenticationError("original_principal cannot be a proxy role")
        elif original_principal and original_principal != role:
            raise AuthenticationError(
                "original_principal may only be given by a connection with a proxy role")

    async def authenticate_http_async(self, headers: Mapping[str, str],
                                      peer_certificate: Any = None, peer: str = "?") -> Identity:
        """``authenticate_http`` with the provider's work (a bcrypt check) off the event loop:
        what an asyncio HTTP handler should call."""
        return await asyncio.to_thread(self.authenticate_http, headers, peer_certificate, peer)

    def authenticate_http(self, headers: Mapping[str, str], peer_certificate: Any = None,
                          peer: str = "?") -> Identity:
        """The identity of an HTTP request (for the admin layer). Raises
        ``AuthenticationError`` (answer 401) when it does not authenticate.

        As Pulsar's web service decides: a request naming its method in
        ``X-Pulsar-Auth-Method-Name`` must authenticate with that provider; otherwise the
        provider of the ``Authorization`` scheme (or the TLS certificate) is tried, and a
        request none of them accepts (no credentials, an unknown scheme, or credentials
        refused) gets ``anonymousUserRole`` when one is set (authorization then decides)."""
        source = AuthSource(None, headers, peer_certificate, peer)
        named = (source.header(AUTH_METHOD_HEADER) or "").strip()
        if named:
            provider = self.providers.get(named)
            if provider is None:
                raise AuthenticationError(f"unsupported authentication method {named!r}")
            return self._http_identity(named, provider.authenticate(source), source)
        scheme = (source.header("Authorization") or "").strip().partition(" ")[0].lower()
        method = {"bearer": "token", "basic": "basic"}.get(scheme, "")
        if not method and peer_certificate is not None and "tls" in self.providers:
            method = "tls"
        provider = self.providers.get(method)
        try:
            if provider is None:
                raise AuthenticationError("no credentials this broker accepts")
            result = provider.authenticate(source)
        except AuthenticationError as exc:
            if not self.anonymous_role:
                raise
            log.info("%s: HTTP request not authenticated (%s): served as the anonymous role %s",
                     peer, exc, self.anonymous_role)
            return Identity("none", self.anonymous_role)
        return self._http_identity(method, result, source)

    def _http_identity(self, method: str, result: AuthResult, source: AuthSource) -> Identity:
        original = source.header("X-Original-Principal") or ""
        self.check_proxy(result.role, original)
        return Identity(method, result.role, original or None, result.expires_at)
