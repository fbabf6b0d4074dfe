"""Authentication: providers (token, basic, tls), the service that picks one for a
connection or an HTTP request, and the binary protocol's Connect/AuthChallenge handling."""

from magnetar.broker.security.auth.base import (
    AuthenticationError,
    AuthenticationProvider,
    AuthResult,
    AuthSource,
)
from magnetar.broker.security.auth.service import AuthenticationService, Identity

__all__ = [
    "AuthResult",
    "AuthSource",
    "AuthenticationError",
    "AuthenticationProvider",
    "AuthenticationService",
    "Identity",
]
