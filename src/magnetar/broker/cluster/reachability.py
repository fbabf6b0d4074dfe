"""`Reachability`: whether another broker's service address accepts a TCP connection now.

A lookup that would redirect a client to a bundle's owner asks this first: an owner that
was killed keeps its ownership key until its metadata session expires, and sending clients
to its closed port only makes them back off (exponentially) until long after the bundle is
free (docs/cluster.md, "Failover"). The probe is a bare TCP connect (refused or timed out:
unreachable), closed at once. Concurrent asks for one address share one probe, so a burst
of lookups costs one connect per address. A failed probe is remembered for ``down_ttl_s``
(the lookups meanwhile know without a probe); a successful one is not, by default
(``up_ttl_s`` 0): a broker killed a moment after it answered a probe must be noticed by
the very next lookup, else that client is sent to the dead broker and backs off.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from urllib.parse import urlsplit

__all__ = ["Reachability", "address_of"]


def address_of(url: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``pulsar://`` / ``pulsar+ssl://`` URL, None if it has none."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname, port


class Reachability:
    """Cached TCP connect probes of broker addresses."""

    def __init__(self, timeout_s: float = 1.0, up_ttl_s: float = 0.0,
                 down_ttl_s: float = 1.0) -> None:
        self.timeout_s = timeout_s
        self.up_ttl_s = up_ttl_s
        self.down_ttl_s = down_ttl_s
        self._known: dict[tuple[str, int], tuple[float, bool]] = {}  # address: (when, up)
        self._probing: dict[tuple[str, int], asyncio.Task[bool]] = {}

    async def reachable(self, url: str) -> bool:
        """Whether ``url``'s address accepts a connection (a URL without one: True, so
        that nothing changes for it)."""
        address = address_of(url)
        if address is None:
            return True
        known = self._known.get(address)
        if known is not None and time.monotonic() - known[0] < self._ttl(known[1]):
            return known[1]
        probing = self._probing.get(address)
        if probing is None:  # one probe per address at a time, whoever asked first
            probing = asyncio.get_running_loop().create_task(self._probe(*address))
            self._probing[address] = probing
            probing.add_done_callback(
                lambda task: self._probing.pop(address) if self._probing.get(address) is task
                else None)
        return await asyncio.shield(probing)

    async def _probe(self, host: str, port: int) -> bool:
        up = True
        try:
            async with asyncio.timeout(self.timeout_s):
                _, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError):
            up = False
        else:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        now = time.monotonic()
        if len(self._known) >= 1024:  # brokers come and go: keep the fresh results
            self._known = {a: v for a, v in self._known.items()
                           if now - v[0] < self._ttl(v[1])}
        self._known[(host, port)] = (now, up)
        return up

    def _ttl(self, up: bool) -> float:
        return self.up_ttl_s if up else self.down_ttl_s
