"""The pure parts of geo-replication: which entries go to a remote, what is sent, and the
deduplication identity of a replicator's send."""

from __future__ import annotations

from magnetar.broker.entries import with_entry_metadata
from magnetar.broker.replication.replicator import replicated_part, sequence_id_of
from magnetar.broker.topics.dedup import origin_of
from magnetar.protocol import pb
from magnetar.protocol.frames import build_payload_part, parse_payload_part
from magnetar.storage import Position


def _part(**fields: object) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1234, **fields)  # type: ignore[arg-type]
    return build_payload_part(meta, b"compressed-or-batched-payload")


def test_an_entry_is_sent_with_replicated_from_and_its_payload_untouched() -> None:
    stored = with_entry_metadata(_part(num_messages_in_batch=5, partition_key="k"), 41)
    part, count, published = replicated_part(stored, "A", "B")
    assert part is not None and count == 5 and published == 1234
    meta, payload = parse_payload_part(part)  # checksum verified
    assert meta.replicated_from == "A"
    assert (meta.producer_name, meta.sequence_id, meta.partition_key) == ("p", 7, "k")
    assert payload == b"compressed-or-batched-payload"


def test_replicated_entries_and_replicate_to_are_honoured() -> None:
    assert replicated_part(_part(replicated_from="C"), "A", "B")[0] is None
    assert replicated_part(_part(replicate_to=["C"]), "A", "B")[0] is None
    assert replicated_part(_part(replicate_to=["B", "C"]), "A", "B")[0] is not None


def test_sequence_ids_follow_positions() -> None:
    ids = [sequence_id_of(Position(lid, e)) for lid, e in [(1, 0), (1, 1), (1, 70000), (2, 0)]]
    assert ids == sorted(set(ids))


def test_a_replicator_send_is_deduplicated_by_its_origin() -> None:
    default = ("pulsar.repl.A", 99, 99)
    assert origin_of(_part(), default) == ("p", 7, 7)
    assert origin_of(_part(num_messages_in_batch=3), default) == ("p", 7, 9)
    assert origin_of(_part(highest_sequence_id=20, num_messages_in_batch=3), default) == ("p", 7, 20)
    assert origin_of(b"not a payload part", default) == default
