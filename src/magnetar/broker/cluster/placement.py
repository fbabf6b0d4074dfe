"""Where a free bundle goes: the least-loaded live broker, as a pure choice (a simple form
of Pulsar's ``LeastLongTermMessageRate``).

Any broker may propose a place for a free bundle when a lookup for one of its topics
reaches it; the first proposal written as the bundle's placement record (compare-and-set,
`assignment.py`) is the one every broker follows.

Brokers are compared by, in order:

1. overloaded or not: a broker whose most used resource is above the overload threshold
   (``loadBalancerBrokerOverloadedThresholdPercentage``) gets nothing while another is not
   (if all are, the rest decides, as in Pulsar);
2. message rate: messages/s in + out in its last report, plus an estimate for each bundle
   it has taken or been sent since that report (``pending``, and ``num_bundles`` beyond
   the bundles its report lists: the placing broker's own current count): the cluster's
   average rate per bundle, at least ``NEW_BUNDLE_MSG_RATE`` (Pulsar's estimate for a
   bundle without history). So a partitioned topic's first lookups spread its bundles
   instead of all landing on the same "emptiest" broker before its next report;
3. bundles owned plus just placed (idle bundles: the rate says nothing);
4. when everything else ties, a hash of the bundle's name with the broker id
   (rendezvous hashing): deterministic, the same at every broker, and different bundles
   of a partitioned topic go to different idle brokers.

Pulsar averages rates over a long window; here a rate is over the last report interval.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from magnetar.broker.cluster.records import BrokerData

__all__ = ["NEW_BUNDLE_MSG_RATE", "least_loaded"]

#: messages/s a bundle just placed somewhere is assumed to bring, at least
NEW_BUNDLE_MSG_RATE = 50.0


def least_loaded(brokers: Mapping[str, BrokerData],
                 pending: Mapping[str, int] | None = None,
                 overload_threshold: float = 85.0, bundle: str = "") -> str | None:
    """The id of the broker a free bundle (``bundle``: its ``tenant/ns/range``, for the
    tie-break) should go to, None when no broker is live."""
    if not brokers:
        return None
    extra = pending or {}
    reported = sum(len(data.bundles) for data in brokers.values())
    average = sum(data.msg_rate for data in brokers.values()) / reported if reported else 0.0
    per_new_bundle = max(average, NEW_BUNDLE_MSG_RATE)

    def load(broker_id: str) -> tuple[bool, float, int, int, str]:
        data = brokers[broker_id]
        placed = extra.get(broker_id, 0)
        unreported = max(0, data.num_bundles - len(data.bundles)) + placed
        return (data.max_resource_usage > overload_threshold,
                round(data.msg_rate + unreported * per_new_bundle, 1),
                data.num_bundles + placed,
                zlib.crc32(f"{bundle}|{broker_id}".encode()), broker_id)

    return min(brokers, key=load)
