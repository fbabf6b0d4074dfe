"""The marker codec (`magnetar.protocol.markers`): what it writes is what protobuf itself
writes for Pulsar's marker messages (a schema built here from their field numbers and
types), it reads what protobuf writes, and bad input raises MarkerError only."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import pb
from magnetar.protocol.fastpath import txnid_fields
from magnetar.protocol.frames import build_payload_part, parse_payload_part
from magnetar.protocol.markers import (
    MARKER_PRODUCER,
    REPLICATED_SUBSCRIPTION_SNAPSHOT,
    REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST,
    REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE,
    REPLICATED_SUBSCRIPTION_UPDATE,
    TXN_ABORT,
    TXN_COMMIT,
    ClusterPosition,
    MarkerError,
    Snapshot,
    SnapshotRequest,
    SnapshotResponse,
    Update,
    decode_marker,
    encode_marker,
    marker_part,
    txn_marker_part,
)

_F = descriptor_pb2.FieldDescriptorProto


def _schema() -> dict[str, Any]:
    """Message classes for the four markers, from their wire schema."""
    fdp = descriptor_pb2.FileDescriptorProto(name="markers_test.proto", package="t", syntax="proto2")

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name

    req, opt, rep = _F.LABEL_REQUIRED, _F.LABEL_OPTIONAL, _F.LABEL_REPEATED
    message("Mid", ("ledger_id", 1, _F.TYPE_UINT64, req, ""), ("entry_id", 2, _F.TYPE_UINT64, req, ""))
    message("Cmid", ("cluster", 1, _F.TYPE_STRING, req, ""), ("message_id", 2, _F.TYPE_MESSAGE, req, ".t.Mid"))
    message("Request", ("snapshot_id", 1, _F.TYPE_STRING, req, ""),
            ("source_cluster", 2, _F.TYPE_STRING, opt, ""))
    message("Response", ("snapshot_id", 1, _F.TYPE_STRING, req, ""),
            ("cluster", 2, _F.TYPE_MESSAGE, opt, ".t.Cmid"))
    message("Snapshot", ("snapshot_id", 1, _F.TYPE_STRING, req, ""),
            ("local_message_id", 2, _F.TYPE_MESSAGE, opt, ".t.Mid"),
            ("clusters", 3, _F.TYPE_MESSAGE, rep, ".t.Cmid"))
    message("Update", ("subscription_name", 1, _F.TYPE_STRING, req, ""),
            ("clusters", 2, _F.TYPE_MESSAGE, rep, ".t.Cmid"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"t.{name}"))
            for name in ("Request", "Response", "Snapshot", "Update")}


SCHEMA = _schema()

names = st.text(min_size=1, max_size=20)
ids = st.integers(min_value=0, max_value=2**63)
clusters = st.builds(ClusterPosition, names, ids, ids)


def _cmid(msg: Any, c: ClusterPosition) -> None:
    msg.cluster = c.cluster
    msg.message_id.ledger_id = c.ledger_id
    msg.message_id.entry_id = c.entry_id


def _reference(marker: Any) -> bytes:
    if isinstance(marker, SnapshotRequest):
        return bytes(SCHEMA["Request"](snapshot_id=marker.snapshot_id,
                                       source_cluster=marker.source_cluster).SerializeToString())
    if isinstance(marker, SnapshotResponse):
        msg = SCHEMA["Response"](snapshot_id=marker.snapshot_id)
        _cmid(msg.cluster, marker.cluster)
        return bytes(msg.SerializeToString())
    if isinstance(marker, Snapshot):
        msg = SCHEMA["Snapshot"](snapshot_id=marker.snapshot_id)
        msg.local_message_id.ledger_id, msg.local_message_id.entry_id = marker.local
        for c in marker.clusters:
            _cmid(msg.clusters.add(), c)
        return bytes(msg.SerializeToString())
    msg = SCHEMA["Update"](subscription_name=marker.subscription)
    for c in marker.clusters:
        _cmid(msg.clusters.add(), c)
    return bytes(msg.SerializeToString())


markers = st.one_of(
    st.builds(SnapshotRequest, names, names),
    st.builds(SnapshotResponse, names, clusters),
    st.builds(Snapshot, names, st.tuples(ids, ids), st.lists(clusters, max_size=3).map(tuple)),
    st.builds(Update, names, st.lists(clusters, max_size=3).map(tuple)),
)


@given(markers)
def test_encodes_as_protobuf_and_reads_it_back(marker: Any) -> None:
    marker_type, body = encode_marker(marker)
    assert body == _reference(marker)
    assert decode_marker(marker_type, body) == marker
    assert decode_marker(marker_type, _reference(marker)) == marker


def test_marker_types_are_pulsars() -> None:
    assert (REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE,
            REPLICATED_SUBSCRIPTION_SNAPSHOT, REPLICATED_SUBSCRIPTION_UPDATE) == (10, 11, 12, 13)
    assert encode_marker(SnapshotRequest("x", "A"))[0] == 10
    assert encode_marker(Update("s", ()))[0] == 13
    assert decode_marker(20, b"\x08\x01") is None  # a marker type this broker does not handle


def test_marker_part_metadata() -> None:
    part = marker_part(SnapshotResponse("id", ClusterPosition("B", 3, 4)), replicate_to="A", now_ms=7)
    metadata, payload = parse_payload_part(part)  # checksummed
    assert metadata.marker_type == REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
    assert metadata.producer_name == "pulsar.marker" and metadata.sequence_id == 0
    assert metadata.publish_time == 7 and list(metadata.replicate_to) == ["A"]
    assert decode_marker(metadata.marker_type, payload) == SnapshotResponse("id", ClusterPosition("B", 3, 4))
    plain, _ = parse_payload_part(marker_part(Update("s", ())))
    assert list(plain.replicate_to) == []  # to every cluster


@pytest.mark.parametrize("data", [
    b"", b"\x0a", b"\x0a\x05ab", b"\x0a\x01\xff", b"\x0b", b"\x0a\x01a\x12\x03\x0a\x01",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
])
def test_bad_input_raises_marker_error(data: bytes) -> None:
    for marker_type in (10, 11, 12, 13):
        with contextlib.suppress(MarkerError):
            decode_marker(marker_type, data)


@given(st.binary(max_size=64), st.sampled_from([10, 11, 12, 13]))
def test_garbage_raises_only_marker_error(data: bytes, marker_type: int) -> None:
    with contextlib.suppress(MarkerError):
        decode_marker(marker_type, data)


def test_required_fields() -> None:
    with pytest.raises(MarkerError):
        decode_marker(10, b"")  # no snapshot id
    with pytest.raises(MarkerError):
        decode_marker(11, _reference(SnapshotRequest("id", "A")))  # a response without a cluster
    with pytest.raises(MarkerError):
        decode_marker(12, b"\x0a\x02id")  # a snapshot without its local message id


_U64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


@given(st.sampled_from([TXN_COMMIT, TXN_ABORT]), _U64, _U64,
       st.integers(min_value=0, max_value=(1 << 63) - 1), st.booleans())
def test_txn_marker_part_is_what_protobuf_builds(marker_type: int, most: int, least: int,
                                                 now_ms: int, with_fields: bool) -> None:
    """The commit/abort marker put together from its serialized fields is, byte for byte,
    the payload part built from its ``MessageMetadata`` (with the transaction id's fields
    given or not)."""
    metadata = pb.MessageMetadata(
        producer_name=MARKER_PRODUCER, sequence_id=0, publish_time=now_ms,
        marker_type=marker_type, txnid_most_bits=most, txnid_least_bits=least)
    fields = txnid_fields(most, least) if with_fields else None
    part = txn_marker_part(marker_type, most, least, now_ms, fields=fields)
    assert part == build_payload_part(metadata, b"")
    read, body = parse_payload_part(part)  # (its CRC checked)
    assert body == b"" and read.marker_type == marker_type
    assert (read.txnid_most_bits, read.txnid_least_bits) == (most, least)
