"""BrokerSecurity: the broker's authentication, authorization, TLS listener and limits.

The service owns one (``service.security``) and starts and stops it with itself; connections
reach its parts through it. Periodic work: challenging connections whose credentials expire
(every ``authenticationRefreshCheckSeconds``) and reloading changed TLS files (every
``tlsCertRefreshCheckDurationSec``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar.broker.security.auth import binary as auth_binary
from magnetar.broker.security.auth.service import AuthenticationService
from magnetar.broker.security.authorization import AuthorizationService
from magnetar.broker.security.limits import Limits
from magnetar.broker.security.tls import TlsContextManager

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)


class BrokerSecurity:
    def __init__(self, service: BrokerService) -> None:
        config = service.config
        self.service = service
        self.config = config
        self.authentication = AuthenticationService(config)
        self.authorization = AuthorizationService(
            service.metadata, config, write=service.storage.write_metadata)
        self.limits = Limits(config)
        self.tls: TlsContextManager | None = (
            TlsContextManager(config) if config.needs_tls_context else None)
        self.tls_port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Open the TLS listener (if configured) and start the periodic work."""
        from magnetar.broker.connection.server_cnx import ServerCnx

        loop = asyncio.get_running_loop()
        service = self.service
        if self.tls is not None and self.config.tls_port is not None:
            self._server = await loop.create_server(
                lambda: ServerCnx(service),
                host=self.config.bindAddress,
                port=self.config.tls_port,
                ssl=self.tls.context,
                reuse_address=True,
                backlog=1024,
                ssl_handshake_timeout=max(1, self.config.magnetarHandshakeTimeoutSeconds or 60),
            )
            self.tls_port = self._server.sockets[0].getsockname()[1]
            log.info("broker listening for TLS on %s:%d", self.config.bindAddress, self.tls_port)
        if self.tls is not None and self.config.tlsCertRefreshCheckDurationSec > 0:
            self._tasks.append(asyncio.create_task(self._tls_reload_loop()))
        if self.authentication.enabled:
            self._tasks.append(asyncio.create_task(self._refresh_loop()))

    def stop(self) -> None:
        """Stop the periodic work and the TLS listener (the service closes connections)."""
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()

    async def _refresh_loop(self) -> None:
        interval = self.authentication.refresh_check_seconds
        while True:
            await asyncio.sleep(interval)
            for cnx in list(self.service.connections):
                try:
                    auth_binary.refresh_tick(cnx)
                except Exception:
                    log.exception("%s: checking credentials expiry failed", cnx.peer)

    async def _tls_reload_loop(self) -> None:
        assert self.tls is not None
        while True:
            await asyncio.sleep(self.config.tlsCertRefreshCheckDurationSec)
            try:
                self.tls.reload_if_changed()
            except Exception:
                log.exception("reloading the TLS files failed")
