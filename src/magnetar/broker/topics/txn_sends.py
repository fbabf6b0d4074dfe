"""Sends in a transaction, and the order of a producer's sends around them.

A Send with a transaction id goes through here (`Producer.publish` sends it): refused
with ``NotAllowedError`` (nothing stored) when its producer did not set
``CommandProducer.txn_enabled`` or the topic is not persistent; otherwise stored in the
topic's transaction buffer. The first Send of a transaction on a topic needs the
coordinator's answer (`TxnChecker.check_open`, once per transaction and topic),
unless a coordinator of this broker answered the transaction's AddPartitionToTxn as it
read it (`TransactionBuffer.added`: checked then, the send takes the later sends' path);
the check is run at once, one step of the coroutine, and a coordinator served by this
broker answers in that step, so the send is stored straight away. When the answer
would wait (a coordinator on another broker), or the topic never saw a transaction (its
buffer is created first), the send waits, and the producer's later sends, transactional
or not, wait behind it in ``Producer.deferred`` (their payloads copied: the connection's
read buffer is reused), so that a producer's sends are stored, and answered, in the
order they came. A transaction's AddPartitionToTxn read before its send on the same
connection and still under way in a task (`CnxBase.txn_adds`) is waited for before the
check: a client may write the send right behind the add. A topic that never saw a
transaction pays one attribute test per Send.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerError
from magnetar.broker.stepping import DONE, RAISED, step
from magnetar.broker.topics.transaction_buffer import TransactionBuffer, txn_name
from magnetar.broker.topics.txn_metadata import TxnId, with_txnid
from magnetar.protocol import pb
from magnetar.storage import StorageError

if TYPE_CHECKING:
    from magnetar.broker.topics.producer import Producer
    from magnetar.broker.topics.topic import PersistentTopic
    from magnetar.protocol.frames import SendFrame

log = logging.getLogger(__name__)

#: the drains under way (a reference keeps each task alive until it is done)
_DRAINING: set[asyncio.Future[None]] = set()
#: a Send waiting: (its frame, its payload part (a copy), its size, its checked CRC32C)
Deferred = tuple["SendFrame", "bytes | memoryview", int, "int | None"]


def publish_in_order(producer: Producer, send: SendFrame, payload: bytes | memoryview,
                     size: int, part_crc: int | None) -> None:
    """Publish ``send`` (in a transaction, or behind one that waits) in its order; the
    common case, a later send of a transaction checked on this topic whose metadata
    carries the id where clients write it, is published by `Producer.publish` itself."""
    queue = producer.deferred
    if queue is not None:
        queue.append((send, bytes(payload), size, part_crc))
        return
    txn = send.txnid
    topic: PersistentTopic = producer.topic  # type: ignore[assignment]  # tested: a buffer
    buf = topic.txn_buffer
    if buf is not None and txn is not None and producer.txn_enabled:
        # a verified transaction is open here and the buffer ready (`_drain` and
        # `_check_now` add one only then; its end removes it), so none of `_now`'s other
        # tests can refuse it
        fields: bytes | None = None  # (its metadata was tested against them: not again)
        if txn in buf.verified:
            verdict: bool | BrokerError = True
        elif txn in producer.cnx.txn_adds:  # an add of it read before, still under way
            verdict = False
        else:
            verdict = _check_now(topic, buf, txn)
            fields = buf.verified_fields(txn)
        if verdict is True:
            stored = with_txnid(payload, txn, fields)
            if stored is None:
                producer.send_error(send.sequence_id, pb.UnknownError,
                                    "the message's metadata cannot be read", size, txn)
                return
            topic.publish(producer, send, stored, size, part_crc if stored is payload else None,
                          txn)
            return
        if verdict is not False:  # the coordinator's refusal
            producer.send_error(send.sequence_id, verdict.code, str(verdict), size, txn)
            return
    if _now(producer, send, payload, size, part_crc):
        return
    producer.deferred = deque([(send, bytes(payload), size, part_crc)])
    task = asyncio.ensure_future(_drain(producer))
    _DRAINING.add(task)
    task.add_done_callback(_DRAINING.discard)


def _check_now(topic: PersistentTopic, buf: TransactionBuffer, txn: TxnId) -> bool | BrokerError:
    """The first send of ``txn`` on the topic: its check with the coordinator run at once,
    one step of the coroutine (as an eager task would), so that neither this send nor
    the producer's next ones wait in ``Producer.deferred`` when the coordinator answers
    without waiting (one served by this broker, its transactions in memory). True:
    ``txn`` is verified now; its refusal (a BrokerError); False when the check would
    wait (the coroutine is closed, `_drain` asks again in its task) or the buffer is
    not ready or the transaction ended here (`_now` and `_drain` tell)."""
    if not buf.ready.done() or buf.is_ended(txn):
        return False
    check = topic.service.txn_checker.check_open(txn[0], txn[1], topic.name)
    if not asyncio.iscoroutine(check):  # another awaitable: left to `_drain`, which awaits
        return False                    # the checker again (this one is dropped unawaited)
    state, value = step(check)
    if state == DONE:
        buf.verify(txn)
        return True
    if state == RAISED:
        if isinstance(value, BrokerError):
            return value
        raise value
    check.close()  # it waits for something (a record read from the store)
    return False


def _refusal(producer: Producer, send: SendFrame) -> BrokerError | None:
    if not producer.topic.persistent:
        return BrokerError(pb.NotAllowedError,
                           f"topic {producer.topic.name} is not persistent: no transactions")
    if not producer.txn_enabled:
        txn = send.txnid or (0, 0)
        return BrokerError(pb.NotAllowedError, (
            f"producer {producer.name} did not enable transactions (txn_enabled in its "
            f"Producer command): its send in transaction {txn_name(txn)} is refused"))
    return None


def _now(producer: Producer, send: SendFrame, payload: bytes | memoryview, size: int,
         part_crc: int | None) -> bool:
    """Handle a transactional send at once if nothing needs waiting for (True)."""
    refusal = _refusal(producer, send)
    if refusal is not None:
        producer.send_error(send.sequence_id, refusal.code, str(refusal), size, send.txnid)
        return True
    topic: PersistentTopic = producer.topic  # type: ignore[assignment]  # persistent: checked
    buf = topic.txn_buffer
    if buf is None or not buf.ready.done() or send.txnid not in buf.verified:
        return False
    _append(producer, topic, buf, send, payload, size, part_crc)
    return True


def _append(producer: Producer, topic: PersistentTopic, buf: TransactionBuffer, send: SendFrame,
            payload: bytes | memoryview, size: int, part_crc: int | None) -> None:
    txn = send.txnid
    assert txn is not None
    if buf.is_ended(txn):
        producer.send_error(send.sequence_id, pb.InvalidTxnStatus,
                            f"transaction {txn_name(txn)} already ended on {topic.name}", size,
                            txn)
        return
    stored = with_txnid(payload, txn, buf.verified_fields(txn))
    if stored is None:
        producer.send_error(send.sequence_id, pb.UnknownError,
                            "the message's metadata cannot be read", size, txn)
        return
    if stored is not payload:
        part_crc = None
    topic.publish(producer, send, stored, size, part_crc, txn)


async def _drain(producer: Producer) -> None:
    """Publish the producer's waiting sends in order, waiting where one needs it."""
    queue = producer.deferred
    assert queue is not None
    try:
        while queue:
            send, payload, size, part_crc = queue[0]
            if producer.cnx.closed:
                queue.popleft()
                producer.dropped(size, send.txnid)
                continue
            try:
                if send.txnid is None:
                    queue.popleft()
                    producer.topic.publish(producer, send, payload, size, part_crc)
                    continue
                refusal = _refusal(producer, send)
                if refusal is not None:
                    raise refusal
                topic: PersistentTopic = producer.topic  # type: ignore[assignment]
                txn = send.txnid
                buf = topic.txn_buffer
                if buf is not None and buf.ready.done() and txn in buf.verified:
                    queue.popleft()  # the sends behind a transaction's first: nothing to wait for
                    _append(producer, topic, buf, send, payload, size, part_crc)
                    continue
                buf = await ensure_buffer(topic)
                await asyncio.shield(buf.ready)
                adds = producer.cnx.txn_adds.get(txn)
                if adds:  # read before this send on its connection: done first
                    await asyncio.wait(list(adds))
                if txn not in buf.verified and not buf.is_ended(txn):
                    await topic.service.txn_checker.check_open(txn[0], txn[1], topic.name)
                    if not buf.is_ended(txn):  # (it may have ended meanwhile) verified:
                        buf.verify(txn)  # open, never ended (`publish_in_order`)
                queue.popleft()
                _append(producer, topic, buf, send, payload, size, part_crc)
            except BrokerError as exc:
                if queue and queue[0][0] is send:
                    queue.popleft()
                producer.send_error(send.sequence_id, exc.code, str(exc), size, send.txnid)
            except StorageError as exc:
                if queue and queue[0][0] is send:
                    queue.popleft()
                producer.send_error(send.sequence_id, pb.ServiceNotReady,
                                    f"transaction buffer unavailable: {exc}", size, send.txnid)
            except Exception:
                log.exception("topic %s: transactional send failed", producer.topic.name)
                if queue and queue[0][0] is send:
                    queue.popleft()
                producer.send_error(send.sequence_id, pb.UnknownError, "internal broker error",
                                    size, send.txnid)
    finally:
        producer.deferred = None


async def ensure_buffer(topic: PersistentTopic) -> TransactionBuffer:
    """The topic's transaction buffer, created (and its first snapshot stored, so that a
    restart knows to replay) if the topic had none."""
    buf = topic.txn_buffer
    if buf is not None:
        return buf
    buf = topic.txn_buffer = TransactionBuffer(topic)
    try:
        await buf.take_snapshot()
    except Exception as exc:
        if topic.txn_buffer is buf:
            topic.txn_buffer = None
        buf.ready.set_exception(exc)
        buf.ready.exception()  # retrieved: each waiter raises it
        topic.txn_visibility_changed()
        raise
    buf.ready.set_result(None)
    buf.update_bound()
    topic.txn_visibility_changed()
    return buf


__all__ = ["Deferred", "ensure_buffer", "publish_in_order"]
