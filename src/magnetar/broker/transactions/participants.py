"""Telling an ending transaction's participants: ``EndTxnOnPartition`` to each topic
partition and ``EndTxnOnSubscription`` to each subscription it touched, over a binary
connection to the broker owning the topic; a topic this broker owns (always, in a
standalone) is told in-process (`end_on_partition`, `end_on_subscription`: what the
commands' handlers run), without a command and its answer over a loopback connection.

Each participant is retried with backoff (0.1 s doubling to 5 s) until it answers success:
an owner that is not ready (the topic moving, a broker restarting, a broker that does not
handle the command yet) is asked again, the owner looked up again first. The participant
answers idempotently, so a repeat after a lost answer or a coordinator restart is harmless.
Connections are kept per broker address and reused; the broker's ``brokerClient*``
credentials go in their Connect. The connection is TLS (the owner's ``pulsar+ssl`` port)
when ``brokerClientTlsEnabled`` is on, as Pulsar's broker client chooses, or when the owner
listens on TLS only (``brokerServicePort=-1``); its trust is
``brokerClientTrustCertsFilePath``, else ``tlsTrustCertsFilePath``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.replication.remote_producer import (
    BrokerConnection,
    RemoteError,
    connect_broker,
    parse_broker_url,
)
from magnetar.broker.replication.remote_settings import (
    RemoteConfigError,
    RemoteSettings,
    remote_settings,
)
from magnetar.broker.transactions.records import TxnRecord
from magnetar.protocol import pb
from magnetar.storage import StorageError

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger(__name__)
T = pb.BaseCommand

REQUEST_TIMEOUT_S = 30.0
MAX_BACKOFF_S = 5.0


class ParticipantError(Exception):
    """A participant answered with an error (retried)."""


async def participant_topic(service: BrokerService, name: str) -> Topic | None:
    """The topic ``name``, loaded here (None: it does not exist); ServiceNotReady when
    another broker serves it."""
    cluster = service.cluster
    if cluster is None:  # (a loaded topic: its name is checked and served here)
        topic = service.topics.get(name)
        if topic is not None:
            service.housekeeping.touch(name)
            return topic
    service.check_topic_name(name)
    if cluster is not None:
        claim = cluster.claim(name)
        if claim is not None:
            await claim
    try:
        return await service.load_topic(name, create=False)
    except BrokerError as exc:
        if exc.code == pb.TopicNotFound:
            return None
        raise


async def end_on_partition(service: BrokerService, topic_name: str, txn: tuple[int, int],
                           action: int, durable: bool = False) -> None:
    """End ``txn`` on topic ``topic_name`` served here (its transaction buffer writes the
    marker); nothing to do on a topic that does not exist or never saw a transaction.
    ``durable``: return only once the marker is durable (asked by another process, an
    ``EndTxnOnPartition``, which may forget the transaction once answered)."""
    topic = await participant_topic(service, topic_name)
    buf = getattr(topic, "txn_buffer", None)
    if buf is not None:
        await buf.end(txn, action, wait=durable)


async def end_on_subscription(service: BrokerService, topic_name: str, sub_name: str,
                              txn: tuple[int, int], action: int) -> None:
    """End ``txn`` on subscription ``sub_name`` of ``topic_name`` (its pending acks)."""
    topic = await participant_topic(service, topic_name)
    sub = None if topic is None else topic.subscriptions.get(sub_name)
    acks = getattr(sub, "pending_acks", None)
    if acks is not None:
        await acks.end(txn, action)


class Participants:
    """Tells participants of ending transactions; one per broker."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._cnx: dict[str, BrokerConnection] = {}
        self._connecting: dict[str, asyncio.Lock] = {}
        self._settings: dict[bool, RemoteSettings | None] = {}

    def end_now(self, rec: TxnRecord, commit: bool) -> bool:
        """`end` done before it returns, where it can be: every participant a topic that
        this broker alone has loaded and whose buffer ends the transaction without a wait
        (`TransactionBuffer.end_now`), no subscription. True once all were told; False
        when one cannot be told so (those before it were: `end` tells them again, and a
        participant answers an end it has with success). A participant's failure is
        raised (`end` retries it)."""
        service = self.service
        if service.cluster is not None or rec.subscriptions:
            return False
        action = pb.ABORT if not commit else pb.COMMIT
        txn = (rec.tc, rec.seq)
        topics = service.topics
        for name in rec.partitions:
            topic = topics.get(name)
            if topic is None:  # (to be loaded: `participant_topic`, in `end`)
                return False
            service.housekeeping.touch(name)
            buf = getattr(topic, "txn_buffer", None)
            if buf is not None and not buf.end_now(txn, action):
                return False
        return True

    async def end(self, rec: TxnRecord, commit: bool) -> None:
        """Tell every participant of ``rec``; returns once all answered success."""
        action = pb.ABORT if not commit else pb.COMMIT
        jobs = [self._until_done(rec, action, topic, None) for topic in rec.partitions]
        jobs += [self._until_done(rec, action, topic, sub) for topic, sub in rec.subscriptions]
        if len(jobs) == 1:  # the common case: no task for it
            await jobs[0]
        elif jobs:
            await asyncio.gather(*jobs)

    async def _until_done(self, rec: TxnRecord, action: int, topic: str, sub: str | None) -> None:
        delay = 0.1
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._tell(rec, action, topic, sub)
                return
            except (RemoteError, ParticipantError, OSError, TimeoutError) as exc:
                level = logging.INFO if attempt < 5 else logging.WARNING
                log.log(level, "transaction %s: telling %s%s (attempt %d) failed: %s; retried",
                        rec.txn_id, topic, f" subscription {sub}" if sub else "", attempt, exc)
            except Exception:
                log.exception("transaction %s: telling %s failed; retried", rec.txn_id, topic)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_BACKOFF_S)

    async def _tell(self, rec: TxnRecord, action: int, topic: str, sub: str | None) -> None:
        owner = None if self.service.cluster is None else await self._owner(topic)
        if owner is None:  # served here: what the command's handler would do
            txn = (rec.tc, rec.seq)
            try:
                if sub is None:
                    await end_on_partition(self.service, topic, txn, action)
                else:
                    await end_on_subscription(self.service, topic, sub, txn, action)
            except BrokerError as exc:
                raise ParticipantError(f"{pb.ServerError.Name(exc.code)}: {exc}") from None
            except StorageError as exc:
                raise ParticipantError(f"ServiceNotReady: storage error: {exc}") from None
            return
        cnx = await self._connection(*owner)
        ids: dict[str, Any] = {"txnid_most_bits": rec.tc, "txnid_least_bits": rec.seq,
                               "txn_action": action}
        if sub is None:
            answer = await asyncio.wait_for(cnx.request(
                T.END_TXN_ON_PARTITION, topic=topic, **ids), REQUEST_TIMEOUT_S)
            body: Any = answer.endTxnOnPartitionResponse
        else:
            answer = await asyncio.wait_for(cnx.request(
                T.END_TXN_ON_SUBSCRIPTION,
                subscription=pb.Subscription(topic=topic, subscription=sub), **ids),
                REQUEST_TIMEOUT_S)
            body = answer.endTxnOnSubscriptionResponse
        if answer.type not in (T.END_TXN_ON_PARTITION_RESPONSE, T.END_TXN_ON_SUBSCRIPTION_RESPONSE):
            raise ParticipantError(f"unexpected answer {T.Type.Name(answer.type)}")
        if body.HasField("error"):
            raise ParticipantError(f"{pb.ServerError.Name(body.error)}: {body.message}")

    async def _owner(self, topic: str) -> tuple[str, bool] | None:
        """(``host:port``, whether over TLS) of the broker serving ``topic``; None when it
        is this one (alone, or the cluster's lookup says so), or when the owner has no
        binary URL (told here: the topic's load answers ServiceNotReady if it is served
        elsewhere, and the retry looks it up again)."""
        config = self.service.config
        cluster = self.service.cluster
        if cluster is not None:
            result = await cluster.lookup(topic)
            if not result.connect:
                plain, secure = result.owner.service_url, result.owner.service_url_tls
                tls = bool(secure) and (not plain or bool(config.brokerClientTlsEnabled))
                url = secure if tls else plain
                if url:
                    host, port = parse_broker_url(url)
                    return f"{host}:{port}", tls
        return None

    async def _connection(self, address: str, tls: bool) -> BrokerConnection:
        key = f"{'pulsar+ssl' if tls else 'pulsar'}://{address}"
        cnx = self._cnx.get(key)
        if cnx is not None and not cnx.closed.done():
            return cnx
        lock = self._connecting.setdefault(key, asyncio.Lock())
        async with lock:
            cnx = self._cnx.get(key)
            if cnx is not None and not cnx.closed.done():
                return cnx
            host, _, port = address.rpartition(":")
            settings = self._credentials(tls)
            if tls and (settings is None or settings.ssl_context is None):
                raise ParticipantError(f"cannot reach {key}: brokerClient* TLS settings unusable")
            cnx = await connect_broker(host, int(port), REQUEST_TIMEOUT_S, settings)
            self._cnx[key] = cnx
            return cnx

    def _credentials(self, tls: bool) -> RemoteSettings | None:
        """The ``brokerClient*`` credentials for Connect, with a TLS context when ``tls``."""
        if tls not in self._settings:
            record = {"brokerServiceUrl": "pulsar://self", "brokerServiceUrlTls": "pulsar+ssl://self"}
            try:
                settings = remote_settings(self.service.config.clusterName, record,
                                           _BrokerClientConfig(self.service.config, tls))
            except RemoteConfigError as exc:
                log.warning("brokerClient* settings unusable for transaction markers: %s", exc)
                settings = None
            if settings is not None and not tls:
                settings = dataclasses.replace(settings, ssl_context=None)
            self._settings[tls] = settings
        return self._settings[tls]

    def connected_brokers(self) -> list[str]:
        """The ``host:port`` of the brokers told over a connection (never this one's)."""
        return sorted(address for address, cnx in self._cnx.items() if not cnx.closed.done())

    def close(self) -> None:
        for cnx in self._cnx.values():
            cnx.close()
        self._cnx.clear()


class _BrokerClientConfig:
    """The broker's config as `remote_settings` reads it for a connection to a broker of
    its own cluster: TLS on or off as asked; the trust falls back to the broker's own."""

    def __init__(self, config: Any, tls: bool) -> None:
        self._config = config
        self._tls = tls

    def __getattr__(self, name: str) -> Any:
        if name == "brokerClientTlsEnabled":
            return self._tls
        if name == "brokerClientTrustCertsFilePath":
            return self._config.brokerClientTrustCertsFilePath or self._config.tlsTrustCertsFilePath
        return getattr(self._config, name)
