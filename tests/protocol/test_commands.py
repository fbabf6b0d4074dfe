"""The command() / message_id() helpers."""

from __future__ import annotations

import pytest

from magnetar.protocol import command, command_body, message_id, pb
from magnetar.protocol.commands import FIELD_BY_TYPE, PAYLOAD_TYPES, type_name
from magnetar.protocol.version import PROTOCOL_VERSION


def test_by_name_and_by_enum() -> None:
    pong = command("PONG")
    assert pong.type == pb.BaseCommand.PONG and pong.HasField("pong")
    receipt = command(
        pb.BaseCommand.SEND_RECEIPT, producer_id=1, sequence_id=2, message_id=message_id(3, 4)
    )
    assert receipt.send_receipt.message_id.entryId == 4
    assert command("send_receipt", producer_id=1, sequence_id=2) == command(
        pb.BaseCommand.SEND_RECEIPT, producer_id=1, sequence_id=2
    )
    assert command("LOOKUP_RESPONSE", request_id=1).lookupTopicResponse.request_id == 1


def test_nested_dicts() -> None:
    cmd = command("SUBSCRIBE", topic="t", subscription="s", subType=pb.CommandSubscribe.Shared,
                  consumer_id=1, request_id=2, start_message_id={"ledgerId": 1, "entryId": 2})
    assert cmd.subscribe.start_message_id.ledgerId == 1
    assert cmd.IsInitialized()


def test_unknown_types_and_fields() -> None:
    with pytest.raises(ValueError):
        command("NOPE")
    with pytest.raises(ValueError):
        command(1)
    with pytest.raises(ValueError):
        command("PING", bogus=1)


def test_command_body_and_names() -> None:
    cmd = command("FLOW", consumer_id=3, messagePermits=10)
    assert command_body(cmd) is not None and command_body(cmd).messagePermits == 10
    assert type_name(pb.BaseCommand.FLOW) == "FLOW"
    assert type_name(999) == "UNKNOWN(999)"
    assert len(FIELD_BY_TYPE) == len(pb.BaseCommand.Type.values())
    assert {pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE} == PAYLOAD_TYPES


def test_message_id() -> None:
    mid = message_id(1, 2)
    assert (mid.ledgerId, mid.entryId, mid.partition, mid.batch_index) == (1, 2, -1, -1)
    assert not mid.HasField("partition") and not mid.HasField("batch_index")
    mid = message_id(1, 2, partition=3, batch_index=4, ack_set=[5, -1])
    assert (mid.partition, mid.batch_index, list(mid.ack_set)) == (3, 4, [5, -1])


def test_protocol_version() -> None:
    assert PROTOCOL_VERSION == 21
