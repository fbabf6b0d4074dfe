"""Schemas: string, JSON and Avro, wire-compatible with the official client's classes."""

from __future__ import annotations

import pulsar
import pytest
from pulsar.schema import AvroSchema as OfficialAvro
from pulsar.schema import Integer, Record, String
from pulsar.schema import JsonSchema as OfficialJson
from pulsar.schema import StringSchema as OfficialString

from magnetar.client import AvroSchema, Client, InitialPosition, JsonSchema, StringSchema
from tests.client.conftest import QUIET, BrokerProcess, needs_magnetar, run


class User(Record):
    name = String()
    age = Integer()


@pytest.mark.parametrize(("ours", "theirs"), [
    (lambda: StringSchema(), lambda: OfficialString()),
    (lambda: JsonSchema(User), lambda: OfficialJson(User)),
    (lambda: AvroSchema(User), lambda: OfficialAvro(User)),
], ids=["string", "json", "avro"])
def test_schema_interop(broker: BrokerProcess, topic: str, ours: object,
                        theirs: object) -> None:
    is_string = "String" in type(ours()).__name__  # type: ignore[operator]
    if "Avro" in type(ours()).__name__:  # type: ignore[operator]
        needs_magnetar(broker, "the official AvroSchema asks for the writer schema with "
                       "GetSchema, which is never answered (a minute of timeouts)")
    value_theirs = "from-them" if is_string else User(name="them", age=41)
    value_ours = "from-us" if is_string else User(name="us", age=7)
    official = pulsar.Client(broker.url, logger=QUIET)
    try:
        their_consumer = official.subscribe(topic, "official", schema=theirs())  # type: ignore[operator]
        their_producer = official.create_producer(topic, schema=theirs())  # type: ignore[operator]
        their_producer.send(value_theirs)

        async def main() -> None:
            async with Client(broker.url) as client:
                consumer = await client.subscribe(topic, "ours", schema=ours(),  # type: ignore[operator]
                                                  initial_position=InitialPosition.Earliest)
                producer = await client.create_producer(topic, schema=ours())  # type: ignore[operator]
                await producer.send(value_ours)
                got = [(await consumer.receive(5000)).value() for _ in range(2)]
                if is_string:
                    assert got == ["from-them", "from-us"]
                else:
                    assert [(u.name, u.age) for u in got] == [("them", 41), ("us", 7)]

        run(main)
        got = [their_consumer.receive(5000).value() for _ in range(2)]
        if is_string:
            assert got == ["from-them", "from-us"]
        else:
            assert [(u.name, u.age) for u in got] == [("them", 41), ("us", 7)]
    finally:
        official.close()


def test_official_schema_objects_accepted(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with Client(broker.url) as client:
            consumer = await client.subscribe(topic, "s", schema=OfficialJson(User))
            producer = await client.create_producer(topic, schema=OfficialJson(User))
            await producer.send(User(name="x", age=1))
            user = (await consumer.receive(5000)).value()
            assert (user.name, user.age) == ("x", 1)

    run(main)


def test_dict_records_with_definition(broker: BrokerProcess, topic: str) -> None:
    definition = {"type": "record", "name": "Point", "fields": [
        {"name": "x", "type": "int"}, {"name": "y", "type": "int"}]}

    async def main() -> None:
        async with Client(broker.url) as client:
            schema = AvroSchema(dict, definition)
            consumer = await client.subscribe(topic, "s", schema=schema)
            producer = await client.create_producer(topic, schema=schema)
            await producer.send({"x": 1, "y": 2})
            assert (await consumer.receive(5000)).value() == {"x": 1, "y": 2}

    run(main)
