"""`ClusterCoordinator`: a broker's part in a cluster, over one metadata store session.

It ties together the registry (this broker's ephemeral entry and load report), the
namespaces' bundle boundaries, bundle ownership, and topic lookup as Pulsar answers it:

- the topic's bundle is owned here: ``Connect`` with this broker's URLs;
- owned by another broker: ``Redirect`` + authoritative, with that broker's URLs;
- being unloaded (its key ``disabled``): ``ServiceNotReady``, the client retries;
- free: if the lookup is authoritative (a broker sent the client here) this broker takes
  it; otherwise it goes to the least-loaded live broker (`placement`): taken here if that
  is us, else a ``Redirect`` + authoritative there. The ownership key's create-if-absent
  settles races: the loser answers with the winner.

Namespace boundaries come from ``/admin/local-policies/{tenant}/{ns}`` (``bundles``, as
Pulsar keeps them) or, absent, ``defaultNumberOfNamespaceBundles`` even bundles; they are
cached for the synchronous ownership check producers and consumers go through.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from magnetar.broker.cluster.bundles import BundleRange, NamespaceBundles
from magnetar.broker.cluster.ownership import OwnershipCache
from magnetar.broker.cluster.placement import least_loaded
from magnetar.broker.cluster.records import (
    BrokerData,
    OwnerData,
    local_policies_path,
)
from magnetar.broker.cluster.registry import BrokerRegistry
from magnetar.broker.errors import BrokerError
from magnetar.broker.topics.topic_name import TopicName
from magnetar.metadata import MetadataCache, MetadataStore
from magnetar.protocol import pb

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LookupResult:
    """``connect``: this broker serves the topic; otherwise redirect to ``owner``."""

    connect: bool
    owner: OwnerData


class ClusterCoordinator:
    def __init__(self, store: MetadataStore, broker_id: str, me: OwnerData,
                 load: Callable[[], dict[str, Any]] | None = None,
                 default_bundles: int = 4, report_interval_s: float = 5.0,
                 on_lost: Callable[[str, BundleRange], None] | None = None) -> None:
        self.store = store
        self.broker_id = broker_id
        self.me = me
        self.load = load or dict
        self.default_bundles = default_bundles
        self.ownership = OwnershipCache(store, me, on_lost)
        self.registry = BrokerRegistry(store, broker_id, self.report, report_interval_s)
        self._policies: MetadataCache[Any] = MetadataCache(store)
        self._bundles: dict[str, NamespaceBundles] = {}
        # bundles sent to other brokers since their last report: (broker id, when)
        self._placed: list[tuple[str, float]] = []

    async def start(self) -> None:
        await self.registry.start()

    async def stop(self) -> None:
        """Leave the cluster: release every owned bundle, then the registry entry."""
        await self.ownership.release_all()
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

    def check_owned(self, topic: str) -> None:
        """``ServiceNotReady`` unless this broker serves ``topic`` (the client looks up)."""
        if not self.owns(topic):
            raise BrokerError(pb.ServiceNotReady,
                              f"topic {topic} is not served by this broker; look it up again")

    # -- lookup ----------------------------------------------------------------------------
    async def lookup(self, topic: str, authoritative: bool = False) -> LookupResult:
        namespace, bundle = await self.bundle_of(topic)
        for _ in range(3):
            if self.ownership.is_owned(namespace, bundle):
                return LookupResult(True, self.me)
            owner = await self.ownership.owner_of(namespace, bundle)
            if owner is not None:
                if owner.disabled:
                    raise BrokerError(pb.ServiceNotReady,
                                      f"bundle {namespace}/{bundle} is being unloaded; retry")
                return LookupResult(False, owner)
            target = self.broker_id if authoritative else await self._place()
            if target != self.broker_id:
                brokers = await self.registry.live()
                if target in brokers:
                    self._placed.append((target, time.monotonic()))
                    return LookupResult(False, brokers[target].owner_data())
            owner = await self.ownership.try_acquire(namespace, bundle)
            if owner is None:  # freed again meanwhile: look once more
                continue
            return LookupResult(owner is self.me, owner)
        raise BrokerError(pb.ServiceNotReady, f"bundle {namespace}/{bundle} keeps changing owner")

    async def _place(self) -> str:
        brokers = await self.registry.live()
        # a bundle placed elsewhere counts until that broker's next report (which has it)
        pending: dict[str, int] = {}
        kept = []
        for broker_id, when in self._placed:
            data = brokers.get(broker_id)
            reported_ms = data.last_update if data is not None else 0
            if data is not None and reported_ms / 1000 < time.time() - (time.monotonic() - when):
                pending[broker_id] = pending.get(broker_id, 0) + 1
                kept.append((broker_id, when))
        self._placed = kept
        if self.broker_id in brokers:  # our own count is current, not as of our last report
            brokers[self.broker_id] = dataclasses.replace(
                brokers[self.broker_id], num_bundles=len(self.ownership.owned))
        return least_loaded(brokers, pending) or self.broker_id
