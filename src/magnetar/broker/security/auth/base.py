"""The provider interface every authentication method implements, and what it returns.

A provider turns credentials into a role (Pulsar's word for a principal). Credentials come
from one of two places, described by ``AuthSource``: a binary-protocol ``Connect`` or
``AuthResponse`` (``command_data``, plus the TLS peer certificate when there is one), or an
HTTP request (``http_headers`` and the peer certificate). ``authenticate_http`` is the entry
point the admin HTTP layer calls; each provider knows which header carries its credentials.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class AuthenticationError(Exception):
    """Credentials that do not authenticate; the message is safe to send and log
    (it never contains a secret)."""


@dataclass(frozen=True)
class AuthSource:
    """Where credentials come from: a command's auth data or an HTTP request's headers."""

    command_data: bytes | None = None
    http_headers: Mapping[str, str] | None = None
    peer_certificate: Any = None  # cryptography.x509.Certificate of a verified TLS peer
    peer: str = "?"

    def header(self, name: str) -> str | None:
        """A header by case-insensitive name."""
        if self.http_headers is None:
            return None
        lowered = name.lower()
        for key, value in self.http_headers.items():
            if key.lower() == lowered:
                return value
        return None


@dataclass(frozen=True)
class AuthResult:
    """A successful authentication: the role, and when the credentials stop being valid
    (epoch seconds; None: they do not expire)."""

    role: str
    expires_at: float | None = None


class AuthenticationProvider(ABC):
    """One authentication method (``auth_method_name`` on the wire)."""

    #: the auth method name the clients send (token, basic, tls)
    method_name: str = ""
    #: True when ``authenticate`` may take long enough (password hashing) to be run off
    #: the event loop
    slow: bool = False

    @abstractmethod
    def authenticate(self, source: AuthSource) -> AuthResult:
        """The role these credentials prove, or raise ``AuthenticationError``."""

    def authenticate_http(self, headers: Mapping[str, str], peer_certificate: Any = None,
                          peer: str = "?") -> AuthResult:
        """Authenticate an HTTP request by its headers (and TLS peer certificate)."""
        return self.authenticate(AuthSource(http_headers=headers, peer_certificate=peer_certificate,
                                            peer=peer))
