"""`Placements`: where a free bundle goes, decided once for the whole cluster.

A free bundle's placement record, ``/magnetar/handoff/{tenant}/{ns}/{range}`` (``{"brokerId",
"until"}``, valid ``HANDOFF_S``), names the broker it goes to. An unloading owner writes it
(its handoff: the next owner, `write_handoff`); a lookup that finds a bundle free and no
valid record places it (`placement.least_loaded` over the live brokers' reports, counting
what this broker placed since those reports and the bundles it holds, takes or placed on
itself) and writes that choice with compare-and-set: the first broker to write decides,
the others re-read the record and follow it (`decide`). So every broker sends a free
bundle's clients to the same broker, which takes the bundle when they arrive and drops the
record (`drop_handoff`). Lookups of one bundle at one broker share one decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from magnetar.broker.cluster.bundles import BundleRange
from magnetar.broker.cluster.placement import least_loaded
from magnetar.broker.cluster.records import BrokerData, OwnerData, handoff_path
from magnetar.broker.cluster.registry import BrokerRegistry
from magnetar.metadata import (
    BadVersionError,
    MetadataCache,
    MetadataStore,
    json_decode,
    json_encode,
)

log = logging.getLogger(__name__)

#: how long a placement record (an unloading owner's handoff, or a lookup's placement) is
#: followed by lookups
HANDOFF_S = 30.0

Bundle = tuple[str, BundleRange]


class Placements:
    """The placement records of free bundles, and this broker's placement choices."""

    def __init__(self, store: MetadataStore, broker_id: str, me: OwnerData,
                 registry: BrokerRegistry, report: Callable[[], BrokerData],
                 mine: Callable[[], tuple[set[Bundle], int]],
                 answers: Callable[[str], Awaitable[bool]]) -> None:
        """``report``: this broker's load report now; ``mine``: the bundles it owns or is
        taking, and how many it counts as its own; ``answers``: whether a broker's service
        address accepts connections (no broker is placed where it does not)."""
        self.store = store
        self.broker_id = broker_id
        self.me = me
        self.registry = registry
        self.report = report
        self.mine = mine
        self.answers = answers
        # a broker above it gets no free bundle while another is below (placement.py)
        self.overload_threshold = 85.0
        self._handoffs: MetadataCache[object] = MetadataCache(store)
        # bundles sent to other brokers since their last report: (broker id, when)
        self._placed: list[tuple[str, float]] = []
        # free bundles this broker placed on itself, not taken yet (counted as its own)
        self._placed_here: dict[Bundle, float] = {}
        self._deciding: dict[Bundle, asyncio.Task[tuple[str, OwnerData] | None]] = {}

    # -- handoffs: where an unloaded bundle goes, for every broker to see ------------------
    async def write_handoff(self, namespace: str, bundle: BundleRange, target: str) -> None:
        """Record (persistently, for ``HANDOFF_S``) that the bundle goes to ``target``:
        between this owner's release and the target's taking it, a lookup at any broker
        sends the client there, instead of placing the free bundle anew (where it could
        land back on this broker, which has just become the least loaded)."""
        until = int((time.time() + HANDOFF_S) * 1000)
        try:
            await self.store.put(handoff_path(namespace, bundle), json_encode(
                {"brokerId": target, "until": until, "unloadedBy": self.broker_id}))
        except Exception as exc:  # without it the move still works, placement decides
            log.warning("bundle %s/%s: handoff to %s not recorded: %s", namespace, bundle,
                        target, exc)

    async def handoff_target(self, namespace: str, bundle: BundleRange) -> str | None:
        """The broker a free bundle's placement record names, while it is recent."""
        record = await self.record(namespace, bundle)
        return None if record is None else str(record["brokerId"])

    async def record(self, namespace: str, bundle: BundleRange) -> dict[str, object] | None:
        """The bundle's placement record while it is recent (``brokerId``, ``until``, and
        ``unloadedBy`` when an unloading owner wrote it), else None."""
        data = await self._handoffs.get(handoff_path(namespace, bundle))
        if not isinstance(data, dict) or not isinstance(data.get("brokerId"), str):
            return None
        until = data.get("until")
        if not isinstance(until, int) or until < time.time() * 1000:
            return None
        return data

    async def drop_handoff(self, namespace: str, bundle: BundleRange) -> None:
        """The target took the bundle: its handoff record has served."""
        if await self.handoff_target(namespace, bundle) is None:
            return
        with contextlib.suppress(Exception):
            await self.store.delete(handoff_path(namespace, bundle))

    # -- assignments: one placement of a free bundle, for every broker to follow -----------
    async def decide(self, namespace: str, bundle: BundleRange, avoid: set[str]
                     ) -> tuple[str, OwnerData] | None:
        """The broker the free bundle goes to, as the cluster agrees: a recent handoff or
        assignment record naming a live broker, else this broker's placement written as
        that record with compare-and-set (the first broker to write one decides; the
        others follow it). Lookups of one bundle here share one decision. None: no record
        could be written (the store refused): take it here, the ownership key decides."""
        key = (namespace, bundle)
        deciding = self._deciding.get(key)
        if deciding is None:
            deciding = asyncio.get_running_loop().create_task(
                self._decide_once(namespace, bundle, frozenset(avoid)))
            self._deciding[key] = deciding

            def done(task: asyncio.Task[tuple[str, OwnerData] | None]) -> None:
                if self._deciding.get(key) is task:
                    del self._deciding[key]
                if not task.cancelled():
                    task.exception()  # retrieved: its lookups may all be gone

            deciding.add_done_callback(done)
        return await asyncio.shield(deciding)

    async def _decide_once(self, namespace: str, bundle: BundleRange, avoid: frozenset[str]
                           ) -> tuple[str, OwnerData] | None:
        path = handoff_path(namespace, bundle)
        for _ in range(5):
            got = await self.store.get(path)
            data = json_decode(got[0]) if got is not None else None
            if isinstance(data, dict) and isinstance(data.get("brokerId"), str) \
                    and isinstance(data.get("until"), int) and data["until"] > time.time() * 1000:
                named = str(data["brokerId"])
                if named == self.broker_id:
                    return named, self.me
                going = await self.live_target(named, set(avoid))
                if going is not None:
                    return named, going
            target, brokers = await self._place_live(set(avoid), f"{namespace}/{bundle}")
            if target == self.broker_id:  # counted here from now on (no await since)
                self._placed_here[(namespace, bundle)] = time.monotonic()
            until = int((time.time() + HANDOFF_S) * 1000)
            try:
                await self.store.put(path, json_encode({"brokerId": target, "until": until}),
                                     -1 if got is None else got[1].version)
            except BadVersionError:  # another broker decided first: follow it
                self._handoffs.invalidate(path)
                self._withdraw(target, (namespace, bundle))
                continue
            except Exception as exc:
                log.warning("bundle %s/%s: placement not recorded: %s", namespace, bundle, exc)
                return None
            self._handoffs.invalidate(path)
            if target != self.broker_id:
                log.info("bundle %s/%s placed on %s", namespace, bundle, target)
            return target, self.me if target == self.broker_id else brokers[target].owner_data()
        return None

    def _withdraw(self, target: str, key: Bundle) -> None:
        """A proposal that lost: the bundle no longer counts where it was proposed."""
        if target == self.broker_id:
            self._placed_here.pop(key, None)
            return
        for i in range(len(self._placed) - 1, -1, -1):
            if self._placed[i][0] == target:
                del self._placed[i]
                return

    async def live_target(self, broker_id: str | None, avoid: set[str]) -> OwnerData | None:
        """``broker_id``'s URLs if it is another live broker not found dead, else None."""
        if broker_id is None or broker_id == self.broker_id:
            return None
        data = (await self.registry.live()).get(broker_id)
        if data is None:
            return None
        going = data.owner_data()
        return None if going.service_url in avoid or going.service_url_tls in avoid else going

    async def _place_live(self, avoid: set[str], bundle: str = ""
                          ) -> tuple[str, dict[str, BrokerData]]:
        """`_place`, but a broker whose address refuses connections (killed, its registry
        entry not expired yet: ``answers`` says) is passed over, as a dead owner is. Ends:
        each round avoids one more broker, and this one is never avoided."""
        avoid = set(avoid)
        while True:
            target, brokers = await self._place(avoid, bundle)
            if target == self.broker_id:
                return target, brokers
            data = brokers[target]
            if await self.answers(data.service_url or data.service_url_tls):
                return target, brokers
            log.info("broker %s does not answer: no bundle is placed there", target)
            avoid |= {data.service_url, data.service_url_tls} - {""}

    async def _place(self, avoid: set[str] | frozenset[str] = frozenset(), bundle: str = ""
                     ) -> tuple[str, dict[str, BrokerData]]:
        """The broker a free bundle goes to, with the live brokers (but none whose service
        URL is in ``avoid``: found dead, its registry entry may outlive its bundles' keys
        for a moment); a placement elsewhere is recorded before this returns (no await
        after the choice), so concurrent lookups of one partitioned topic spread their
        bundles."""
        brokers, pending = await self._view(avoid)
        return self._choose(brokers, pending, bundle), brokers

    async def _view(self, avoid: set[str] | frozenset[str]
                    ) -> tuple[dict[str, BrokerData], dict[str, int]]:
        """The live brokers (none in ``avoid``; this one with its current count) and the
        bundles placed on each since its last report."""
        brokers = {k: v for k, v in (await self.registry.live()).items()
                   if k == self.broker_id
                   or not ({v.service_url, v.service_url_tls} & avoid)}
        # a bundle placed elsewhere counts until that broker's next report (which has it)
        pending: dict[str, int] = {}
        kept = []
        now_wall, now = time.time(), time.monotonic()
        for broker_id, when in self._placed:
            data = brokers.get(broker_id)
            if data is not None and data.last_update / 1000 < now_wall - (now - when):
                pending[broker_id] = pending.get(broker_id, 0) + 1
                kept.append((broker_id, when))
        self._placed = kept
        # our own count is current (owned, being taken, placed here), not as of our last
        # report; a placement here that no lookup followed counts for HANDOFF_S at most
        own, count = self.mine()
        self._placed_here = {k: when for k, when in self._placed_here.items()
                             if now - when < HANDOFF_S and k not in own}
        brokers[self.broker_id] = dataclasses.replace(
            brokers.get(self.broker_id) or self.report(),
            num_bundles=max(len(own | set(self._placed_here)), count))
        return brokers, pending

    def _choose(self, brokers: dict[str, BrokerData], pending: dict[str, int],
                bundle: str) -> str:
        """`least_loaded`, a placement elsewhere recorded at once (no await after it)."""
        target = least_loaded(brokers, pending, self.overload_threshold, bundle) \
            or self.broker_id
        if target != self.broker_id:
            self._placed.append((target, time.monotonic()))
        return target

    async def place_elsewhere(self, bundle: str) -> str | None:
        """The least-loaded other live broker for a bundle leaving this one (counting the
        bundles just sent to each, as `_place` does), None if there is no other."""
        brokers, pending = await self._view(frozenset())
        others = {k: v for k, v in brokers.items() if k != self.broker_id}
        return self._choose(others, pending, bundle) if others else None
