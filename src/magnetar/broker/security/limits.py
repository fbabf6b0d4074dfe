"""Connection and per-topic limits, each refused the way Pulsar refuses it.

- ``brokerMaxConnections`` / ``brokerMaxConnectionsPerIp``: a connection past either is
  sent an Error (NotAllowedError, request id -1, saying which limit) and closed as soon as
  it is accepted, so the client fails its Connect at once (logged at most once a minute, with a running count).
- the descriptors left for connections (``BrokerService.descriptors``, from the open files
  limit): a connection past them is answered the same way but with ServiceNotReady
  (retryable) ``too many open files (limit N)``, logged by the descriptor alarm.
- ``magnetarHandshakeTimeoutSeconds``: a connection that has not completed Connect (and its
  authentication) that long after it was accepted is closed.
- ``maxProducersPerTopic`` (ProducerBusy), ``maxConsumersPerTopic`` and
  ``maxConsumersPerSubscription`` (ConsumerBusy), ``maxSubscriptionsPerTopic``
  (NotAllowedError) and the per-connection ``magnetarMaxProducersPerConnection`` /
  ``magnetarMaxConsumersPerConnection`` (ProducerBusy / ConsumerBusy).
- ``maxConcurrentLookupRequest``: lookups and partitioned-metadata requests in progress
  across the broker (both ports, and HTTP lookups). One past the limit is answered at once
  with ServerError ``TooManyRequests`` (Magnetar's client retries it with backoff; HTTP:
  503). A binary request is in progress from the moment its frame is decoded until its
  answer is handed to the socket: a lookup is answered in the same event-loop turn, a
  partitioned-metadata request once the metadata store has been read off the loop.
- ``maxConcurrentTopicLoadRequest``: topic loads (ledger recovery scan, metadata and dedup
  state read off the loop) in progress at once; one past it waits for a slot, as Pulsar
  queues it (``BrokerService.topic_load_slots``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.errors import BrokerError
from magnetar.broker.topic_name import TopicName
from magnetar.protocol import pb
from magnetar.storage.descriptors import ALARM, UNLIMITED

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Sized

    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)


class LimitedCnx(Protocol):
    """What the limits use of a client connection (``connection.ServerCnx`` is one): the
    security room names no room above it."""

    counted_ip: str | None
    handshake_timer: asyncio.TimerHandle | None

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def connected(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    @property
    def peer(self) -> str: ...
    @property
    def producers(self) -> Sized: ...
    @property
    def consumers(self) -> Sized: ...
    @property
    def service(self) -> BrokerService: ...
    def close(self) -> None: ...


class Limits:
    """Counts connections per IP and applies the limits of the module docstring."""

    def __init__(self, config: Any, descriptor_room: int = UNLIMITED) -> None:
        self.config = config
        self.descriptor_room = descriptor_room  # connections the descriptor limit leaves
        self.total = 0
        self.per_ip: Counter[str] = Counter()
        self.refused = 0
        self._last_log = 0.0
        self.lookups_in_progress = 0
        self.lookups_refused = 0
        self._last_lookup_log = 0.0

    # ------------------------------------------------------------------ connections

    def admit(self, cnx: LimitedCnx, ip: str) -> BrokerError | None:
        """Count a new connection; over a limit, the refusal instead (the caller answers
        with an Error that says it, as Pulsar does, and closes the connection)."""
        cfg = self.config
        if self.total >= self.descriptor_room:
            self.refused += 1
            return BrokerError(pb.ServiceNotReady, ALARM.raised(
                f"refusing connection from {ip}: {self.total} connections use the "
                "descriptors left for them"))
        why = None
        if cfg.brokerMaxConnections and self.total >= cfg.brokerMaxConnections:
            why = f"brokerMaxConnections ({cfg.brokerMaxConnections}) reached"
        elif cfg.brokerMaxConnectionsPerIp and self.per_ip[ip] >= cfg.brokerMaxConnectionsPerIp:
            why = f"brokerMaxConnectionsPerIp ({cfg.brokerMaxConnectionsPerIp}) reached for {ip}"
        if why is not None:
            self.refused += 1
            now = time.monotonic()
            if now - self._last_log > 60:
                self._last_log = now
                log.warning("refusing connection from %s: %s (%d refused so far)",
                            ip, why, self.refused)
            return BrokerError(pb.NotAllowedError, why)
        self.total += 1
        self.per_ip[ip] += 1
        cnx.counted_ip = ip
        timeout = cfg.magnetarHandshakeTimeoutSeconds
        if timeout > 0:
            cnx.handshake_timer = cnx.loop.call_later(timeout, self._handshake_expired, cnx)
        return None

    def release(self, cnx: LimitedCnx) -> None:
        ip = cnx.counted_ip
        if ip is None:
            return
        cnx.counted_ip = None
        self.total -= 1
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]
        if cnx.handshake_timer is not None:
            cnx.handshake_timer.cancel()
            cnx.handshake_timer = None

    @staticmethod
    def handshake_done(cnx: LimitedCnx) -> None:
        if cnx.handshake_timer is not None:
            cnx.handshake_timer.cancel()
            cnx.handshake_timer = None

    def _handshake_expired(self, cnx: LimitedCnx) -> None:
        cnx.handshake_timer = None
        if not cnx.connected and not cnx.closed:
            log.info("%s: closing connection: no Connect within %d s", cnx.peer,
                     self.config.magnetarHandshakeTimeoutSeconds)
            cnx.close()

    # ------------------------------------------------------------------ lookups

    def acquire_lookup(self, peer: str) -> bool:
        """Take one of the ``maxConcurrentLookupRequest`` slots; False when none is free
        (the refusal is counted, and logged at most once a minute)."""
        limit = self.config.maxConcurrentLookupRequest
        if self.lookups_in_progress < limit:
            self.lookups_in_progress += 1
            return True
        self.lookups_refused += 1
        now = time.monotonic()
        if now - self._last_lookup_log > 60:
            self._last_lookup_log = now
            log.warning("%s: lookup refused with TooManyRequests: maxConcurrentLookupRequest "
                        "(%d) in progress (%d refused so far)", peer, limit, self.lookups_refused)
        return False

    def release_lookups(self, count: int) -> None:
        self.lookups_in_progress -= count

    # ------------------------------------------------------------------ producers, consumers

    def check_producer(self, cnx: LimitedCnx, topic: str) -> None:
        cfg = self.config
        limit = cfg.magnetarMaxProducersPerConnection
        if limit and len(cnx.producers) >= limit:
            raise BrokerError(pb.ProducerBusy, f"connection reached its limit of {limit} producers")
        limit = cfg.maxProducersPerTopic
        if limit:
            loaded = cnx.service.topics.get(str(TopicName.parse(topic)))
            if loaded is not None and len(loaded.producers) >= limit:
                raise BrokerError(pb.ProducerBusy,
                                  f"topic {topic} reached max producers limit ({limit})")

    def check_consumer(self, cnx: LimitedCnx, topic: str, subscription: str) -> None:
        cfg = self.config
        limit = cfg.magnetarMaxConsumersPerConnection
        if limit and len(cnx.consumers) >= limit:
            raise BrokerError(pb.ConsumerBusy, f"connection reached its limit of {limit} consumers")
        if not (cfg.maxConsumersPerTopic or cfg.maxConsumersPerSubscription
                or cfg.maxSubscriptionsPerTopic):
            return
        loaded = cnx.service.topics.get(str(TopicName.parse(topic)))
        if loaded is None:
            return
        subs = loaded.subscriptions
        sub = subs.get(subscription)
        limit = cfg.maxSubscriptionsPerTopic
        if limit and sub is None and len(subs) >= limit:
            raise BrokerError(pb.NotAllowedError,
                              f"topic {topic} reached max subscriptions limit ({limit})")
        limit = cfg.maxConsumersPerTopic
        if limit and sum(len(s.consumers) for s in subs.values()) >= limit:
            raise BrokerError(pb.ConsumerBusy, f"topic {topic} reached max consumers limit ({limit})")
        limit = cfg.maxConsumersPerSubscription
        if limit and sub is not None and len(sub.consumers) >= limit:
            raise BrokerError(pb.ConsumerBusy,
                              f"subscription {subscription} reached max consumers limit ({limit})")
