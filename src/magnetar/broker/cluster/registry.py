"""`BrokerRegistry`: this broker's ephemeral entry under ``/loadbalance/brokers``, its load
report refreshed periodically, and the live brokers as the other brokers report them.

The entry's key is the broker id, ``host:webPort`` as in Pulsar; its value a
`BrokerData` (Pulsar's ``LocalBrokerData``). ``report`` is a callable the broker supplies
that returns the current report (URLs plus load figures); the registry writes it every
``interval_s`` (a `Periodic`; a failed write is logged and retried next time) and whenever
``refresh()`` is called, and at once when a lost metadata session is replaced
(SESSION_REESTABLISHED: the entry went with the old session). ``live()`` reads the other
entries through a `MetadataCache`, so it costs no round trip while nothing changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from magnetar.broker.cluster.periodic import Periodic
from magnetar.broker.cluster.records import BROKERS_ROOT, BrokerData, broker_path
from magnetar.metadata import (
    MetadataCache,
    MetadataStore,
    SessionEvent,
    json_encode,
)

log = logging.getLogger(__name__)


class BrokerRegistry:
    def __init__(self, store: MetadataStore, broker_id: str,
                 report: Callable[[], BrokerData], interval_s: float = 5.0) -> None:
        self.store = store
        self.broker_id = broker_id
        self.report = report
        self.interval_s = interval_s
        self._cache: MetadataCache[Any] = MetadataCache(store)
        self._refresher = Periodic("broker registry: load report", interval_s, self._tick)
        self.last: BrokerData | None = None
        self._again: asyncio.Task[None] | None = None
        store.register_session_listener(self._on_session)

    @property
    def path(self) -> str:
        return broker_path(self.broker_id)

    async def start(self) -> None:
        """Register (create the ephemeral entry) and start the periodic refresh."""
        await self.refresh()
        self._refresher.start()

    def _on_session(self, event: SessionEvent) -> None:
        if event == SessionEvent.SESSION_REESTABLISHED and self._refresher.running \
                and (self._again is None or self._again.done()):
            self._again = asyncio.get_running_loop().create_task(self._register_again())

    async def _register_again(self) -> None:
        try:
            await self.refresh()
        except Exception as exc:  # the periodic refresh creates it later
            log.warning("registering %s again: %s", self.broker_id, exc or type(exc).__name__)
        else:
            log.info("registered %s again in the new metadata session", self.broker_id)

    async def stop(self) -> None:
        if self._again is not None:
            self._again.cancel()
        await self._refresher.stop()
        with contextlib.suppress(Exception):
            await self.store.delete(self.path)

    async def _tick(self) -> None:
        """The periodic refresh; skipped while the store is unavailable (it said so once)."""
        if self.store.unavailable_reason() is None:
            await self.refresh()

    async def refresh(self) -> None:
        """Write the current load report (creating the entry if it is missing)."""
        data = self.report()
        self.last = data
        await self.store.put(self.path, json_encode(data.to_json()), ephemeral=True)

    async def live(self) -> dict[str, BrokerData]:
        """The live brokers by id (this one included), from their registry entries."""
        out: dict[str, BrokerData] = {}
        for name in await self._cache.children(BROKERS_ROOT):
            data = await self._cache.get(broker_path(name))
            if isinstance(data, dict):
                out[name] = BrokerData.from_json(data)
        return out
