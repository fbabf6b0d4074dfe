"""AdminServer: the broker's HTTP service (aiohttp) on ``webServicePort``, in the broker's
event loop: the admin API under ``/admin/v2``, HTTP lookup under ``/lookup/v2``,
``/metrics`` and the OpenAPI description, behind guard.py's timeouts, connection cap
and body limit. Handlers call the BrokerService directly (same
loop, no locking); a background task samples message rates every
``statsUpdateFrequencyInSecs`` for stats and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from magnetar.admin import (
    cluster,
    lookup,
    messages,
    metrics,
    namespace_limits,
    namespaces,
    openapi,
    permissions,
    schemas,
    subscriptions,
    tenants,
    topic_policies,
    topics,
    transaction_participants,
    transactions,
)
from magnetar.admin.auth import security_middleware
from magnetar.admin.guard import GUARD, ConnectionGuard, GuardedSite, body_middleware
from magnetar.admin.ratelimit import rate_limit_middleware
from magnetar.admin.routing import (
    PORTS,
    RATES,
    SERVICE,
    ListeningPorts,
    RouteTable,
    error_middleware,
    metadata_guard_middleware,
)
from magnetar.broker.service import BrokerService
from magnetar.broker.topics.stats import RateTracker

log = logging.getLogger(__name__)

#: every route table, in matching order
TABLES: list[RouteTable] = [
    openapi.routes, cluster.routes, tenants.routes, namespaces.routes, namespace_limits.routes,
    topics.routes, topic_policies.routes, subscriptions.routes,
    messages.routes, schemas.routes, permissions.routes,
    lookup.routes, metrics.routes, transaction_participants.routes,
    transactions.routes,
]


def build_app(service: BrokerService, rates: RateTracker | None = None) -> web.Application:
    """The aiohttp application serving the admin API for ``service``."""
    config = service.config
    # the body is read (within httpMaxRequestSize and the body timeout) before anything else
    middlewares = [body_middleware, error_middleware, security_middleware,
                   metadata_guard_middleware, cluster.owner_redirect_middleware]
    if config.httpRequestsLimitEnabled:  # outermost: a refused request costs nothing more
        middlewares.insert(0, rate_limit_middleware(config.httpRequestsMaxPerSecond))
    max_body = config.httpMaxRequestSize
    app = web.Application(middlewares=middlewares,
                          client_max_size=max_body if max_body > 0 else 1 << 62)
    app[SERVICE] = service
    app[RATES] = rates or RateTracker()
    app[PORTS] = ListeningPorts()
    app[GUARD] = ConnectionGuard(
        service.descriptors.http_connections, config.magnetarHttpHeaderTimeoutSeconds,
        config.magnetarHttpBodyTimeoutSeconds, max_body)
    app[openapi.OPENAPI] = openapi.document(TABLES)
    metrics.install_registry(app)
    for table in TABLES:
        table.install(app)
    return app


class AdminServer:
    """Runs the admin HTTP service of one broker: plain HTTP on ``port`` (None: not) and
    HTTPS on ``tls_port`` (None: not), with the broker's TLS context (``webServicePortTls``);
    the actual ports are known after ``start``."""

    def __init__(self, service: BrokerService, host: str, port: int | None,
                 stats_interval: float | None = None, tls_port: int | None = None) -> None:
        self.service = service
        self.host = host
        self.port = port
        self.tls_port = tls_port
        self.rates = RateTracker()
        interval = service.config.statsUpdateFrequencyInSecs if stats_interval is None else stats_interval
        self.stats_interval = max(0.1, float(interval))
        self.app = build_app(service, self.rates)
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task[None] | None = None
        self.http_started = False  # whether the HTTP port listens (start may fail after it)

    async def start(self) -> None:
        # lingering_time: how long the rest of a refused body (413, 408) is read and dropped
        # before the connection closes (aiohttp: 10 s)
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False,
                                     lingering_time=2.0)
        await self._runner.setup()
        backlog = self.service.config.httpServerAcceptQueueSize
        if self.port is not None:
            site = GuardedSite(self._runner, self.host, self.port, self.app[GUARD],
                               reuse_address=True, backlog=backlog)
            await site.start()
            self.port = int(self._runner.addresses[-1][1])
            self.app[PORTS].web = self.port
            self.http_started = True
            log.info("admin HTTP service on http://%s:%d", self.host, self.port)
        if self.tls_port is not None:
            tls = self.service.security.tls
            if tls is None:
                raise ValueError("webServicePortTls needs the broker's TLS settings")
            site = GuardedSite(self._runner, self.host, self.tls_port, self.app[GUARD],
                               reuse_address=True, ssl_context=tls.context, backlog=backlog)
            await site.start()
            self.tls_port = int(self._runner.addresses[-1][1])
            self.app[PORTS].web_tls = self.tls_port
            log.info("admin HTTPS service on https://%s:%d", self.host, self.tls_port)
        self.rates.sample(self.service)
        self._task = asyncio.create_task(self._sample_loop())

    async def _sample_loop(self) -> None:
        while True:
            await asyncio.sleep(self.stats_interval)
            try:
                await self.rates.sample_in_pieces(self.service)
            except Exception:
                log.exception("sampling topic rates failed")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._runner is not None:
            await self._runner.cleanup()
