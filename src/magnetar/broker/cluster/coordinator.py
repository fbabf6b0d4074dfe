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
- free, just handed to another broker by its last owner: ``Redirect`` there (or taken
  here if this is that broker), so that the bundle goes where the unload sent it;
- free: if the lookup is authoritative (a broker sent the client here) this broker takes
  it; otherwise it goes to the least-loaded live broker (`placement`) whose address
  accepts a connection: taken here if that is us, else a ``Redirect`` + authoritative
  there. The ownership key's create-if-absent settles races: the loser answers with the
  winner.

Namespace boundaries come from ``/admin/local-policies/{tenant}/{ns}`` (``bundles``, as
Pulsar keeps them) or, absent, ``defaultNumberOfNamespaceBundles`` even bundles; they are
cached for the synchronous ownership check producers and consumers go through.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from magnetar.broker.cluster.bundles import (
    RANGE_EQUALLY_DIVIDE,
    BundleRange,
    NamespaceBundles,
    split_points,
    topic_hash,
)
from magnetar.broker.cluster.ownership import OwnershipCache
from magnetar.broker.cluster.placement import least_loaded
from magnetar.broker.cluster.reachability import Reachability
from magnetar.broker.cluster.records import (
    LEADER_PATH,
    BrokerData,
    LeaderData,
    OwnerData,
    handoff_path,
    local_policies_path,
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

#: how long an unloading owner's word on where its bundle goes is followed by lookups
HANDOFF_S = 30.0
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
        # a broker above it gets no free bundle while another is below (placement.py)
        self.overload_threshold = 85.0
        self.broker_id = broker_id
        self.me = me
        self.load = load or dict
        self.default_bundles = default_bundles
        self.ownership = OwnershipCache(store, me, on_lost)
        self.registry = BrokerRegistry(store, broker_id, self.report, report_interval_s)
        self._policies: MetadataCache[Any] = MetadataCache(store)
        self._handoffs: MetadataCache[Any] = MetadataCache(store)
        self._bundles: dict[str, NamespaceBundles] = {}
        # bundles sent to other brokers since their last report: (broker id, when)
        self._placed: list[tuple[str, float]] = []
        self._acquiring = 0  # ownership keys being created by lookups here
        # lookups of a bundle whose owner is unreachable wait (at most this long) for its
        # key to go; one wait per bundle, shared by its held lookups (0: never wait)
        self.dead_owner_wait_s = dead_owner_wait_s
        self.reachability = Reachability()
        self._holds: dict[tuple[str, BundleRange], asyncio.Task[bool]] = {}
        # unloads this broker's topics of a bundle, their clients told to go to the given
        # new owner if any (set by the broker; None: nothing loaded here)
        self.unload_topics: Callable[[str, BundleRange, OwnerData | None],
                                     Awaitable[None]] | None = None
        self.is_leader = False
        self._electing: asyncio.Task[None] | None = None
        self._session_ok = asyncio.Event()  # clear from a lost session to the next one
        self._session_ok.set()
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session)

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

    def check_owned(self, topic: str) -> None:
        """``ServiceNotReady`` unless this broker serves ``topic`` (the client looks up)."""
        if not self.owns(topic):
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
        target = destination if destination in others else least_loaded(others, None, self.overload_threshold)
        moving_to = others[target].owner_data() if target is not None else None
        if target is not None:
            await self._write_handoff(namespace, bundle, target)
        await self.ownership.set_disabled(namespace, bundle)
        if self.unload_topics is not None:
            await self.unload_topics(namespace, bundle, moving_to)
        await self.ownership.release(namespace, bundle)
        return True

    # -- handoffs: where an unloaded bundle goes, for every broker to see ------------------
    async def _write_handoff(self, namespace: str, bundle: BundleRange, target: str) -> None:
        """Record (persistently, for ``HANDOFF_S``) that the bundle goes to ``target``:
        between this owner's release and the target's taking it, a lookup at any broker
        sends the client there, instead of placing the free bundle anew (where it could
        land back on this broker, which has just become the least loaded)."""
        until = int((time.time() + HANDOFF_S) * 1000)
        try:
            await self.store.put(handoff_path(namespace, bundle),
                                 json_encode({"brokerId": target, "until": until}))
        except Exception as exc:  # without it the move still works, placement decides
            log.warning("bundle %s/%s: handoff to %s not recorded: %s", namespace, bundle,
                        target, exc)

    async def handoff_target(self, namespace: str, bundle: BundleRange) -> str | None:
        """The broker an unloading owner handed the bundle to, while that is recent."""
        data = await self._handoffs.get(handoff_path(namespace, bundle))
        if not isinstance(data, dict) or not isinstance(data.get("brokerId"), str):
            return None
        until = data.get("until")
        if not isinstance(until, int) or until < time.time() * 1000:
            return None
        return str(data["brokerId"])

    async def _drop_handoff(self, namespace: str, bundle: BundleRange) -> None:
        """The target took the bundle: its handoff record has served."""
        if await self.handoff_target(namespace, bundle) is None:
            return
        with contextlib.suppress(Exception):
            await self.store.delete(handoff_path(namespace, bundle))

    async def _acquire(self, namespace: str, bundle: BundleRange) -> OwnerData | None:
        """Take the free bundle (``ownership.try_acquire``), counted by placements made
        meanwhile, and shielded: a lookup cancelled (its client went) must not leave a key
        created here that this broker does not know it owns."""
        self._acquiring += 1
        try:
            owner = await asyncio.shield(self.ownership.try_acquire(namespace, bundle))
        finally:
            self._acquiring -= 1
        if owner is self.me:
            await self._drop_handoff(namespace, bundle)
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
            if self.ownership.is_owned(namespace, bundle):
                return
            owner = await self.ownership.owner_of(namespace, bundle)
            if owner is not None and owner.disabled:  # moving, maybe here: wait for it
                await self.ownership.wait_free(namespace, bundle, 10.0)
                continue
            if owner is None and await self._acquire(namespace, bundle) is self.me:
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
        await self._wait_session()
        namespace, bundle = await self.bundle_of(topic)
        held = False
        avoid: set[str] = set()  # service URLs of owners found dead: no placement there
        for _ in range(3):
            if self.ownership.is_owned(namespace, bundle):
                return LookupResult(True, self.me)
            owner = await self.ownership.owner_of(namespace, bundle)
            handoff = await self.handoff_target(namespace, bundle) \
                if owner is None or owner.disabled else None
            if owner is not None:
                if owner.disabled:  # being unloaded: to the broker it goes to, if known
                    if handoff == self.broker_id:
                        await self.ownership.wait_free(namespace, bundle, 10.0)
                        continue
                    going = await self._live_target(handoff, avoid)
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
                        continue
                return LookupResult(False, owner)
            if not authoritative and handoff != self.broker_id:
                going = await self._live_target(handoff, avoid)
                if going is not None:  # just unloaded, on its way there
                    return LookupResult(False, going)
                target, brokers = await self._place_live(avoid)
                if target != self.broker_id:
                    return LookupResult(False, brokers[target].owner_data())
            owner = await self._acquire(namespace, bundle)
            if owner is None:  # freed again meanwhile: look once more
                continue
            return LookupResult(owner is self.me, owner)
        raise BrokerError(pb.ServiceNotReady, f"bundle {namespace}/{bundle} keeps changing owner")

    async def _live_target(self, broker_id: str | None, avoid: set[str]) -> OwnerData | None:
        """``broker_id``'s URLs if it is another live broker not found dead, else None."""
        if broker_id is None or broker_id == self.broker_id:
            return None
        data = (await self.registry.live()).get(broker_id)
        if data is None:
            return None
        going = data.owner_data()
        return None if going.service_url in avoid or going.service_url_tls in avoid else going

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

    async def _place_live(self, avoid: set[str]) -> tuple[str, dict[str, BrokerData]]:
        """`_place`, but a broker whose address refuses connections (killed, its registry
        entry not expired yet) is passed over, as a dead owner is (no probe with
        ``dead_owner_wait_s`` 0: as before). Ends: each round avoids one more broker, and
        this one is never avoided."""
        avoid = set(avoid)
        while True:
            target, brokers = await self._place(avoid)
            if target == self.broker_id or self.dead_owner_wait_s <= 0:
                return target, brokers
            data = brokers[target]
            if await self.reachability.reachable(data.service_url or data.service_url_tls):
                return target, brokers
            log.info("broker %s does not answer: no bundle is placed there", target)
            avoid |= {data.service_url, data.service_url_tls} - {""}

    async def _place(self, avoid: set[str] | frozenset[str] = frozenset()
                     ) -> tuple[str, dict[str, BrokerData]]:
        """The broker a free bundle goes to, with the live brokers (but none whose service
        URL is in ``avoid``: found dead, its registry entry may outlive its bundles' keys
        for a moment); a placement elsewhere is recorded before this returns (no await
        after the choice), so concurrent lookups of one partitioned topic spread their
        bundles."""
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
        # our own count is current (owned and being taken), not as of our last report
        brokers[self.broker_id] = dataclasses.replace(
            brokers.get(self.broker_id) or self.report(),
            num_bundles=len(self.ownership.owned) + self._acquiring)
        target = least_loaded(brokers, pending, self.overload_threshold) or self.broker_id
        if target != self.broker_id:
            self._placed.append((target, now))
        return target, brokers

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
