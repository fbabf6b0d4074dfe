"""BrokerSecurity: the broker's authentication, authorization, TLS listener and limits.

The service owns one (``service.security``) and starts and stops it with itself; connections
reach its parts through it. The connection room sits above this one, so the service hands in
what the TLS listener serves (``new_connection``) and how connections are checked for
expiring credentials (``check_credentials``). Periodic work: challenging connections whose credentials expire
(every ``authenticationRefreshCheckSeconds``) and reloading changed TLS files (every
``tlsCertRefreshCheckDurationSec``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar.broker.security.auth.service import AuthenticationService
from magnetar.broker.security.authorization import AuthorizationService
from magnetar.broker.security.limits import Limits
from magnetar.broker.security.tls import TlsContextManager

if TYPE_CHECKING:
    from collections.abc import Callable

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
        self.limits = Limits(config, service.descriptors.connections)
        self.tls: TlsContextManager | None = (
            TlsContextManager(config) if config.needs_tls_context else None)
        self.tls_port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, new_connection: Callable[[], asyncio.BaseProtocol],
                    check_credentials: Callable[[], None], accept: bool = True) -> None:
        """Open the TLS listener (if configured) serving ``new_connection()`` for each
        client, and start the periodic work (``check_credentials()`` every
        ``authenticationRefreshCheckSeconds``). ``accept=False``: bound, accepting only
        from `accept_connections`."""
        loop = asyncio.get_running_loop()
        if self.tls is not None and self.config.tls_port is not None:
            self._server = await loop.create_server(
                new_connection,
                host=self.config.bindAddress,
                port=self.config.tls_port,
                ssl=self.tls.context,
                reuse_address=True,
                backlog=1024,
                ssl_handshake_timeout=max(1, self.config.magnetarHandshakeTimeoutSeconds or 60),
                start_serving=accept,
            )
            self.tls_port = self._server.sockets[0].getsockname()[1]
            log.info("broker listening for TLS on %s:%d", self.config.bindAddress, self.tls_port)
        if self.tls is not None and self.config.tlsCertRefreshCheckDurationSec > 0:
            self._tasks.append(asyncio.create_task(self._tls_reload_loop()))
        if self.authentication.enabled:
            self._tasks.append(asyncio.create_task(self._refresh_loop(check_credentials)))

    async def accept_connections(self) -> None:
        """Start accepting on the TLS port bound by ``start(accept=False)``."""
        if self._server is not None:
            await self._server.start_serving()

    def stop(self) -> None:
        """Stop the periodic work and the TLS listener (the service closes connections)."""
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()

    async def _refresh_loop(self, check_credentials: Callable[[], None]) -> None:
        interval = self.authentication.refresh_check_seconds
        while True:
            await asyncio.sleep(interval)
            check_credentials()

    async def _tls_reload_loop(self) -> None:
        assert self.tls is not None
        while True:
            await asyncio.sleep(self.config.tlsCertRefreshCheckDurationSec)
            try:
                self.tls.reload_if_changed()
            except Exception:
                log.exception("reloading the TLS files failed")
