"""A transactional send's payload part is stored carrying its transaction's id in its
metadata: kept as sent when it does (seen from the bytes when the id ends the metadata,
else by a parse), rebuilt when the client set the id only on the Send or set another."""

from __future__ import annotations

import pytest

from magnetar.broker.topics.txn_metadata import with_txnid
from magnetar.protocol import pb
from magnetar.protocol.fastpath import txnid_fields
from magnetar.protocol.frames import build_payload_part, parse_payload_part

TXN = (3, 123_456)


def part(**fields: object) -> bytes:
    return build_payload_part(pb.MessageMetadata(producer_name="p", sequence_id=5,
                                                 publish_time=1, **fields), b"body")


@pytest.mark.parametrize("fields", [None, txnid_fields(*TXN)])
def test_a_part_carrying_the_id_is_kept(fields: bytes | None) -> None:
    sent = part(txnid_most_bits=TXN[0], txnid_least_bits=TXN[1])
    assert with_txnid(sent, TXN, fields) is sent
    view = memoryview(sent)
    assert with_txnid(view, TXN, fields) is view
    later = part(txnid_most_bits=TXN[0], txnid_least_bits=TXN[1], highest_sequence_id=9)
    assert with_txnid(later, TXN, fields) is later  # (parsed: the id is not last)


@pytest.mark.parametrize("fields", [None, txnid_fields(*TXN)])
@pytest.mark.parametrize("sent", [part(), part(txnid_most_bits=3, txnid_least_bits=1)])
def test_a_part_without_the_id_is_rebuilt_with_it(fields: bytes | None, sent: bytes) -> None:
    stored = with_txnid(sent, TXN, fields)
    assert stored is not None and stored is not sent
    metadata, body = parse_payload_part(stored)  # its checksum is right
    assert (metadata.txnid_most_bits, metadata.txnid_least_bits) == TXN
    assert metadata.sequence_id == 5 and bytes(body) == b"body"


def test_an_unreadable_part_is_none() -> None:
    assert with_txnid(b"\x0e\x01\0\0\0\0\0\0\0\x05\xff\xff", TXN, txnid_fields(*TXN)) is None
