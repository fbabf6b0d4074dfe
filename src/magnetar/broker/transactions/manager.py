"""`TransactionCoordinators`: the coordinators this broker serves, and the participants'
checker (`check_open`, the contract's ``TxnChecker``).

Coordinator N belongs to the broker serving partition N of `ASSIGN_TOPIC` (alone: every
coordinator is served here). A coordinator is loaded from its records on first use (a
client's TcClientConnect after its lookup) and by a periodic round that also drops the ones
whose bundle moved away, so a coordinator moves with its bundle and its open transactions
keep their timeouts. The records live in the cluster's metadata store (ZooKeeper), or, for
a broker alone, in ``transactions.log`` (`TxnLog`, an append-only file) in its data
directory (a ``transactions.db`` of an earlier version is moved into it once). A broker
with ``transactionCoordinatorEnabled`` creates the ``pulsar`` tenant, the ``pulsar/system``
namespace and the assign topic (`STANDALONE_COORDINATORS` partitions) at start when they
are missing, as Pulsar's standalone does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.topic_name import TopicName
from magnetar.broker.transactions.coordinator import (
    ENDED_RETENTION_S,
    TransactionCoordinator,
    now_ms,
)
from magnetar.broker.transactions.participants import Participants
from magnetar.broker.transactions.records import OPEN, TxnRecord, TxnRecords, TxnStore
from magnetar.broker.transactions.txnlog import TxnLog
from magnetar.protocol import pb

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

SYSTEM_NAMESPACE = "pulsar/system"
ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
STANDALONE_COORDINATORS = 16
ROUND_S = 5.0


def assign_partition(tc: int) -> str:
    return f"{ASSIGN_TOPIC}-partition-{tc}"


class TransactionCoordinators:
    """The coordinators served here; a no-op (every command refused) when disabled."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.enabled = bool(service.config.transactionCoordinatorEnabled)
        self.coordinators: dict[int, TransactionCoordinator] = {}
        self.participants = Participants(service)
        self.records: TxnStore | None = None
        self._log: TxnLog | None = None
        #: the coordinators' store is this broker's own log, written on the loop (a broker
        #: alone): their commands run as they are read (`TransactionCoordinator.inline`)
        self.inline_store = False
        self._loading: dict[int, asyncio.Task[TransactionCoordinator]] = {}
        self._round: asyncio.Task[None] | None = None
        self._count: int | None = None
        config = service.config
        # one of a cluster's brokers (bundle ownership; it joins once listening)
        self.clustered = bool(config.metadataStoreUrl and config.magnetarSharedStorage
                              and service.metadata_store is not None)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        if not self.enabled:
            return
        store = self.service.metadata_store if self.clustered else None
        if store is None:
            data = self.service.config.magnetarDataDir
            self._log = TxnLog(os.path.join(data, "transactions.log"))
            await self._log.open(migrate_from=os.path.join(data, "transactions.db"))
            self.inline_store = True
        await self._create_assign_topic()
        self.records = self._log if store is None else TxnRecords(store)
        self._round = asyncio.get_running_loop().create_task(self._rounds())

    async def stop(self) -> None:
        if self._round is not None:
            self._round.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._round
        for task in self._loading.values():
            task.cancel()
        for coordinator in self.coordinators.values():
            coordinator.close()
        self.coordinators.clear()
        self.participants.close()
        if self._log is not None:
            await self._log.close()

    async def _create_assign_topic(self) -> None:
        """The ``pulsar/system`` namespace and the assign topic when they are missing (a
        broker alone, or a cluster's broker started as a standalone on a metadata store,
        as Pulsar's standalone makes them; ``initialize-cluster-metadata`` makes them for
        a cluster)."""
        from magnetar.broker.namespaces.registry import NamespaceError

        namespaces = self.service.namespaces
        for make, name in ((namespaces.create_tenant, "pulsar"),
                           (namespaces.create_namespace, SYSTEM_NAMESPACE)):
            try:
                write = make(name)
            except NamespaceError:
                continue  # there already
            if write is not None:
                await write
        if await self.service.metadata.read_through(f"partitioned/{ASSIGN_TOPIC}") is None:
            await self.service.create_partitioned_topic_async(ASSIGN_TOPIC, STANDALONE_COORDINATORS)

    # ------------------------------------------------------------------ serving
    async def count(self) -> int:
        """How many coordinators the cluster has (the assign topic's partitions)."""
        if self._count is None:
            meta = await self.service.metadata.read_through(f"partitioned/{ASSIGN_TOPIC}")
            if meta is None:
                return 0
            self._count = int(meta["partitions"])
        return self._count

    def served_here(self, tc: int) -> bool:
        cluster = self.service.cluster
        if cluster is None:
            return not self.clustered
        return cluster.serves(assign_partition(tc))

    def serving(self, tc: int) -> TransactionCoordinator | None:
        """Coordinator ``tc`` when it is loaded and served here (what `get` returns at
        once); None: ask `get`, which loads it or tells why not."""
        coordinator = self.coordinators.get(tc)
        if coordinator is not None and not coordinator.closed and self.served_here(tc):
            return coordinator
        return None

    def serving_inline(self, tc: int) -> TransactionCoordinator | None:
        """`serving`, only where the coordinator's store writes at once (its `*_now`
        commands may be used as a command is read); None otherwise."""
        coordinator = self.serving(tc)
        return coordinator if coordinator is not None and coordinator.inline else None

    async def get(self, tc: int) -> TransactionCoordinator:
        """Coordinator ``tc``, loaded if need be: ``NotAllowed`` when coordinators are off,
        ``TransactionCoordinatorNotFound`` when it does not exist or is not served here."""
        coordinator = self.coordinators.get(tc)
        if coordinator is not None and not coordinator.closed and self.served_here(tc):
            return coordinator  # (served and loaded: the checks below were passed)
        if not self.enabled or self.records is None:
            raise BrokerError(pb.NotAllowedError, (
                "transactions are not enabled on this broker (transactionCoordinatorEnabled="
                "false)" if not self.enabled else "the transaction coordinators are starting"))
        count = await self.count()
        if not 0 <= tc < count:
            raise BrokerError(pb.TransactionCoordinatorNotFound, (
                f"transaction coordinator {tc} does not exist (the cluster has {count}: "
                f"partitions of {ASSIGN_TOPIC})"))
        if not self.served_here(tc):
            self._drop(tc)
            raise BrokerError(pb.TransactionCoordinatorNotFound, (
                f"transaction coordinator {tc} is not served by this broker; look up "
                f"{assign_partition(tc)}"))
        coordinator = self.coordinators.get(tc)
        if coordinator is not None and not coordinator.closed:
            return coordinator
        task = self._loading.get(tc)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._load(tc))
            self._loading[tc] = task
            task.add_done_callback(lambda _t: self._loading.pop(tc, None))
        return await asyncio.shield(task)

    async def _load(self, tc: int) -> TransactionCoordinator:
        assert self.records is not None
        config = self.service.config
        coordinator = TransactionCoordinator(
            tc, self.records, self.participants.end, notify_now=self.participants.end_now,
            max_active=config.maxActiveTransactionsPerCoordinator,
            default_timeout_s=float(config.transactionTimeoutDefaultSeconds))
        await coordinator.recover()
        self.coordinators[tc] = coordinator
        return coordinator

    def _drop(self, tc: int) -> None:
        coordinator = self.coordinators.pop(tc, None)
        if coordinator is not None:
            log.info("transaction coordinator %d: no longer served here", tc)
            coordinator.close()

    async def _rounds(self) -> None:
        """Periodically: drop coordinators whose bundle moved, load those now served here
        (at start, and a bundle taken over after a broker was lost), forget long-ended
        transactions."""
        while True:
            try:
                await self.round()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("transaction coordinators' round failed: %s", exc)
            await asyncio.sleep(ROUND_S)

    async def round(self) -> None:
        for tc in list(self.coordinators):
            if not self.served_here(tc):
                self._drop(tc)
        for tc in range(await self.count()):  # recovered: their timeouts and ends resume
            if tc not in self.coordinators and self.served_here(tc):
                await self.get(tc)
        cutoff = now_ms() - int(ENDED_RETENTION_S * 1000)
        for coordinator in self.coordinators.values():
            coordinator.purge(cutoff)

    # ------------------------------------------------------------------ lookups
    async def record(self, tc: int, seq: int) -> TxnRecord | None:
        """A transaction's record: from its coordinator when served here, else stored."""
        coordinator = self.coordinators.get(tc)
        if coordinator is not None and not coordinator.closed:
            return coordinator.txns.get(seq)
        if self.records is None:
            return None
        if not self.inline_store:
            # a cluster's store bounds its requests with `asyncio.timeout`, which needs a
            # task: a send's check stepped eagerly outside one (`txn_sends._check_now`)
            # stops at this turn of the loop, and is asked again in a task
            await asyncio.sleep(0)
        return await self.records.get(tc, seq)

    async def check_open(self, most: int, least: int, topic: str,
                         subscription: str | None = None) -> None:
        """The participants' check (``TxnChecker``): the transaction exists, is OPEN, and
        the topic (or subscription) was added to it (AddPartitionToTxn /
        AddSubscriptionToTxn come before the first send or ack); `BrokerError` with
        ``TransactionNotFound`` or ``InvalidTxnStatus`` otherwise."""
        txn = f"({most},{least})"
        if not self.enabled:
            raise BrokerError(pb.TransactionNotFound, (
                f"transaction {txn}: transactions are not enabled on this broker "
                "(transactionCoordinatorEnabled=false)"))
        rec = await self.record(most, least)
        if rec is None:
            raise BrokerError(pb.TransactionNotFound, f"transaction {txn} not found")
        if rec.state != OPEN:
            raise BrokerError(pb.InvalidTxnStatus, f"transaction {txn} is {rec.state}, not OPEN")
        if subscription is None:
            if topic in rec.partitions:  # (stored by their full names, as topics name themselves)
                return
            name = _normal(topic)
            if name not in {_normal(p) for p in rec.partitions}:
                raise BrokerError(pb.InvalidTxnStatus, (
                    f"topic {topic} was not added to transaction {txn} (AddPartitionToTxn "
                    "comes before the first send)"))
        elif ((topic, subscription) not in rec.subscriptions
              and (_normal(topic), subscription) not in {(_normal(t), s) for t, s in rec.subscriptions}):
            raise BrokerError(pb.InvalidTxnStatus, (
                f"subscription {subscription} of {topic} was not added to transaction {txn} "
                "(AddSubscriptionToTxn comes before the first acknowledgement)"))

    # ------------------------------------------------------------------ stats
    def coordinator_stats(self, tc: int) -> dict[str, Any]:
        coordinator = self.coordinators.get(tc)
        if coordinator is None:
            raise BrokerError(pb.TransactionCoordinatorNotFound,
                              f"transaction coordinator {tc} is not served by this broker")
        return {"state": "Ready", "leastSigBits": coordinator._next_id,
                "lowWaterMark": min((r.seq for r in coordinator.txns.values() if r.state == OPEN),
                                    default=-1),
                "ongoingTxnSize": coordinator.active(),
                "recoverStartTime": 0, "recoverEndTime": 0}


def _normal(topic: str) -> str:
    try:
        return str(TopicName.parse(topic))
    except ValueError:
        return topic
