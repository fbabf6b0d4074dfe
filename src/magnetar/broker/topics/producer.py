"""Producer: one client producer attached to a topic, and its publish bookkeeping.

A producer closes after its last answer: `after_answers` runs the close (CloseProducer to
the client when the broker closes it, Success when the client asked) once every send
handed to storage for it has its receipt or error queued, so no SendReceipt ever follows
the close and none names a producer id the connection no longer has. Meanwhile it is
``closing``: a persistent topic drops its new sends unanswered, and the client sends them
again wherever it reconnects (as Pulsar drops the sends that reach a closed topic).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.topics.txn_sends import publish_in_order
from magnetar.protocol import pb
from magnetar.protocol.fastpath import METADATA_SIZE_AT, send_receipt_frame

if TYPE_CHECKING:
    import asyncio
    from collections import deque

    from magnetar.broker.topics.send_settling import SendsSettled
    from magnetar.broker.topics.topic import Topic
    from magnetar.broker.topics.txn_sends import Deferred
    from magnetar.protocol.frames import SendFrame


#: ``Producer.settle_at`` when nobody waits
_NEVER = 1 << 62


class ProducerCnx(Protocol):
    """What producers and topics use of the connection a producer came in on
    (``connection.ServerCnx`` is one): the topics room names no room above it."""

    @property
    def producers(self) -> dict[int, Producer]: ...
    @property
    def closed(self) -> bool: ...
    @property
    def peer(self) -> str: ...
    @property
    def txn_adds(self) -> dict[tuple[int, int], list[asyncio.Task[None]]]: ...
    def send(self, cmd: pb.BaseCommand) -> None: ...
    def send_error(self, request_id: int, code: pb.ServerError, message: str) -> None: ...
    def write(self, data: bytes) -> None: ...
    def write_held(self, data: bytes) -> bool: ...
    def release_held(self) -> None: ...
    def on_send_done(self, size: int) -> None: ...
    def txn_send_lost(self, txn: tuple[int, int]) -> None: ...
    def on_producer_ready(self, producer: Producer, request_id: int) -> None: ...
    def producer_closed_by_broker(self, producer: Producer) -> None: ...
    async def check_liveness(self, timeout: float) -> bool: ...
    def abort(self, why: str) -> None: ...


class Producer:
    """A producer as the broker sees it: connection, topic, id, name, access mode, counters."""

    def __init__(
        self,
        cnx: ProducerCnx,
        topic: Topic,
        producer_id: int,
        name: str,
        access_mode: int,
        user_provided_name: bool,
        schema_version: bytes | None,
        topic_epoch: int | None = None,
    ) -> None:
        """``topic_epoch``: the epoch a reconnecting exclusive producer was given (None: a
        new producer); the topic sets the one it holds once it attaches (`Topic`)."""
        self.cnx = cnx
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.access_mode = access_mode
        self.user_provided_name = user_provided_name
        self.schema_version = schema_version
        self.msg_in = 0
        self.bytes_in = 0
        self.connected_since = time.time()  # epoch seconds (stats: connectedSince)
        self.topic_epoch = topic_epoch
        self.ready = True  # False while a WaitForExclusive producer waits for the topic
        self.in_flight = 0  # sends handed to storage, not answered yet (`PersistentTopic`)
        self.closing = False  # closed once in_flight drains: new sends are dropped
        self._after_answers: list[Callable[[], None]] = []
        self.txn_enabled = False  # CommandProducer.txn_enabled: may send in transactions
        # sends held in order behind a transactional one that waits (`txn_sends.py`)
        self.deferred: deque[Deferred] | None = None
        # sends settled (answered, refused or dropped), in the order they were read, and
        # who waits for a count of them (`send_settling.py`)
        self.settled = 0
        self.settle_watch: list[tuple[int, SendsSettled]] | None = None
        self.settle_at = _NEVER  # the lowest count in ``settle_watch``

    def success_command(self, request_id: int, ready: bool = True) -> pb.BaseCommand:
        resp = pb.CommandProducerSuccess(
            request_id=request_id,
            producer_name=self.name,
            last_sequence_id=self.topic.last_sequence_id(self.name),
            producer_ready=ready,
        )
        if self.schema_version is not None:
            resp.schema_version = self.schema_version
        if self.topic_epoch is not None and ready:
            resp.topic_epoch = self.topic_epoch
        return pb.BaseCommand(type=pb.BaseCommand.PRODUCER_SUCCESS, producer_success=resp)

    def publish(
        self, send: SendFrame, payload: bytes | memoryview, size: int, part_crc: int | None = None
    ) -> None:
        """Publish one Send; ``size`` is ``len(payload)``, handed back with its answer;
        ``part_crc`` the payload part's CRC32C when the caller checked it (`Topic.publish`).
        The topic counts the messages in ``msg_in``/``bytes_in`` once they are stored.
        A Send in a transaction, or any Send while one waits, goes to `txn_sends`, but for
        the common one, published here: a later send of a transaction checked open on the
        topic (``verified``: the buffer is ready and the transaction neither ended nor
        refused there) whose metadata ends with the transaction's id, as clients write it."""
        txn = send.txnid
        if self.deferred is None:
            if txn is None:
                self.topic.publish(self, send, payload, size, part_crc)
                return
            buf = self.topic.txn_buffer
            if buf is not None and self.txn_enabled:
                lane = buf.verified.get(txn)
                if lane is not None:
                    # `fastpath.metadata_ends_with`, inline (once a message): the decoder
                    # checked the part's layout
                    end = 10 + METADATA_SIZE_AT(payload, 6)[0]
                    start = end - lane.size
                    if start >= 10 and payload[start:end] == lane.fields:
                        self.topic.publish(self, send, payload, size, part_crc, txn, lane)
                        return
        publish_in_order(self, send, payload, size, part_crc)

    def send_receipt(
        self, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int, size: int
    ) -> None:
        """Answer a send of ``size`` payload bytes with its receipt."""
        self.cnx.write(
            send_receipt_frame(self.producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id)
        )
        self.cnx.on_send_done(size)
        self.settled += 1
        if self.settled >= self.settle_at:
            self._tell_settled()

    def receipt_held(
        self, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int, size: int
    ) -> bool:
        """`send_receipt`, queued for the caller's ``cnx.release_held()`` (see
        `ServerCnx.write_held`); True when the caller must make that call."""
        must_release = self.cnx.write_held(
            send_receipt_frame(self.producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id)
        )
        self.cnx.on_send_done(size)
        self.settled += 1
        if self.settled >= self.settle_at:
            self._tell_settled()
        return must_release

    def send_error(self, sequence_id: int, code: pb.ServerError, message: str, size: int,
                   txn: tuple[int, int] | None = None) -> None:
        """Answer a send of ``size`` payload bytes with a SendError; ``txn``: the
        transaction it was in (its connection notes that one of its sends was lost)."""
        err = pb.CommandSendError(
            producer_id=self.producer_id, sequence_id=sequence_id, error=code, message=message
        )
        self.cnx.send(pb.BaseCommand(type=pb.BaseCommand.SEND_ERROR, send_error=err))
        self.dropped(size, txn)  # (settled as a dropped one is, its error queued first)

    def dropped(self, size: int, txn: tuple[int, int] | None = None) -> None:
        """A send of ``size`` payload bytes left unanswered (its producer closing, its
        connection closed): the client sends it again where it reconnects."""
        self.cnx.on_send_done(size)
        if txn is not None:
            self.cnx.txn_send_lost(txn)
        self.settled += 1
        if self.settled >= self.settle_at:
            self._tell_settled()

    def watch_settled(self, count: int, wait: SendsSettled) -> None:
        """Tell ``wait`` once ``settled`` reaches ``count`` (`send_settling.py`)."""
        watch = self.settle_watch
        if watch is None:
            watch = self.settle_watch = []
        watch.append((count, wait))
        if count < self.settle_at:
            self.settle_at = count

    def _tell_settled(self) -> None:
        watch = self.settle_watch or []
        settled = self.settled
        left = [(count, wait) for count, wait in watch if count > settled]
        self.settle_watch = left or None
        self.settle_at = min((count for count, _ in left), default=_NEVER)
        for count, wait in watch:
            if count <= settled:
                wait.one_done()

    def after_answers(self, then: Callable[[], None]) -> None:
        """Run ``then`` once every send in flight for this producer is answered (now, if
        none is); until then the producer is ``closing``."""
        if not self.in_flight:
            then()
            return
        self.closing = True
        self._after_answers.append(then)

    def answered(self) -> None:
        """The last send in flight of a ``closing`` producer was answered: close it."""
        todo, self._after_answers = self._after_answers, []
        for then in todo:
            then()

    def close_by_broker(self) -> None:
        """Close this producer from the broker's side (its client gets CloseProducer and
        reconnects), after its last answer (`after_answers`)."""
        self.after_answers(lambda: self.cnx.producer_closed_by_broker(self))
