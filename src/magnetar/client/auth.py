"""Authentication providers: what goes into ``Connect`` and answers an ``AuthChallenge``,
and the ``Authorization`` header of HTTP lookups."""

from __future__ import annotations

import base64
from collections.abc import Callable


class Authentication:
    """Base provider: no credentials."""

    method_name: str = "none"

    def auth_data(self) -> bytes:
        return b""

    def challenge(self, challenge: bytes) -> bytes:
        """Answer a broker challenge; by default the credentials are sent again."""
        return self.auth_data()

    def http_headers(self) -> dict[str, str]:
        """Headers that carry the credentials on an HTTP request (none by default)."""
        return {}


class AuthenticationToken(Authentication):
    """JWT token auth (``auth_method_name='token'``); ``token`` may be a callable."""

    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token

    def auth_data(self) -> bytes:
        token = self._token() if callable(self._token) else self._token
        return token.encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": "Bearer " + self.auth_data().decode()}


class AuthenticationBasic(Authentication):
    """HTTP-basic-style auth: ``username:password`` under method ``basic``."""

    def __init__(self, username: str, password: str, method: str = "basic") -> None:
        self._data = f"{username}:{password}".encode()
        self.method_name = method

    def auth_data(self) -> bytes:
        return self._data

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(self._data).decode()}


AuthToken = AuthenticationToken
AuthBasic = AuthenticationBasic
