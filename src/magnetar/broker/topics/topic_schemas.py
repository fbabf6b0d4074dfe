"""Topic schemas as producers and consumers meet them: which strategy applies, what is
checked, what is stored, and how a version travels on the wire.

`TopicSchemas` sits between the connection handlers and `SchemaRegistry`
(schema_registry.py, the stored versions) / schema_compat.py (the pure checks). A
producer's schema goes through `get_or_create` (stored if new and compatible); a
consumer's through `check_consumer` (Pulsar's ``addSchemaIfIdleOrCheckCompatible``); the
strategy comes from `strategy`: the namespace policy's ``schema_compatibility_strategy``
when set, else ``schemaCompatibilityStrategy``. `has_schema` says whether a client declares
a schema to check at all.

Off the event loop: a Producer or Subscribe first asks `producer_work` / `consumer_work`
what must be read or stored before it can be answered (the topic's versions, a new
version); the connection awaits that in a task, then handles the command again, now with
everything in memory, so the version is stored before ProducerSuccess (or the consumer's
Success) goes out. `get_schema_async` / `get_or_create_async` serve GetSchema and
GetOrCreateSchema the same way.
"""

from __future__ import annotations

import struct
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.errors import BrokerError
from magnetar.broker.schema.registry import SchemaRecord
from magnetar.broker.topic_name import TopicName
from magnetar.broker.topics.topic import PersistentTopic, Topic
from magnetar.protocol import pb

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

_VERSION = struct.Struct(">q")


class TopicSchemas:
    """The schema rules of the broker's topics, over ``service.schemas``."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def get_schema(self, topic: str, version: bytes | None) -> tuple[pb.Schema, bytes] | None:
        """A stored schema of ``topic`` (the latest when ``version`` is empty) and its
        wire version, for GetSchema; None if there is none."""
        base = self.service.check_topic_name(topic).schema_name
        number = _VERSION.unpack(version)[0] if version and len(version) == 8 else None
        record = self.service.schemas.get(base, number)
        if record is None:
            return None
        schema = pb.Schema(
            name=record.name, schema_data=record.data, type=cast("pb.Schema.Type", record.type),
        )
        # added one by one: the stub's ``Schema.KeyValue`` (a Type value) hides the message
        # class, which makes a ``properties=`` list of pb.KeyValue a type error
        for k, v in record.properties.items():
            schema.properties.add(key=k, value=v)
        return schema, _VERSION.pack(record.version or 0)

    async def get_schema_async(self, topic: str, version: bytes | None) -> tuple[pb.Schema, bytes] | None:
        """`get_schema`, with the topic's versions read off the loop when not in memory."""
        await self.service.schemas.load_async(self.service.check_topic_name(topic).schema_name)
        return self.get_schema(topic, version)

    def strategy(self, topic: str | TopicName) -> str:
        """The schema compatibility strategy of the topic's namespace: its policy when one
        is set (``schema_compatibility_strategy``), else ``schemaCompatibilityStrategy``."""
        service = self.service
        name = topic if isinstance(topic, TopicName) else service.check_topic_name(topic)
        policies = service.policies.get(name.namespace)
        value = getattr(policies, "schema_compatibility_strategy", None)
        return str(value) if value else service.config.schemaCompatibilityStrategy

    def check_consumer(self, topic: Topic, schema: pb.Schema) -> None:
        """The schema a consumer brings, as Pulsar's ``addSchemaIfIdleOrCheckCompatible``:
        on a topic that has a schema, or has producers, consumers or data, the consumer's
        schema is checked with the namespace's strategy (PIP-44: it must read the latest
        version, or every version for the ``BACKWARD``/``FULL`` transitive strategies) and
        not stored; a topic in use without a schema refuses it, as in Pulsar. On an idle
        topic without a schema it is stored like a producer's (unless auto-update is off)."""
        schemas = self.service.schemas
        base = topic.topic_name.schema_name
        if in_use(topic) or schemas.get(base) is not None:
            try:
                schemas.check_consumer(base, record_of(schema), self.strategy(topic.topic_name))
            except ValueError as exc:
                raise BrokerError(pb.IncompatibleSchema, str(exc)) from exc
            return
        self.get_or_create(topic.name, schema)

    def get_or_create(self, topic: str, schema: pb.Schema) -> bytes:
        """Version of a producer's schema, stored if new and compatible with the namespace's
        strategy (IncompatibleSchema otherwise)."""
        name = self.service.check_topic_name(topic)
        try:
            version = self.service.schemas.get_or_create(
                name.schema_name, record_of(schema), self.strategy(name)
            )
        except ValueError as exc:
            raise BrokerError(pb.IncompatibleSchema, str(exc)) from exc
        return _VERSION.pack(version)

    async def get_or_create_async(self, topic: str, schema: pb.Schema) -> bytes:
        """`get_or_create`, with the store calls off the loop; stored when this returns."""
        name = self.service.check_topic_name(topic)
        try:
            version = await self.service.schemas.get_or_create_async(
                name.schema_name, record_of(schema), self.strategy(name)
            )
        except ValueError as exc:
            raise BrokerError(pb.IncompatibleSchema, str(exc)) from exc
        return _VERSION.pack(version)

    def producer_work(self, req: pb.CommandProducer) -> Coroutine[Any, Any, Any] | None:
        """What a Producer needs done off the loop before `TopicAttacher.create_producer`
        can answer it without I/O (None: nothing): reading the topic's versions, or
        storing its new schema."""
        schemas = self.service.schemas
        base = self.service.check_topic_name(req.topic).schema_name
        if has_schema(req):
            if schemas.stored_version(base, record_of(req.schema)) is not None:
                return None
            return self.get_or_create_async(req.topic, req.schema)
        if self.service.config.isSchemaValidationEnforced and not schemas.cached(base):
            return schemas.load_async(base)
        return None

    def consumer_work(self, topic: Topic, req: pb.CommandSubscribe) -> Coroutine[Any, Any, Any] | None:
        """The same for a Subscribe on ``topic`` (see `check_consumer`): reading the
        topic's versions, or storing the consumer's schema on an idle topic without one."""
        if not has_schema(req):
            return None
        schemas = self.service.schemas
        base = topic.topic_name.schema_name
        if not schemas.cached(base):
            return schemas.load_async(base)
        if (schemas.allow_auto_update and not in_use(topic) and schemas.get(base) is None):
            return self.get_or_create_async(topic.name, req.schema)
        return None


def in_use(topic: Topic) -> bool:
    """Whether a topic has producers, consumers (other than AUTO_CONSUME ones) or data:
    a consumer's schema is then checked against the topic's, never stored."""
    return (
        bool(topic.producers)
        or any(not c.auto_consume_schema
               for sub in topic.subscriptions.values() for c in sub.consumers)
        or (isinstance(topic, PersistentTopic) and topic.ledger.size_bytes() > 0)
    )


def has_schema(req: pb.CommandProducer | pb.CommandSubscribe) -> bool:
    """Whether a producer or consumer declares a schema to check. Type ``None`` (0) stands
    for bytes (Pulsar's Java and C++ clients omit the field then); an ``AutoConsume``
    client adapts to the topic's schema (AUTO_PRODUCE producers send the topic's own schema
    or none). Neither is checked or stored, as in Pulsar."""
    if not req.HasField("schema"):
        return False
    return req.schema.type not in (0, pb.Schema.AutoConsume)


def record_of(schema: pb.Schema) -> SchemaRecord:
    """The registry's record of a wire schema (no version yet)."""
    return SchemaRecord(
        name=schema.name, type=schema.type, data=bytes(schema.schema_data),
        properties={kv.key: kv.value for kv in cast("list[pb.KeyValue]", schema.properties)},
    )
