"""Where a free bundle goes: the least-loaded live broker, as a pure choice.

Any broker may place a free bundle when a lookup for one of its topics reaches it (Pulsar's
non-centralized placement); the ownership key's create-if-absent settles a race. Load
reports refresh periodically, so a broker placing several bundles in a row also counts
the ones it has just sent elsewhere (``pending``): a partitioned topic's first lookups then
spread its bundles over the brokers instead of all landing on the same "emptiest" one.

Load is compared as (bundles owned + just placed, CPU percent, broker id): the id makes the
choice deterministic when everything else ties.
"""

from __future__ import annotations

from collections.abc import Mapping

from magnetar.broker.cluster.records import BrokerData

__all__ = ["least_loaded"]


def least_loaded(brokers: Mapping[str, BrokerData],
                 pending: Mapping[str, int] | None = None) -> str | None:
    """The id of the broker a free bundle should go to, None when no broker is live."""
    if not brokers:
        return None
    extra = pending or {}

    def load(broker_id: str) -> tuple[int, float, str]:
        data = brokers[broker_id]
        return (data.num_bundles + extra.get(broker_id, 0), round(data.cpu_percent, 1),
                broker_id)

    return min(brokers, key=load)
