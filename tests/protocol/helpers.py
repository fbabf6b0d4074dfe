"""Shared builders for the protocol tests."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from magnetar.protocol import pb

_SCALARS = {
    FieldDescriptor.TYPE_STRING: "x",
    FieldDescriptor.TYPE_BYTES: b"x",
    FieldDescriptor.TYPE_BOOL: True,
    FieldDescriptor.TYPE_DOUBLE: 1.5,
}


def fill_required(msg: Message) -> Message:
    """Set every required field of ``msg`` (recursively) to a simple valid value."""
    for field in msg.DESCRIPTOR.fields:
        if not field.is_required:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            fill_required(getattr(msg, field.name))
        elif field.type == FieldDescriptor.TYPE_ENUM:
            setattr(msg, field.name, field.enum_type.values[-1].number)
        else:
            setattr(msg, field.name, _SCALARS.get(field.type, 7))
    return msg


def minimal_command(type_value: int) -> pb.BaseCommand:
    """A valid BaseCommand of the given type with only required fields set."""
    from magnetar.protocol.commands import FIELD_BY_TYPE

    cmd = pb.BaseCommand(type=type_value)
    sub = getattr(cmd, FIELD_BY_TYPE[type_value])
    sub.SetInParent()
    fill_required(sub)
    assert cmd.IsInitialized()
    return cmd


def metadata(**fields: object) -> pb.MessageMetadata:
    base = {"producer_name": "p", "sequence_id": 0, "publish_time": 1}
    base.update(fields)
    return pb.MessageMetadata(**base)
