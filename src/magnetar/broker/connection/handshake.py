"""The connect/auth command family: Connect, AuthChallenge/AuthResponse, expiry.

``ServerCnx`` calls in here and keeps only the outcome (``cnx.identity``). With
authentication enabled, a Connect is authenticated in a task (a bcrypt check runs off the
loop); any other command that arrives meanwhile is "a command before Connect" and closes the
connection, as before. A refused Connect gets an ``Error`` with ``AuthenticationError`` and
the connection closes; the refusal is logged once with the method and reason.

Expiring credentials (a token with ``exp``): every ``authenticationRefreshCheckSeconds`` the
broker looks at each connection; one whose credentials expire before the next look gets an
``AuthChallenge`` (auth data ``refresh``), which the official clients answer with an
``AuthResponse`` carrying fresh credentials (a token supplier is called again). They must
authenticate as the same role. A connection still unanswered once its credentials have
expired, or whose client does not support refresh, is closed.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from magnetar.broker.security.auth.base import AuthenticationError, AuthSource
from magnetar.broker.security.auth.service import Identity
from magnetar.broker.security.auth.tls import peer_certificate
from magnetar.protocol import pb
from magnetar.protocol.version import PROTOCOL_VERSION

if TYPE_CHECKING:
    from collections.abc import Callable

    from magnetar.broker.connection.server_cnx import ServerCnx

log = logging.getLogger(__name__)

T = pb.BaseCommand
REFRESH = b"refresh"


def _refuse(cnx: ServerCnx, what: str, method: str, reason: str) -> None:
    log.warning("%s: %s refused (method %s): %s", cnx.peer, what, method or "none", reason)
    cnx.service.security.authentication.refused += 1
    if not cnx.closed:
        cnx.send_error((1 << 64) - 1, pb.AuthenticationError, f"authentication failed: {reason}")
        cnx.close()


def start_connect(cnx: ServerCnx, connect: pb.CommandConnect,
                  complete: Callable[[Identity], None]) -> None:
    """Authenticate ``connect``; call ``complete(identity)`` on success."""
    method = connect.auth_method_name if connect.HasField("auth_method_name") else ""

    async def run() -> None:
        try:
            identity = await cnx.service.security.authentication.authenticate_connect(
                connect, peer_certificate(cnx.transport), cnx.peer)
        except AuthenticationError as exc:
            _refuse(cnx, "Connect", method, str(exc))
            return
        except Exception:
            log.exception("%s: authenticating a Connect failed", cnx.peer)
            _refuse(cnx, "Connect", method, "internal error")
            return
        if cnx.closed:
            return
        log.debug("%s: authenticated as %s (method %s)", cnx.peer, identity.role, identity.method)
        complete(identity)

    cnx.auth_task = cnx.loop.create_task(run())


def refresh_tick(cnx: ServerCnx, now: float | None = None) -> None:
    """Challenge or close a connection whose credentials expire (see the module doc)."""
    identity = cnx.identity
    if cnx.closed or identity is None or identity.expires_at is None:
        return
    now = time.time() if now is None else now
    interval = cnx.service.security.authentication.refresh_check_seconds
    expired = now >= identity.expires_at
    if cnx.auth_challenge_pending:
        if expired:
            log.warning("%s: closing connection: role %s did not refresh its expired credentials",
                        cnx.peer, identity.role)
            cnx.service.security.authentication.refused += 1
            cnx.close()
        return
    if now + interval < identity.expires_at:
        return
    if not cnx.supports_auth_refresh:
        if expired:
            log.warning("%s: closing connection: the credentials of role %s expired and the "
                        "client cannot refresh them", cnx.peer, identity.role)
            cnx.service.security.authentication.refused += 1
            cnx.close()
        return
    cnx.auth_challenge_pending = True
    challenge = pb.CommandAuthChallenge(
        server_version=cnx.server_version,
        challenge=pb.AuthData(auth_method_name=identity.method, auth_data=REFRESH),
        protocol_version=min(PROTOCOL_VERSION, cnx.remote_protocol_version),
    )
    cnx.send(T(type=T.AUTH_CHALLENGE, authChallenge=challenge))


def handle_auth_response(cnx: ServerCnx, cmd: pb.BaseCommand) -> None:
    """Check the fresh credentials of an ``AuthResponse``."""
    identity = cnx.identity
    resp = cmd.authResponse
    data = resp.response if resp.HasField("response") else pb.AuthData()
    method = data.auth_method_name or (identity.method if identity else "")
    if identity is None:
        cnx._protocol_violation("AuthResponse without an authenticated Connect")
        return
    if method != identity.method:
        _refuse(cnx, "AuthResponse", method, f"method differs from the Connect's ({identity.method})")
        return
    source = AuthSource(bytes(data.auth_data), None, peer_certificate(cnx.transport), cnx.peer)

    async def run() -> None:
        try:
            result = await cnx.service.security.authentication.verify(method, source)
        except AuthenticationError as exc:
            _refuse(cnx, f"credentials refresh of role {identity.role}", method, str(exc))
            return
        if result.role != identity.role:
            _refuse(cnx, "AuthResponse", method,
                    f"refreshed credentials name role {result.role}, not {identity.role}")
            return
        identity.expires_at = result.expires_at
        cnx.auth_challenge_pending = False
        cnx.service.security.authentication.refreshed += 1
        log.debug("%s: role %s refreshed its credentials", cnx.peer, identity.role)

    cnx.auth_task = cnx.loop.create_task(run())


__all__ = ["Identity", "handle_auth_response", "refresh_tick", "start_connect"]
