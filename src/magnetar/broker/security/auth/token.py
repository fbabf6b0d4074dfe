"""JWT token authentication (Pulsar's ``AuthenticationProviderToken``, method ``token``).

Tokens are verified with ``tokenSecretKey`` (HMAC: HS256/384/512) or, when that is not set,
``tokenPublicKey`` (RSA: RS*/PS*, EC: ES*, chosen by the key's type). The role is the
``tokenAuthClaim`` claim (default ``sub``). With ``tokenAudience`` set, the
``tokenAudienceClaim`` claim (default ``aud``) must name it. An ``exp`` claim makes the
credentials expire: the connection is then challenged to refresh them (see ``binary``).
Over HTTP the token comes in ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import logging
from typing import Any

import jwt

from magnetar.broker.security.auth.base import (
    AuthenticationError,
    AuthenticationProvider,
    AuthResult,
    AuthSource,
)
from magnetar.broker.security.auth.keys import algorithms_for_key, load_public_key, read_key_value

log = logging.getLogger(__name__)

HMAC_ALGORITHMS = ["HS256", "HS384", "HS512"]


class TokenAuthenticationProvider(AuthenticationProvider):
    method_name = "token"

    def __init__(self, secret_key: str = "", public_key: str = "", auth_claim: str = "sub",
                 audience_claim: str = "aud", audience: str = "") -> None:
        if secret_key:
            self.key: Any = read_key_value(secret_key, "tokenSecretKey", allow_path=False)
            self.algorithms = HMAC_ALGORITHMS
        elif public_key:
            raw = read_key_value(public_key, "tokenPublicKey", allow_path=False)
            self.key = load_public_key(raw, "tokenPublicKey")
            self.algorithms = algorithms_for_key(self.key)
        else:
            raise ValueError(
                "AuthenticationProviderToken needs tokenSecretKey or tokenPublicKey"
            )
        self.auth_claim = auth_claim or "sub"
        self.audience_claim = audience_claim or "aud"
        self.audience = audience

    @classmethod
    def from_config(cls, config: Any) -> TokenAuthenticationProvider:
        return cls(config.tokenSecretKey, config.tokenPublicKey, config.tokenAuthClaim,
                   config.tokenAudienceClaim, config.tokenAudience)

    def token_of(self, source: AuthSource) -> str:
        if source.command_data is not None:
            try:
                token = source.command_data.decode("ascii").strip()
            except UnicodeDecodeError:
                raise AuthenticationError("the token is not ASCII text") from None
        else:
            header = source.header("Authorization") or ""
            scheme, _, token = header.strip().partition(" ")
            if scheme.lower() != "bearer":
                raise AuthenticationError("expected an 'Authorization: Bearer <token>' header")
            token = token.strip()
        if not token:
            raise AuthenticationError("blank token")
        return token

    def authenticate(self, source: AuthSource) -> AuthResult:
        token = self.token_of(source)
        try:
            claims = jwt.decode(
                token, self.key, algorithms=self.algorithms,
                options={"verify_aud": False, "require": []},
            )
        except jwt.ExpiredSignatureError:
            raise AuthenticationError("the token has expired") from None
        except jwt.InvalidSignatureError:
            raise AuthenticationError("the token's signature does not verify") from None
        except jwt.InvalidTokenError as exc:
            raise AuthenticationError(f"invalid token: {exc}") from None
        if self.audience:
            audience = claims.get(self.audience_claim)
            names = audience if isinstance(audience, list) else [audience]
            if self.audience not in names:
                raise AuthenticationError(
                    f"the token's {self.audience_claim!r} claim does not name this broker's audience"
                )
        role = claims.get(self.auth_claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationError(f"the token has no {self.auth_claim!r} claim naming a role")
        exp = claims.get("exp")
        return AuthResult(role, float(exp) if isinstance(exp, int | float) else None)
