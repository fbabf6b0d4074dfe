"""A transaction's id in an entry's metadata: `txn_of` reads it, `with_txnid` makes sure a
transactional Send's payload part carries it as stored (clients put it there; one that set
it only on the Send has its metadata rewritten), so that readers and a restart's replay
know the entry's transaction from the entry alone."""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from magnetar.protocol import pb
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.fastpath import metadata_ends_with
from magnetar.protocol.frames import build_payload_part, parse_payload_part

#: a transaction's id: (most significant bits: its coordinator, least: its sequence)
TxnId = tuple[int, int]

_U32 = struct.Struct(">I")
_METADATA_FROM = pb.MessageMetadata.FromString


def with_txnid(payload: bytes | memoryview, txn: TxnId,
               fields: bytes | None = None) -> bytes | memoryview | None:
    """``payload`` (a Send's payload part) as stored for transaction ``txn``: unchanged
    when its metadata carries the id already (the common case: clients set it there;
    seen without a parse when the metadata ends with ``fields``, ``txn``'s serialized
    fields, `fastpath.metadata_ends_with`; else the metadata alone parsed), else rebuilt
    with it (the client set it only on the Send); None when the part cannot be read."""
    if fields is not None and metadata_ends_with(payload, fields):
        return payload
    try:  # magic, CRC32C, metadata size, metadata: the metadata alone
        size = _U32.unpack_from(payload, 6)[0]
        if payload[0] == 0x0E and payload[1] == 0x01 and 10 + size <= len(payload):
            metadata = _METADATA_FROM(payload[10:10 + size])  # type: ignore[arg-type]  # upb takes any buffer
            most = txn[0]
            if (metadata.txnid_most_bits == most and metadata.txnid_least_bits == txn[1]
                    and (most != 0 or metadata.HasField("txnid_most_bits"))):
                return payload  # (a nonzero value is present: only 0 needs the test)
    except (DecodeError, ValueError, TypeError, struct.error):
        pass  # read again below, which tells
    try:
        metadata, body = parse_payload_part(payload, verify=False)
    except (ProtocolError, ValueError):
        return None
    if (metadata.HasField("txnid_most_bits") and metadata.txnid_most_bits == txn[0]
            and metadata.txnid_least_bits == txn[1]):
        return payload
    metadata.txnid_most_bits, metadata.txnid_least_bits = txn
    return build_payload_part(metadata, body)


def txn_of(metadata: pb.MessageMetadata | None) -> TxnId | None:
    """The transaction id an entry's metadata carries, if any."""
    if metadata is None or not metadata.HasField("txnid_most_bits"):
        return None
    return metadata.txnid_most_bits, metadata.txnid_least_bits


__all__ = ["TxnId", "txn_of", "with_txnid"]
