"""`ClusterCoordinator`: a broker's part in a cluster, over one metadata store session.

It ties together the registry (this broker's ephemeral entry and load report), the
namespaces' bundle boundaries, bundle ownership, and topic lookup as Pulsar answers it:

- the topic's bundle is owned here: ``Connect`` with this broker's URLs;
- owned by another broker: ``Redirect`` + authoritative, with that broker's URLs; but if
  that broker's service address refuses a connection (`reachability`: it died and its
  session has not expired yet), the lookup is held until the bundle's key goes (then it
  is answered as a free bundle's, the dead broker not a placement target) or
  ``dead_owner_wait_s`` pass (then the redirect after all);
- being unloaded (its key ``disabled``): ``Redirect`` to the broker the owner hands it
  to (its handoff key), that broker itself waiting for the key to go; without a handoff,
  ``ServiceNotReady`` and the client retries;
- free, and the lookup is authoritative (a broker sent the client here): taken here, never
  sent on, so that a lookup settles in at most two hops;
- free otherwise: where its placement record (`assignment`: an unloading owner's handoff,
  or the first placement any broker wrote, compare-and-set) sends it, placing it now if
  there is none: taken here if that is us, else a ``Redirect`` + authoritative there.
  The ownership key's create-if-absent settles the remaining races (a client connecting
  without a lookup): the loser answers with the winner.

Lookups of a bundle being taken here wait for that attempt; the broker that takes a bundle
logs it in one line, with the previous owner if it saw one and why.

Namespace boundaries come from ``/admin/local-policies/{tenant}/{ns}`` (``bundles``, as
Pulsar keeps them) or, absent, ``defaultNumberOfNamespaceBundles`` even bundles; they are
cached for the synchronous ownership check producers and consumers go through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from magnetar.broker.cluster.assignment import Placements
from magnetar.broker.cluster.bundles import (
    RANGE_EQUALLY_DIVIDE,
    BundleRange,
    NamespaceBundles,
    split_points,
    topic_hash,
)
from magnetar.broker.cluster.ownership import OwnershipCache
from magnetar.broker.cluster.reachability import Reachability
from magnetar.broker.cluster.records import (
    LEADER_PATH,
    BrokerData,
    LeaderData,
    OwnerData,
    local_policies_path,
    owner_path,
)
from magnetar.broker.cluster.registry import BrokerRegistry
from magnetar.broker.cluster.shedding import Shedder
from magnetar.broker.errors import BrokerError
from magnetar.broker.topic_name import TopicName
from magnetar.metadata import (
    BadVersionError,
    MetadataCache,
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
    json_decode,
    json_encode,
)
from magnetar.protocol import pb

log = logging.getLogger(__name__)

#: how long a lookup at a broker whose metadata session is lost waits for the new one
#: before ``ServiceNotReady`` sends the client to another broker
SESSION_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class LookupResult:
    """``connect``: this broker serves the topic; otherwise redirect to ``owner``."""

    connect: bool
    owner: OwnerData


class ClusterCoordinator:
    def __init__(self, store: MetadataStore, broker_id: str, me: OwnerData,
                 load: Callable[[], dict[str, Any]] | None = None,
                 default_bundles: int = 4, report_interval_s: float = 5.0,
                 on_lost: Callable[[str, BundleRange], None] | None = None,
                 dead_owner_wait_s: float = 0.0) -> None:
        self.store = store
        self.owns_store = False  # closed by leave_cluster (else the broker's own session)
        self.shedder: Shedder | None = None  # the leader's load shedding (membership)
        self.broker_id = broker_id
        self.me = me
        self.load = load or dict
        self.default_bundles = default_bundles
        self.ownership = OwnershipCache(store, me, on_lost)
        self.registry = BrokerRegistry(store, broker_id, self.report, report_interval_s)
        self._policies: MetadataCache[Any] = MetadataCache(store)
        self._bundles: dict[str, NamespaceBundles] = {}
        self._acquiring = 0  # ownership keys being created by lookups here
        # bundles being taken here (one attempt each, shared by the lookups meanwhile)
        self._taking: dict[tuple[str, BundleRange], asyncio.Task[OwnerData | None]] = {}
        # the last owner seen of bundles owned elsewhere (for the log line of a takeover)
        self._previous_owner: dict[tuple[str, BundleRange], str] = {}
        # lookups of a bundle whose owner is unreachable wait (at most this long) for its
        # key to go; one wait per bundle, shared by its held lookups (0: never wait)
        self.dead_owner_wait_s = dead_owner_wait_s
        self.reachability = Reachability()
        self._holds: dict[tuple[str, BundleRange], asyncio.Task[bool]] = {}
        # where free bundles go: placement records, this broker's choices
        self.placements = Placements(store, broker_id, me, self.registry, self.report,
                                     self._mine, self._answers)
        # unloads this broker's topics of a bundle, their clients told to go to the given
        # new owner if any (set by the broker; None: nothing loaded here)
        self.unload_topics: Callable[[str, BundleRange, OwnerData | None],
                                     Awaitable[None]] | None = None
        # told of each bundle this broker takes (set by the broker: it loads the bundle's
        # replicated topics, as Pulsar preloads a bundle's topics once it owns it)
        self.on_acquired: Callable[[str, BundleRange], None] | None = None
        self.is_leader = False
        self._electing: asyncio.Task[None] | None = None
        self._session_ok = asyncio.Event()  # clear from a lost session to the next one
        self._session_ok.set()
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session)

    @property
    def overload_threshold(self) -> float:
        """A broker above it gets no free bundle while another is below (placement.py)."""
        return self.placements.overload_threshold

    @overload_threshold.setter
    def overload_threshold(self, value: float) -> None:
        self.placements.overload_threshold = value

    def _mine(self) -> tuple[set[tuple[str, BundleRange]], int]:
        """The bundles owned or being taken here, and how many this broker counts."""
        return (set(self.ownership.owned) | set(self._taking),
                len(self.ownership.owned) + self._acquiring)

    async def _answers(self, url: str) -> bool:
        """Whether a broker's address accepts a connection (not probed, True, with
        ``dead_owner_wait_s`` 0: as before)."""
        return self.dead_owner_wait_s <= 0 or await self.reachability.reachable(url)

    async def handoff_target(self, namespace: str, bundle: BundleRange) -> str | None:
        """The broker a free bundle's placement record names, while it is recent."""
        return await self.placements.handoff_target(namespace, bundle)

    async def placed_elsewhere(self, namespace: str, bundle: BundleRange) -> OwnerData | None:
        """The live broker a free bundle's placement record names, if not this one."""
        return await self.placements.live_target(
            await self.placements.handoff_target(namespace, bundle), set())

    async def start(self) -> None:
        await self.registry.start()
        await self._elect()

    # -- the leader (Pulsar's /loadbalance/leader): the first to create the key -----------
    async def _elect(self) -> None:
        value = LeaderData(self.broker_id, self.me.web_url or self.me.service_url)
        try:
            await self.store.put(LEADER_PATH, json_encode(value.to_json()), -1, ephemeral=True)
            self.is_leader = True
            log.info("%s is the cluster's leader", self.broker_id)
        except BadVersionError:
            self.is_leader = False
        # a read sets the watch that tells us when the leader goes
        if not await self.store.exists(LEADER_PATH):
            await self._elect()

    def _elect_soon(self) -> None:
        if self._electing is None or self._electing.done():
            self._electing = asyncio.get_running_loop().create_task(self._elect_logged())

    async def _elect_logged(self) -> None:
        try:
            await self._elect()
        except Exception as exc:
            log.warning("leader election: %s", exc)

    async def leader(self) -> LeaderData | None:
        got = await self.store.get(LEADER_PATH)
        data = json_decode(got[0]) if got is not None else None
        return LeaderData.from_json(data) if isinstance(data, dict) else None

    def _on_notification(self, note: Notification) -> None:
        if note.path == LEADER_PATH and note.type == NotificationType.DELETED:
            self.is_leader = False
            self._elect_soon()

    def _on_session(self, event: SessionEvent) -> None:
        if event == SessionEvent.SESSION_LOST:
            self.is_leader = False
            self._session_ok.clear()
        elif event == SessionEvent.SESSION_REESTABLISHED:
            self._session_ok.set()
            self._elect_soon()

    async def _wait_session(self) -> None:
        """A lookup or claim at a broker whose session is lost waits (at most
        `SESSION_WAIT_S`) for the new one: ZooKeeper back for every broker, it is
        answered at once; this broker alone cut from it, the client is sent on
        (``ServiceNotReady``) to ask another broker."""
        if self._session_ok.is_set():
            return
        try:
            async with asyncio.timeout(SESSION_WAIT_S):
                await self._session_ok.wait()
        except TimeoutError:
            raise BrokerError(pb.ServiceNotReady, self.store.unavailable_reason()
                              or "this broker's metadata session is being replaced; "
                                 "look it up again") from None

    async def stop(self) -> None:
        """Leave the cluster: release every owned bundle, then the registry entry."""
        if self._electing is not None:
            self._electing.cancel()
        for hold in list(self._holds.values()):
            hold.cancel()
        await self.ownership.release_all()
        if self.is_leader:
            self.is_leader = False
            with contextlib.suppress(Exception):
                await self.store.delete(LEADER_PATH)
        await self.registry.stop()

    # -- the load report ------------------------------------------------------------------
    def report(self) -> BrokerData:
        owned = sorted(f"{ns}/{b}" for ns, b in self.ownership.owned)
        fields: dict[str, Any] = {
            "num_bundles": len(owned), "bundles": tuple(owned),
            "last_update": int(time.time() * 1000), **self.load()}
        return BrokerData(self.me.service_url, self.me.service_url_tls, self.me.web_url,
                          self.me.web_url_tls, dict(self.me.listeners), **fields)

    # -- bundles ---------------------------------------------------------------------------
    async def bundles(self, namespace: str) -> NamespaceBundles:
        """The namespace's bundle boundaries (cached until its local policies change)."""
        policies = await self._policies.get(local_policies_path(namespace))
        data = policies.get("bundles") if isinstance(policies, dict) else None
        bundles = NamespaceBundles.from_json(data) if isinstance(data, dict) \
            else NamespaceBundles.evenly(self.default_bundles)
        self._bundles[namespace] = bundles
        return bundles

    async def bundle_of(self, topic: str) -> tuple[str, BundleRange]:
        name = TopicName.parse(topic)
        bundles = await self.bundles(name.namespace)
        return name.namespace, bundles.bundle_of(str(name))

    def owns(self, topic: str) -> bool:
        """Whether this broker owns ``topic``'s bundle now (no round trip: a namespace whose
        boundaries were never read here has no bundle owned here)."""
        name = TopicName.parse(topic)
        bundles = self._bundles.get(name.namespace)
        return bundles is not None and self.ownership.is_owned(
            name.namespace, bundles.bundle_of(str(name)))

    def epoch_of(self, topic: str) -> int | None:
        """The ownership epoch of ``topic``'s bundle if this broker owns it, else -1 (a
        ledger opened without owning its bundle may not fence out its owner)."""
        name = TopicName.parse(topic)
        bundles = self._bundles.get(name.namespace)
        if bundles is None:
            return -1
        return self.ownership.epochs.get((name.namespace, bundles.bundle_of(str(name))), -1)

    def lease_ok(self) -> bool:
        """Whether this broker's metadata session is certainly alive by its own clock: a
        broker past it (paused, cut from ZooKeeper) acknowledges nothing (the hot path's
        early stop; the fence in storage is what makes acks safe)."""
        return time.monotonic() < self.store.lease_deadline

    def serves(self, topic: str, epoch: int | None = None) -> bool:
        """Whether this broker may serve ``topic`` now: it owns the bundle and is not
        unloading it; given ``epoch`` (the one a ledger was opened and fenced with), still
        in that same ownership. A topic whose load outlived an unload (and maybe the
        bundle's return here, under a new epoch) must not be served from what it read."""
        name = TopicName.parse(topic)
        bundles = self._bundles.get(name.namespace)
        if bundles is None:
            return False
        key = (name.namespace, bundles.bundle_of(str(name)))
        if not self.ownership.is_serving(*key):
            return False
        return epoch is None or self.ownership.epochs.get(key, -1) == epoch

    def check_owned(self, topic: str) -> None:
        """``ServiceNotReady`` unless this broker serves ``topic`` (the client looks up)."""
        if not self.serves(topic):
            raise BrokerError(pb.ServiceNotReady,
                              f"topic {topic} is not served by this broker; look it up again")

    # -- moving bundles ---------------------------------------------------------------------
    async def unload(self, namespace: str, bundle: BundleRange,
                     destination: str | None = None) -> bool:
        """Give up an owned bundle: mark it unloading (lookups stop sending clients here),
        pick its next owner (``destination``, a broker id, or the least-loaded other live
        broker), unload its topics (appends flushed, ledgers closed, clients closed with
        that owner's URL as ``assignedBrokerServiceUrl``), then free it: the clients
        reconnect straight to the new owner, which takes the free bundle. False if this
        broker did not own it."""
        if not self.ownership.is_owned(namespace, bundle):
            return False
        brokers = await self.registry.live()
        others = {k: v for k, v in brokers.items() if k != self.broker_id}
        target = destination if destination in others \
            else await self.placements.place_elsewhere(f"{namespace}/{bundle}")
        moving_to = others[target].owner_data() if target in others else None
        if target is not None:
            await self.placements.write_handoff(namespace, bundle, target)
        await self.ownership.set_disabled(namespace, bundle)
        if self.unload_topics is not None:
            await self.unload_topics(namespace, bundle, moving_to)
        await self.ownership.release(namespace, bundle)
        return True

    async def _acquire(self, namespace: str, bundle: BundleRange,
                       why: str = "lookup") -> OwnerData | None:
        """Take the free bundle (``ownership.try_acquire``), counted by placements made
        meanwhile, and shielded: a lookup cancelled (its client went) must not leave a key
        created here that this broker does not know it owns. Concurrent calls for one
        bundle share one attempt (lookups meanwhile wait for it, `lookup`)."""
        key = (namespace, bundle)
        taking = self._taking.get(key)
        if taking is None:
            taking = asyncio.get_running_loop().create_task(self._take(namespace, bundle, why))
            self._taking[key] = taking

            def done(task: asyncio.Task[OwnerData | None]) -> None:
                if self._taking.get(key) is task:
                    del self._taking[key]
                if not task.cancelled():
                    task.exception()  # retrieved: the lookups awaiting it may all be gone

            taking.add_done_callback(done)
        return await asyncio.shield(taking)

    async def _take(self, namespace: str, bundle: BundleRange, why: str) -> OwnerData | None:
        self._acquiring += 1
        try:
            record = await self.placements.record(namespace, bundle)
            previous = self._previous_owner.pop((namespace, bundle), None)
            owner = await self.ownership.try_acquire(namespace, bundle)
        finally:
            self._acquiring -= 1
        if owner is self.me:
            # a takeover from another broker that did not hand it here (it died, or lost
            # its session) is worth seeing at the default level; a placement or a handoff
            # is routine
            handed_by = record.get("unloadedBy") \
                if record is not None and record["brokerId"] == self.broker_id else None
            if isinstance(handed_by, str):
                why = f"its owner {handed_by} unloaded it and handed it here"
            taken_over = previous is not None and previous != self.me.service_url \
                and not isinstance(handed_by, str)
            log.log(logging.WARNING if taken_over else logging.INFO,
                    "took bundle %s/%s (previous owner %s; %s)", namespace, bundle,
                    previous or "none known", why)
            await self.placements.drop_handoff(namespace, bundle)
            if self.on_acquired is not None:
                try:
                    self.on_acquired(namespace, bundle)
                except Exception as exc:  # the bundle is taken all the same
                    log.warning("bundle %s/%s taken; its topics not preloaded: %s",
                                namespace, bundle, exc)
        return owner

    def claim(self, topic: str) -> Coroutine[Any, Any, None] | None:
        """None if this broker serves ``topic``; otherwise the work that takes its bundle
        if it is free (or is being released by an unloading owner), and raises
        ``ServiceNotReady`` if another broker keeps it."""
        return None if self.owns(topic) else self._claim(topic)

    async def _claim(self, topic: str) -> None:
        await self._wait_session()
        namespace, bundle = await self.bundle_of(topic)
        for _ in range(3):
            taking = self._taking.get((namespace, bundle))
            if taking is not None:  # a lookup here is taking it: its outcome decides
                await asyncio.shield(taking)
            if self.ownership.is_owned(namespace, bundle):
                return
            owner = await self.ownership.owner_of(namespace, bundle)
            if owner is not None and owner.disabled:  # moving, maybe here: wait for it
                await self.ownership.wait_free(namespace, bundle, 10.0)
                continue
            if owner is None:
                # placed on another broker (its lookup is on the way): not taken here
                if await self.placed_elsewhere(namespace, bundle) is not None:
                    break
                if await self._acquire(namespace, bundle, "a client connected here") is self.me:
                    return
            break
        raise BrokerError(pb.ServiceNotReady,
                          f"topic {topic} is not served by this broker; look it up again")

    async def split(self, namespace: str, bundle: BundleRange,
                    algorithm: str = RANGE_EQUALLY_DIVIDE,
                    topics: tuple[str, ...] = ()) -> NamespaceBundles:
        """Split ``bundle`` (compare-and-set on the namespace's local policies). The owner
        of the parent owns the halves at once; its topics keep being served."""
        path = local_policies_path(namespace)
        for _ in range(10):
            got = await self.store.get(path)
            policies = json_decode(got[0]) if got is not None else None
            if not isinstance(policies, dict):
                policies = {}
            current = NamespaceBundles.from_json(policies["bundles"]) \
                if isinstance(policies.get("bundles"), dict) \
                else NamespaceBundles.evenly(self.default_bundles)
            if bundle not in current:
                raise ValueError(f"bundle {bundle} is not a bundle of {namespace}")
            mine = [t for t in topics if bundle.contains(topic_hash(t))]
            new = current.split(bundle, split_points(algorithm, bundle, topics=mine))
            try:
                await self.store.put(path, json_encode({**policies, "bundles": new.to_json()}),
                                     -1 if got is None else got[1].version)
            except BadVersionError:
                continue
            self._bundles[namespace] = new
            if self.ownership.is_owned(namespace, bundle):
                for child in new.ranges:
                    if bundle.lower <= child.lower < bundle.upper:
                        await self.ownership.try_acquire(namespace, child)
                await self.ownership.release(namespace, bundle)
            log.info("split bundle %s/%s into %d", namespace, bundle, len(new) - len(current) + 1)
            return new
        raise BadVersionError(path, -2)

    # -- lookup ----------------------------------------------------------------------------
    async def lookup(self, topic: str, authoritative: bool = False) -> LookupResult:
        """Where ``topic`` is served: here (``connect``) or the broker to redirect to. An
        ``authoritative`` lookup (a broker sent the client here) is settled here: a free
        bundle is taken, never sent on; so a lookup takes at most two hops."""
        await self._wait_session()
        namespace, bundle = await self.bundle_of(topic)
        key = (namespace, bundle)
        held = False
        why = ""  # why the bundle is taken here, for the log line if it is
        avoid: set[str] = set()  # service URLs of owners found dead: no placement there
        for _ in range(3):
            taking = self._taking.get(key)
            if taking is not None:  # being taken here: its key may exist already
                await asyncio.shield(taking)
            if self.ownership.is_owned(namespace, bundle):
                return LookupResult(True, self.me)
            owner = await self.ownership.owner_of(namespace, bundle)
            if owner is not None and self._is_me(owner):
                got = await self.store.get(owner_path(namespace, bundle))
                if got is not None and got[1].created_by_self:
                    return LookupResult(True, self.me)  # ours, being set up (a split)
                # our address, not our session: a session of ours that ended (a restart
                # on the same address); the key goes when that session expires
                await self.ownership.wait_free(namespace, bundle,
                                               max(self.dead_owner_wait_s, 5.0))
                continue
            if owner is not None:
                self._previous_owner[key] = owner.service_url or owner.service_url_tls
                if owner.disabled:  # being unloaded: to the broker it goes to, if known
                    handoff = await self.handoff_target(namespace, bundle)
                    if handoff == self.broker_id:
                        await self.ownership.wait_free(namespace, bundle, 10.0)
                        why = "its owner unloaded it and handed it here"
                        continue
                    going = await self.placements.live_target(handoff, avoid)
                    if going is not None:
                        return LookupResult(False, going)
                    raise BrokerError(pb.ServiceNotReady,
                                      f"bundle {namespace}/{bundle} is being unloaded; retry")
                if not held and self.dead_owner_wait_s > 0 \
                        and not await self.reachability.reachable(
                            owner.service_url or owner.service_url_tls):
                    held = True
                    if await self._wait_dead_owner(namespace, bundle, owner):
                        avoid.update({owner.service_url, owner.service_url_tls} - {""})
                        why = "its owner stopped answering and its session expired"
                        continue
                return LookupResult(False, owner)
            if not authoritative:
                target = await self.placements.decide(namespace, bundle, avoid)
                if target is not None and target[0] != self.broker_id:
                    return LookupResult(False, target[1])
            owner = await self._acquire(namespace, bundle, why or (
                "a lookup redirected here" if authoritative else "a lookup, placed here"))
            if owner is None:  # freed again meanwhile: look once more
                continue
            return LookupResult(owner is self.me, owner)
        raise BrokerError(pb.ServiceNotReady, f"bundle {namespace}/{bundle} keeps changing owner")

    def _is_me(self, owner: OwnerData) -> bool:
        return owner is self.me or (
            owner.service_url, owner.service_url_tls, owner.web_url) == (
            self.me.service_url, self.me.service_url_tls, self.me.web_url)

    async def _wait_dead_owner(self, namespace: str, bundle: BundleRange,
                               owner: OwnerData) -> bool:
        """Hold a lookup whose bundle's owner refuses connections until the bundle's key
        goes (True) or ``dead_owner_wait_s`` pass or the owner answers again (False). The
        lookups of one bundle share one wait (one watch on the key, one probe a second); a
        lookup cancelled meanwhile (its client went) leaves it running for the others."""
        key = (namespace, bundle)
        hold = self._holds.get(key)
        if hold is None:
            log.info("owner %s of bundle %s/%s does not answer: lookups wait up to %.1f s "
                     "for its session to expire", owner.service_url, namespace, bundle,
                     self.dead_owner_wait_s)
            hold = asyncio.get_running_loop().create_task(self._hold(namespace, bundle, owner))
            self._holds[key] = hold

            def done(task: asyncio.Task[bool]) -> None:
                if self._holds.get(key) is task:
                    del self._holds[key]
                if not task.cancelled():
                    task.exception()  # retrieved: the lookups awaiting it may all be gone

            hold.add_done_callback(done)
        try:
            return await asyncio.shield(hold)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store is down: answer as before (the redirect)
            log.warning("waiting for bundle %s/%s to be freed: %s", namespace, bundle, exc)
            return False

    async def _hold(self, namespace: str, bundle: BundleRange, owner: OwnerData) -> bool:
        """The shared wait: until the key goes (True), ``dead_owner_wait_s`` pass or the
        owner answers a probe again (False: a probe that timed out on a starved event
        loop costs at most a second of the lookups' time, not the whole bound)."""
        deadline = time.monotonic() + self.dead_owner_wait_s
        url = owner.service_url or owner.service_url_tls
        while (left := deadline - time.monotonic()) > 0:
            if await self.ownership.wait_free(namespace, bundle, min(left, 1.0)):
                return True
            if await self.reachability.reachable(url):
                log.info("owner %s of bundle %s/%s answers again", url, namespace, bundle)
                return False
        return False


def lookup_response(result: LookupResult, request_id: int, listener: str | None,
                    own_url: str, own_tls_url: str | None) -> pb.CommandLookupTopicResponse:
    """The wire answer to a lookup: ``Connect`` with this broker's URLs (``own_url`` already
    chosen for the client's listener), or ``Redirect`` + authoritative with the owner's for
    that listener (``ServiceNotReady`` if the owner does not advertise it)."""
    R = pb.CommandLookupTopicResponse
    if result.connect:
        response = R(request_id=request_id, response=R.Connect, brokerServiceUrl=own_url,
                     authoritative=True, proxy_through_service_url=False)
        if own_tls_url:
            response.brokerServiceUrlTls = own_tls_url
        return response
    try:
        urls = result.owner.urls_for(listener)
    except KeyError:
        raise BrokerError(pb.ServiceNotReady,
                          f"the owner of this topic has no {listener} listener") from None
    response = R(request_id=request_id, response=R.Redirect, authoritative=True,
                 brokerServiceUrl=urls.service_url, proxy_through_service_url=False)
    if urls.service_url_tls:
        response.brokerServiceUrlTls = urls.service_url_tls
    return response
