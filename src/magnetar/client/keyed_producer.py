"""`KeyedTopicProducer`: the ``BatchingType.KeyBased`` producer on one topic or partition,
one open batch per key, each flushed as its own ``Send`` (the Default hot path stays in
`topic_producer`). A transaction's messages are batched too, every open batch in one
transaction at a time (a message of another sends them all first)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from magnetar.client.batching import KeyedBatches, full_header
from magnetar.client.topic_producer import ProducerConf, SendOp, TopicProducer
from magnetar.protocol import build_payload_part, command, pb
from magnetar.protocol.frames import encode_payload_command

if TYPE_CHECKING:
    from magnetar.client.client import Client

T = pb.BaseCommand


class KeyedTopicProducer(TopicProducer):
    """``BatchingType.KeyBased``: messages wait in one batch per key (ordering key, else
    partition key) and every batch goes out as its own ``Send``, with the key in its
    ``MessageMetadata``, so a Key_Shared subscription hands each batch to the consumer
    owning that key. The count, byte and delay limits apply to all open batches together;
    reaching one flushes them all, in first-sequence-id order, so receipts still arrive in
    ``_ops`` order. Sequence ids inside a batch are not consecutive: each message carries
    its own in ``SingleMessageMetadata``, and the batch its highest."""

    def __init__(self, client: Client, topic: str, partition: int, conf: ProducerConf) -> None:
        super().__init__(client, topic, partition, conf)
        self._keyed = KeyedBatches()
        self._batch = self._keyed  # type: ignore[assignment]  # same len() protocol
        # ``Producer``'s fast path appends to a Default batch: route everything via ``add``
        self.batching = False

    def add_plain(self, payload: bytes, fut: asyncio.Future[Any]) -> None:
        self.add(payload, fut, None, None, None, None, None, None)

    def add(self, payload: bytes, fut: asyncio.Future[Any], properties: dict[str, str] | None,
            partition_key: str | None, ordering_key: bytes | None, event_time: int | None,
            sequence_id: int | None, deliver_at: int | None,
            txn: tuple[int, int] | None = None) -> None:
        size = len(payload)
        if deliver_at is not None or size >= self._max_batch_bytes:
            # not batched: the base class flushes the open batches, then sends it alone
            super().add(payload, fut, properties, partition_key, ordering_key, event_time,
                        sequence_id, deliver_at, txn)
            return
        seq = self._take_sequence_id(sequence_id)
        self.pending += 1
        header = full_header(size, properties, partition_key, ordering_key, event_time, seq)
        batches = self._keyed
        if batches.n and (batches.size + size > self._max_batch_bytes or batches.txn != txn):
            self._flush_batch()
        batches.txn = txn
        batches.add(header, payload, fut, seq, partition_key, ordering_key)
        if batches.n >= self._max_batch_n or batches.size >= self._max_batch_bytes:
            self._flush_batch()
        elif self._batch_timer is None:
            self._batch_timer = self._loop.call_later(self._delay, self._on_batch_timer)

    def _flush_batch(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        txn = self._keyed.txn
        for b in self._keyed.take():
            n = len(b.futures)
            first = b.first_seq
            last = b.last_seq
            meta = self._metadata(first)
            meta.num_messages_in_batch = n
            if b.partition_key is not None:
                meta.partition_key = b.partition_key
            if b.ordering_key is not None:
                meta.ordering_key = b.ordering_key
            if last != first:
                meta.highest_sequence_id = last
            if txn is not None:
                meta.txnid_most_bits, meta.txnid_least_bits = txn
            body = self._compress(meta, b"".join(b.parts))
            cmd = command(T.SEND, producer_id=self.producer_id, sequence_id=first,
                          num_messages=n)
            if last != first:
                cmd.send.highest_sequence_id = last
            if txn is not None:
                cmd.send.txnid_most_bits, cmd.send.txnid_least_bits = txn
            frame = encode_payload_command(cmd, build_payload_part(meta, body))
            self._push(SendOp(first, frame, b.futures, n, batch=True, last=last))

    def _take_open(self) -> list[asyncio.Future[Any]]:
        return [f for b in self._keyed.take() for f in b.futures]
