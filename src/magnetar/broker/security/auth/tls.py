"""Client-certificate authentication (Pulsar's ``AuthenticationProviderTls``, method ``tls``).

The role is the common name (CN) of the certificate the client presented in the TLS
handshake, which the TLS layer has already verified against ``tlsTrustCertsFilePath``.
The auth data of the command is ignored.
"""

from __future__ import annotations

from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from magnetar.broker.security.auth.base import (
    AuthenticationError,
    AuthenticationProvider,
    AuthResult,
    AuthSource,
)


def peer_certificate(transport: Any) -> x509.Certificate | None:
    """The verified certificate a TLS client presented, if any."""
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    try:
        return x509.load_der_x509_certificate(der)
    except ValueError:
        return None


def common_name(certificate: x509.Certificate) -> str | None:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    value = names[0].value
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


class TlsAuthenticationProvider(AuthenticationProvider):
    method_name = "tls"

    @classmethod
    def from_config(cls, config: Any) -> TlsAuthenticationProvider:
        return cls()

    def authenticate(self, source: AuthSource) -> AuthResult:
        cert = source.peer_certificate
        if cert is None:
            raise AuthenticationError("no trusted client certificate was presented over TLS")
        role = common_name(cert)
        if not role:
            raise AuthenticationError("the client certificate has no common name (CN)")
        return AuthResult(role)  # the TLS layer checked the validity dates
