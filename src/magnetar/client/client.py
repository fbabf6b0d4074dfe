"""``Client``: entry point; owns the connection pool, lookups, producers and consumers."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import re
import ssl
import uuid
from typing import TYPE_CHECKING, Any, cast

from magnetar.client.auth import Authentication
from magnetar.client.backoff import with_retries
from magnetar.client.consumer import Consumer, ConsumerConf
from magnetar.client.enums import (
    BatchingType,
    CompressionType,
    ConsumerType,
    HashingScheme,
    InitialPosition,
    PartitionsRoutingMode,
    ProducerAccessMode,
    RegexSubscriptionMode,
    enum_argument,
)
from magnetar.client.errors import AlreadyClosed, NotAllowed
from magnetar.client.keyed_producer import KeyedTopicProducer
from magnetar.client.lookup import LookupService
from magnetar.client.message_id import MessageId
from magnetar.client.policies import ConsumerBatchReceivePolicy, ConsumerDeadLetterPolicy
from magnetar.client.pool import ConnectionPool, check_service_url, is_web_url, split_address
from magnetar.client.producer import Producer
from magnetar.client.reader import Reader
from magnetar.client.routing import Router
from magnetar.client.schema import TopicSchema, as_schema
from magnetar.client.service_url import service_hosts
from magnetar.client.topic import full_name, namespace_of, partition_name
from magnetar.client.topic_producer import ProducerConf, TopicProducer
from magnetar.client.transaction import Coordinators, Transaction
from magnetar.protocol import DEFAULT_MAX_FRAME_SIZE, pb

if TYPE_CHECKING:
    from magnetar.client.http_lookup import HttpLookupService

#: Producer and consumer ids, unique in the process (some brokers mix up equal ids
#: coming from different connections).
_IDS = itertools.count(1)

_REGEX_MODES = {
    RegexSubscriptionMode.PersistentOnly: pb.CommandGetTopicsOfNamespace.PERSISTENT,
    RegexSubscriptionMode.NonPersistentOnly: pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
    RegexSubscriptionMode.AllTopics: pb.CommandGetTopicsOfNamespace.ALL,
}


def _ssl_context(trust_file: str | None, allow_insecure: bool,
                 validate_hostname: bool, cert_file: str | None,
                 key_file: str | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=trust_file)
    ctx.check_hostname = validate_hostname and not allow_insecure
    if allow_insecure:
        ctx.verify_mode = ssl.CERT_NONE
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


class Client:
    """An asyncio Pulsar client (keyword arguments follow ``pulsar.Client``).

    Use as ``async with Client("pulsar://localhost:6650") as client: ...``, or call
    ``await client.close()`` when done. Must be created inside a running event loop.
    The service URL is a broker's binary address (``pulsar://``, ``pulsar+ssl://``) or its
    web service (``http://``, ``https://``: lookups over HTTP, as the official client does);
    it may name several brokers of a cluster, ``pulsar://h1:6650,h2:6650``, asked in turn.
    """

    def __init__(self, service_url: str, authentication: Authentication | None = None,
                 operation_timeout_seconds: float = 30, connection_timeout_ms: int = 10000,
                 use_tls: bool = False, tls_trust_certs_file_path: str | None = None,
                 tls_allow_insecure_connection: bool = False,
                 tls_validate_hostname: bool = False,
                 tls_private_key_file_path: str | None = None,
                 tls_certificate_file_path: str | None = None,
                 ssl_context: ssl.SSLContext | None = None, listener_name: str | None = None,
                 keep_alive_interval_seconds: float = 30,
                 enable_transaction: bool = False,
                 **_ignored: Any) -> None:
        web = is_web_url(check_service_url(service_url))
        if web:  # lookups over HTTP; an https:// service URL means TLS for the brokers too
            tls = use_tls or service_url.startswith("https://")
        else:
            hosts = [split_address(h) for h in service_hosts(service_url)]
            tls = hosts[0][2] or use_tls
            self._service_urls = [f"{'pulsar+ssl' if tls else 'pulsar'}://{h}:{p}"
                                  for h, p, _ in hosts]
        if tls and ssl_context is None:
            ssl_context = _ssl_context(tls_trust_certs_file_path, tls_allow_insecure_connection,
                                       tls_validate_hostname, tls_certificate_file_path,
                                       tls_private_key_file_path)
        self._op_timeout = float(operation_timeout_seconds)
        self._pool = ConnectionPool(authentication, ssl_context, connection_timeout_ms / 1000.0,
                                    keepalive=keep_alive_interval_seconds)
        self._lookup: LookupService | HttpLookupService
        if web:
            from magnetar.client.http_lookup import HttpLookupService  # aiohttp: only when used

            self._lookup = HttpLookupService(self._pool, service_url, tls, self._op_timeout,
                                             authentication, ssl_context, listener_name)
        else:
            self._lookup = LookupService(self._pool, self._service_urls, tls,
                                         self._op_timeout, listener_name)
        self._max_message_size = DEFAULT_MAX_FRAME_SIZE
        self._handles: set[Any] = set()
        self._closed = False
        # transactions (transaction.py): the coordinators, reached on first use
        self._enable_transaction = enable_transaction
        self._coordinators = Coordinators(self) if enable_transaction else None

    def operation_timeout_seconds(self) -> float:
        """How long an operation (lookup, subscribe, seek, ...) may take before it fails."""
        return self._op_timeout

    def _new_producer_id(self) -> int:
        return next(_IDS)

    def _new_consumer_id(self) -> int:
        return next(_IDS)

    def _forget(self, handle: Any) -> None:
        self._handles.discard(handle)

    def _check_open(self) -> None:
        if self._closed:
            raise AlreadyClosed("client is closed")

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _partitions(self, topic: str) -> int:
        return await with_retries(lambda: self._lookup.partitions(topic), self._op_timeout,
                                  self._pool.connect_budget())

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """Partition topic names, or ``[topic]`` for a non-partitioned topic."""
        topic = full_name(topic)
        n = await self._partitions(topic)
        return [partition_name(topic, i) for i in range(n)] if n else [topic]

    # --------------------------------------------------------------- producer
    async def create_producer(
        self, topic: str, producer_name: str | None = None, schema: Any = None,
        initial_sequence_id: int | None = None, send_timeout_millis: int = 30000,
        compression_type: CompressionType = CompressionType.NONE,
        max_pending_messages: int = 1000, max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False, batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10, chunking_enabled: bool = False,
        batching_type: BatchingType = BatchingType.Default,
        message_routing_mode: PartitionsRoutingMode =
            PartitionsRoutingMode.RoundRobinDistribution,
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        hashing_scheme: HashingScheme = HashingScheme.BoostHash,
        message_router: Any = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        initial_subscription_name: str | None = None,
        **_ignored: Any,
    ) -> Producer:
        """Create a producer (keyword arguments as in ``pulsar.Client.create_producer``).

        ``batching_type=BatchingType.KeyBased`` (with ``batching_enabled``) batches
        messages per key, so each batch holds one key. On a partitioned topic each
        partition may hold ``min(max_pending_messages, max_pending_messages_across_partitions
        // partitions)`` pending messages, as in the official clients, which bounds the
        total over all partitions by ``max_pending_messages_across_partitions`` (0 or less:
        no such bound); ``block_if_queue_full`` then waits for room instead of raising
        ``ProducerQueueIsFull``.
        """
        self._check_open()
        compression_type = enum_argument(CompressionType, compression_type, "compression_type")
        batching_type = enum_argument(BatchingType, batching_type, "batching_type")
        message_routing_mode = enum_argument(
            PartitionsRoutingMode, message_routing_mode, "message_routing_mode")
        hashing_scheme = enum_argument(HashingScheme, hashing_scheme, "hashing_scheme")
        access_mode = enum_argument(ProducerAccessMode, access_mode, "access_mode")
        topic = full_name(topic)
        sch = as_schema(schema)
        conf = ProducerConf(
            producer_name=producer_name, initial_sequence_id=initial_sequence_id,
            send_timeout_millis=send_timeout_millis, compression_type=int(compression_type),
            max_pending_messages=max_pending_messages, block_if_queue_full=block_if_queue_full,
            batching_enabled=batching_enabled, batching_max_messages=batching_max_messages,
            batching_max_allowed_size_in_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            batching_type=int(batching_type), chunking_enabled=chunking_enabled, properties=dict(properties or {}),
            access_mode=int(access_mode), schema_info=sch.schema_info(),
            initial_subscription_name=initial_subscription_name,
            txn_enabled=self._enable_transaction,
        )
        kind = KeyedTopicProducer if batching_enabled \
            and batching_type == BatchingType.KeyBased else TopicProducer
        n = await self._partitions(topic)
        if n:
            if max_pending_messages_across_partitions > 0:
                share = max(1, max_pending_messages_across_partitions // n)
                if max_pending_messages <= 0 or share < max_pending_messages:
                    conf = dataclasses.replace(conf, max_pending_messages=share)
            parts = [kind(self, partition_name(topic, i), i, conf) for i in range(n)]
            router: Router | None = Router(
                n, message_routing_mode if message_router is None
                else PartitionsRoutingMode.CustomPartition,
                hashing_scheme, batching_enabled, batching_max_messages, message_router)
        else:
            parts = [kind(self, topic, -1, conf)]
            router = None
        results = await asyncio.gather(*(p.start() for p in parts), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(*(p.close() for p in parts), return_exceptions=True)
            raise errors[0]
        producer = Producer(topic, parts, router, sch, block_if_queue_full)
        self._handles.add(producer)
        return producer

    # --------------------------------------------------------------- consumer
    async def subscribe(
        self, topic: str | list[str] | re.Pattern[str], subscription_name: str,
        consumer_type: ConsumerType = ConsumerType.Exclusive, schema: Any = None,
        receiver_queue_size: int = 1000, consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        negative_ack_redelivery_delay_ms: int = 60000, is_read_compacted: bool = False,
        properties: dict[str, str] | None = None, pattern_auto_discovery_period: float = 60,
        initial_position: InitialPosition = InitialPosition.Latest,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10, start_message_id_inclusive: bool = False,
        batch_receive_policy: ConsumerBatchReceivePolicy | None = None,
        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        ack_group_time_ms: int = 100, batch_index_ack_enabled: bool = False,
        message_listener: Any = None,
        **_ignored: Any,
    ) -> Consumer:
        """Subscribe to a topic, a list of topics or a regex pattern (``re.compile``).

        ``message_listener(consumer, message)`` (a function or coroutine function) makes the
        consumer push every message to it instead of waiting for ``receive`` calls.
        """
        self._check_open()
        consumer_type = enum_argument(ConsumerType, consumer_type, "consumer_type")
        initial_position = enum_argument(InitialPosition, initial_position, "initial_position")
        regex_subscription_mode = enum_argument(
            RegexSubscriptionMode, regex_subscription_mode, "regex_subscription_mode")
        conf = ConsumerConf(
            subscription_name=subscription_name, consumer_type=consumer_type,
            receiver_queue_size=receiver_queue_size, consumer_name=consumer_name,
            unacked_messages_timeout_ms=unacked_messages_timeout_ms,
            negative_ack_redelivery_delay_ms=negative_ack_redelivery_delay_ms,
            is_read_compacted=is_read_compacted, properties=dict(properties or {}),
            initial_position=initial_position,
            replicate_subscription_state_enabled=replicate_subscription_state_enabled,
            max_pending_chunked_message=max_pending_chunked_message,
            start_message_id_inclusive=start_message_id_inclusive,
            batch_receive_policy=batch_receive_policy, dead_letter_policy=dead_letter_policy,
            ack_group_time_ms=ack_group_time_ms,
            batch_index_ack_enabled=batch_index_ack_enabled,
            pattern_auto_discovery_period=pattern_auto_discovery_period,
        )
        sch = as_schema(schema)
        if isinstance(topic, re.Pattern):
            pattern_src = topic.pattern
            full_pattern = pattern_src if "://" in pattern_src else full_name(pattern_src)
            pattern = re.compile(full_pattern)
            ns = namespace_of(full_pattern)
            mode = _REGEX_MODES[regex_subscription_mode]
            consumer = Consumer(self, full_pattern, conf, sch)
            topics = await self._lookup.topics_of_namespace(ns, mode)
            await consumer._add_topics([(t, -1) for t in topics if pattern.match(t)])
            consumer._start_discovery(pattern, ns, mode)
        else:
            names = [full_name(t) for t in ([topic] if isinstance(topic, str) else topic)]
            consumer = Consumer(self, names[0] if len(names) == 1 else ",".join(names),
                                conf, sch)
            await consumer._add_topics(await self._expand(names))
        self._handles.add(consumer)
        if message_listener is not None:
            consumer._start_listener(message_listener, consumer)
        return consumer

    async def _expand(self, topics: list[str]) -> list[tuple[str, int]]:
        counts = await asyncio.gather(*(self._partitions(t) for t in topics))
        out: list[tuple[str, int]] = []
        for t, n in zip(topics, counts, strict=True):
            if n:
                out.extend((partition_name(t, i), i) for i in range(n))
            else:
                out.append((t, -1))
        return out

    # ----------------------------------------------------------------- reader
    async def create_reader(
        self, topic: str, start_message_id: MessageId, schema: Any = None,
        receiver_queue_size: int = 1000, reader_name: str | None = None,
        subscription_role_prefix: str | None = None, is_read_compacted: bool = False,
        start_message_id_inclusive: bool = False, reader_listener: Any = None,
        deliver_entries: bool = False, **_ignored: Any,
    ) -> Reader:
        """A reader positioned at ``start_message_id`` (or ``MessageId.earliest/latest``).
        With ``deliver_entries`` it hands out whole entries (``Reader.read_entries``, see
        ``Entry``) instead of messages."""
        self._check_open()
        topic = full_name(topic)
        prefix = subscription_role_prefix or "reader"
        conf = ConsumerConf(
            subscription_name=f"{prefix}-{uuid.uuid4().hex[:10]}",
            consumer_type=ConsumerType.Exclusive, receiver_queue_size=receiver_queue_size,
            consumer_name=reader_name, is_read_compacted=is_read_compacted,
            initial_position=InitialPosition.Earliest
            if start_message_id == MessageId.earliest else InitialPosition.Latest,
            start_message_id_inclusive=start_message_id_inclusive, durable=False,
            deliver_entries=deliver_entries,
        )
        consumer = Consumer(self, topic, conf, as_schema(schema))
        await consumer._add_topics(await self._expand([topic]), start=start_message_id)
        self._handles.add(consumer)
        reader = Reader(consumer, start_message_id, start_message_id_inclusive)
        if reader_listener is not None:
            consumer._start_listener(reader_listener, reader)
        return reader

    # --------------------------------------------------------------- metadata
    async def get_topics_of_namespace(
        self, namespace: str,
        mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
    ) -> list[str]:
        """The topics of ``namespace`` (``tenant/namespace``): persistent ones by default;
        partitioned topics are listed as their partitions."""
        self._check_open()
        mode = enum_argument(RegexSubscriptionMode, mode, "mode")
        return await self._lookup.topics_of_namespace(namespace, _REGEX_MODES[mode])

    async def get_schema(self, topic: str) -> TopicSchema | None:
        """The latest schema stored for ``topic`` (None when it has none)."""
        self._check_open()
        schema = await self._lookup.get_schema(full_name(topic))
        if schema is None:
            return None
        return TopicSchema(
            type=pb.Schema.Type.Name(schema.type), definition=bytes(schema.schema_data),
            properties={kv.key: kv.value for kv in cast("list[pb.KeyValue]", schema.properties)}, name=schema.name,
        )

    # ----------------------------------------------------------- transactions
    def _transactions(self) -> Coordinators:
        self._check_open()
        if self._coordinators is None:
            raise NotAllowed(pb.NotAllowedError, "transactions are not enabled on this client: "
                             "create it with Client(..., enable_transaction=True)")
        return self._coordinators

    async def new_transaction(self, timeout_ms: int = 60_000) -> Transaction:
        """Open a transaction on the next coordinator (round-robin); it is aborted by the
        coordinator unless committed within ``timeout_ms``."""
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms must be positive, not {timeout_ms}")
        return await self._transactions().new_transaction(timeout_ms)

    def transaction(self, most_bits: int, least_bits: int) -> Transaction:
        """A handle to the existing transaction ``(most_bits, least_bits)`` (made by
        another client or process): its ``commit``/``abort`` go to its coordinator."""
        return Transaction(self._transactions(), most_bits, least_bits)

    # ------------------------------------------------------------------ close
    async def close(self, flush: bool = True) -> None:
        """Close every producer, consumer and reader, then the connections; ``flush=False``
        drops producers' unsent messages instead of sending them first."""
        if self._closed:
            return
        self._closed = True
        handles = list(self._handles)
        self._handles.clear()
        await asyncio.gather(
            *(h.close(flush) if isinstance(h, Producer) else h.close() for h in handles),
            return_exceptions=True)
        await self._lookup.close()
        self._pool.close()

    async def shutdown(self) -> None:
        await self.close()
