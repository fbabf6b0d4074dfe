"""Username/password authentication (Pulsar's ``AuthenticationProviderBasic``, method ``basic``).

``basicAuthConf`` names the users: a file path, ``file:`` or ``data:`` URL, or base64 text,
holding ``user:hash`` lines (blank lines and ``#`` comments are skipped); the hash formats are
those of ``passwords``. The client sends ``user:password`` as the command's auth data, or an
``Authorization: Basic base64(user:password)`` header over HTTP.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

from magnetar.broker.security.auth.base import (
    AuthenticationError,
    AuthenticationProvider,
    AuthResult,
    AuthSource,
)
from magnetar.broker.security.auth.keys import read_key_value
from magnetar.broker.security.auth.passwords import UnsupportedHash, check_password, is_slow

log = logging.getLogger(__name__)

_REFUSED = "unknown user or invalid password"


def parse_users(text: str, where: str = "basicAuthConf") -> dict[str, str]:
    """``user:hash`` lines -> {user: hash}."""
    users: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        if not sep or not user or not stored:
            raise ValueError(f"{where}: line {lineno} is not user:hash")
        users[user] = stored
    return users


class BasicAuthenticationProvider(AuthenticationProvider):
    method_name = "basic"

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users
        self.slow = any(is_slow(h) for h in users.values())

    @classmethod
    def from_config(cls, config: Any) -> BasicAuthenticationProvider:
        if not config.basicAuthConf:
            raise ValueError("AuthenticationProviderBasic needs basicAuthConf")
        data = read_key_value(config.basicAuthConf, "basicAuthConf")
        return cls(parse_users(data.decode("utf-8", errors="replace")))

    def credentials_of(self, source: AuthSource) -> tuple[str, str]:
        if source.command_data is not None:
            text = source.command_data.decode("utf-8", errors="replace")
        else:
            header = (source.header("Authorization") or "").strip()
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() != "basic":
                raise AuthenticationError("expected an 'Authorization: Basic ...' header")
            try:
                text = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
            except (binascii.Error, ValueError):
                raise AuthenticationError("the Basic credentials are not valid base64") from None
        user, sep, password = text.partition(":")
        if not sep or not user:
            raise AuthenticationError("expected user:password")
        return user, password

    def authenticate(self, source: AuthSource) -> AuthResult:
        user, password = self.credentials_of(source)
        stored = self.users.get(user)
        if stored is None:
            raise AuthenticationError(_REFUSED)
        try:
            ok = check_password(password, stored)
        except UnsupportedHash as exc:
            log.error("basicAuthConf: the hash of user %s cannot be checked: %s", user, exc)
            raise AuthenticationError(_REFUSED) from None
        if not ok:
            raise AuthenticationError(_REFUSED)
        return AuthResult(user)
