"""The broker settings of security and connection limits, with Pulsar's key names.

``BrokerConfig`` inherits these fields, so they read from ``broker.conf`` like every other
key. List-valued keys (``authenticationProviders``, ``superUserRoles``...) are the
comma-separated strings Pulsar uses; the ``*_list`` properties split them.
"""

from __future__ import annotations

from dataclasses import dataclass


class SecurityConfigError(ValueError):
    """A security setting that cannot be used as given."""


def split_list(value: str) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [item.strip() for item in value.split(",") if item.strip()]


@dataclass
class SecurityConfig:
    """Authentication, authorization, TLS and connection limits (Pulsar's names)."""

    # Authentication
    authenticationEnabled: bool = False
    authenticationProviders: str = ""
    authenticationRefreshCheckSeconds: int = 60
    anonymousUserRole: str = ""
    authenticateOriginalAuthData: bool = False
    proxyRoles: str = ""
    # tokens (AuthenticationProviderToken)
    tokenSecretKey: str = ""
    tokenPublicKey: str = ""
    tokenPublicAlg: str = "RS256"
    tokenAuthClaim: str = "sub"
    tokenAudienceClaim: str = "aud"
    tokenAudience: str = ""
    # basic (AuthenticationProviderBasic): a file or data: URL of user:hash lines
    basicAuthConf: str = ""

    # with authentication on, whether /metrics needs a credential too (Pulsar's default: no)
    authenticateMetricsEndpoint: bool = False

    # Authorization
    authorizationEnabled: bool = False
    superUserRoles: str = ""

    # TLS (brokerServicePortTls: -1 (blank in Pulsar) means no TLS listener; 0 any free port)
    brokerServicePortTls: int = -1
    tlsEnabled: bool = False
    # the admin HTTP service over TLS (https://); -1: none, 0: any free port
    webServicePortTls: int = -1
    tlsCertificateFilePath: str = ""
    tlsKeyFilePath: str = ""
    tlsTrustCertsFilePath: str = ""
    tlsAllowInsecureConnection: bool = False
    tlsRequireTrustedClientCertOnConnect: bool = False
    tlsProtocols: str = ""
    tlsCiphers: str = ""
    tlsCertRefreshCheckDurationSec: int = 300
    # this broker's own calls to other brokers (the leader's unload requests when it sheds
    # load): credentials and TLS, as Pulsar's brokerClient* keys (config/broker_client.py)
    brokerClientAuthenticationPlugin: str = ""
    brokerClientAuthenticationParameters: str = ""
    brokerClientTlsEnabled: bool = False
    brokerClientTrustCertsFilePath: str = ""
    brokerClientCertificateFilePath: str = ""
    brokerClientKeyFilePath: str = ""
    # whether those calls check the other broker's host name in its certificate
    tlsHostnameVerificationEnabled: bool = False

    # Limits (0: no limit)
    brokerMaxConnections: int = 0
    brokerMaxConnectionsPerIp: int = 0
    maxProducersPerTopic: int = 0
    maxConsumersPerTopic: int = 0
    maxConsumersPerSubscription: int = 0
    maxSubscriptionsPerTopic: int = 0
    # lookups and partitioned-metadata requests in progress, broker-wide (TooManyRequests
    # past it); topic loads in progress (Magnetar loads one at a time: see limits.py)
    maxConcurrentLookupRequest: int = 50000
    maxConcurrentTopicLoadRequest: int = 5000
    # the admin HTTP service: requests per second past which it answers 429
    httpRequestsLimitEnabled: bool = False
    httpRequestsMaxPerSecond: float = 100.0
    # Magnetar's own: a connection that has not completed Connect within this many seconds
    # is closed (0: only the keep-alive rule applies); producers/consumers per connection
    magnetarHandshakeTimeoutSeconds: int = 10
    magnetarMaxProducersPerConnection: int = 0
    magnetarMaxConsumersPerConnection: int = 0

    @property
    def authentication_providers_list(self) -> list[str]:
        return split_list(self.authenticationProviders)

    @property
    def super_user_roles(self) -> set[str]:
        return set(split_list(self.superUserRoles))

    @property
    def proxy_roles(self) -> set[str]:
        return set(split_list(self.proxyRoles))

    @property
    def tls_port(self) -> int | None:
        """The TLS listener's port, or None when there is none."""
        if self.brokerServicePortTls >= 0:
            return self.brokerServicePortTls
        return 6651 if self.tlsEnabled else None

    @property
    def needs_tls_context(self) -> bool:
        """A TLS listener (binary or HTTP) is configured."""
        return self.tls_port is not None or self.webServicePortTls >= 0

    def validate_security(self) -> None:
        if self.authenticationRefreshCheckSeconds <= 0:
            raise SecurityConfigError("authenticationRefreshCheckSeconds must be positive")
        if self.authenticationEnabled and not self.authentication_providers_list:
            raise SecurityConfigError(
                "authenticationEnabled=true needs authenticationProviders (for instance "
                "org.apache.pulsar.broker.authentication.AuthenticationProviderToken)"
            )
        if self.tls_port is not None and not (self.tlsCertificateFilePath and self.tlsKeyFilePath):
            raise SecurityConfigError(
                "a TLS listener (brokerServicePortTls) needs tlsCertificateFilePath and tlsKeyFilePath"
            )
        if self.webServicePortTls >= 0 and not (self.tlsCertificateFilePath and self.tlsKeyFilePath):
            raise SecurityConfigError(
                "webServicePortTls needs tlsCertificateFilePath and tlsKeyFilePath")
        if self.webServicePortTls > 65535:
            raise SecurityConfigError(f"webServicePortTls must be a TCP port, not {self.webServicePortTls}")
        if self.tls_port is not None and self.tls_port > 65535:
            raise SecurityConfigError(f"brokerServicePortTls must be a TCP port, not {self.tls_port}")
        if self.brokerServicePort < 0 and self.tls_port is None:  # type: ignore[attr-defined]
            raise SecurityConfigError(
                "brokerServicePort=-1 (no plain-text listener) needs brokerServicePortTls")
        from magnetar.broker.config.broker_client import (
            BrokerClientConfigError,
            BrokerClientCredentials,
        )

        try:
            BrokerClientCredentials.from_config(self)
        except BrokerClientConfigError as exc:
            raise SecurityConfigError(str(exc)) from None
        if self.tlsCertRefreshCheckDurationSec < 0:
            raise SecurityConfigError("tlsCertRefreshCheckDurationSec must be >= 0 (0: never)")
        for key in ("brokerMaxConnections", "brokerMaxConnectionsPerIp", "maxProducersPerTopic",
                    "maxConsumersPerTopic", "maxConsumersPerSubscription",
                    "maxSubscriptionsPerTopic", "magnetarHandshakeTimeoutSeconds",
                    "magnetarMaxProducersPerConnection", "magnetarMaxConsumersPerConnection"):
            if getattr(self, key) < 0:
                raise SecurityConfigError(f"{key} must be >= 0 (0: no limit)")
        for key in ("maxConcurrentLookupRequest", "maxConcurrentTopicLoadRequest"):
            if getattr(self, key) < 1:  # Pulsar would refuse (or queue) every request
                raise SecurityConfigError(f"{key} must be at least 1")
        if not self.httpRequestsMaxPerSecond > 0:
            raise SecurityConfigError("httpRequestsMaxPerSecond must be positive")
