"""Helpers to build and inspect ``BaseCommand`` envelopes.

``BaseCommand`` carries a ``type`` and the one sub-message of that type; Pulsar numbers
each sub-message field with its type's value, which is how the tables below are built
(from the descriptor, so they cannot drift from the schema).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf.message import Message

from magnetar.protocol import pulsar_pb2 as pb

__all__ = [
    "FIELD_BY_TYPE",
    "PAYLOAD_TYPES",
    "command",
    "command_body",
    "message_id",
    "type_name",
]

_TYPE_ENUM = pb.BaseCommand.Type
#: BaseCommand.Type value -> name of the BaseCommand field holding that sub-message.
FIELD_BY_TYPE: dict[int, str] = {
    f.number: f.name for f in pb.BaseCommand.DESCRIPTOR.fields if f.name != "type"
}
#: Commands that are followed by a payload part on the wire.
PAYLOAD_TYPES = frozenset({pb.BaseCommand.SEND, pb.BaseCommand.MESSAGE})


def _resolve_type(kind: int | str) -> int:
    if isinstance(kind, str):
        try:
            return _TYPE_ENUM.Value(kind.upper())
        except ValueError:
            raise ValueError(f"unknown command type {kind!r}") from None
    if kind not in FIELD_BY_TYPE:
        raise ValueError(f"unknown command type {kind!r}")
    return int(kind)


def command(kind: int | str, /, **fields: Any) -> pb.BaseCommand:
    """Build a ``BaseCommand`` of the given type with its sub-message set from ``fields``.

    ``kind`` is a ``BaseCommand.Type`` value or name (``"PONG"``, ``"send_receipt"``).
    Nested messages may be given as message instances or dicts.
    """
    type_value = _resolve_type(kind)
    return pb.BaseCommand(type=type_value, **{FIELD_BY_TYPE[type_value]: fields})  # type: ignore[arg-type]


def command_body(cmd: pb.BaseCommand) -> Message:
    """The sub-message that ``cmd.type`` designates (e.g. ``cmd.send`` for SEND)."""
    body: Message = getattr(cmd, FIELD_BY_TYPE[cmd.type])
    return body


def type_name(kind: int) -> str:
    """Name of a ``BaseCommand.Type`` value, or ``"UNKNOWN(<n>)"``."""
    try:
        return _TYPE_ENUM.Name(kind)
    except ValueError:
        return f"UNKNOWN({kind})"


def message_id(
    ledger_id: int,
    entry_id: int,
    partition: int = -1,
    batch_index: int = -1,
    ack_set: Iterable[int] | None = None,
) -> pb.MessageIdData:
    """Build a ``MessageIdData``; fields equal to their wire default are left unset."""
    mid = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)
    if partition != -1:
        mid.partition = partition
    if batch_index != -1:
        mid.batch_index = batch_index
    if ack_set:
        mid.ack_set.extend(ack_set)
    return mid
