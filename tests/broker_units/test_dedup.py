"""Tests for magnetar.broker.topics.dedup (Pulsar's pushed/persisted dedup rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.topics.dedup import DUPLICATE, NEW, UNKNOWN, MessageDeduplication


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_first_and_increasing_are_new() -> None:
    d = MessageDeduplication()
    assert d.last_sequence_id("p") == -1
    assert d.check("p", 0) == NEW
    assert d.last_sequence_id("p") == 0
    assert d.check("p", 1) == NEW
    assert d.check("p", 5) == NEW  # gaps are fine
    assert d.last_sequence_id("p") == 5
    assert d.check("other", 0) == NEW  # producers are independent


def test_in_flight_repeat_is_unknown_then_duplicate_once_persisted() -> None:
    d = MessageDeduplication()
    assert d.check("p", 0) == NEW
    d.on_persisted("p", 0)
    assert d.check("p", 1) == NEW
    # seq 1 is accepted but not yet durable: a resend cannot be judged yet
    assert d.check("p", 1) == UNKNOWN
    assert d.check("p", 0) == DUPLICATE
    d.on_persisted("p", 1)
    assert d.check("p", 1) == DUPLICATE
    assert d.last_sequence_id("p") == 1
    assert d.last_persisted_sequence_id("p") == 1


def test_duplicate_or_unknown_does_not_move_state() -> None:
    d = MessageDeduplication()
    d.check("p", 10)
    d.on_persisted("p", 10)
    assert d.check("p", 3) == DUPLICATE
    assert d.last_sequence_id("p") == 10
    assert d.check("p", 11) == NEW


def test_batch_uses_lowest_for_check_and_highest_for_state() -> None:
    d = MessageDeduplication()
    assert d.check("p", 0, highest_sequence_id=9) == NEW  # batch of 0..9
    assert d.last_sequence_id("p") == 9
    assert d.check("p", 5, highest_sequence_id=12) == UNKNOWN  # overlaps in-flight batch
    d.on_persisted("p", 0, highest_sequence_id=9)
    assert d.last_persisted_sequence_id("p") == 9
    assert d.check("p", 5, highest_sequence_id=12) == DUPLICATE
    assert d.check("p", 10, highest_sequence_id=12) == NEW
    assert d.last_sequence_id("p") == 12
    # a highest below the sequence id (e.g. the protobuf default 0) is ignored
    assert d.check("q", 4, highest_sequence_id=0) == NEW
    assert d.last_sequence_id("q") == 4


def test_chunks_only_last_counts() -> None:
    d = MessageDeduplication()
    assert d.check("p", 7, chunk_id=0, num_chunks=3) == NEW
    assert d.check("p", 7, chunk_id=1, num_chunks=3) == NEW
    assert d.last_sequence_id("p") == -1
    d.on_persisted("p", 7, chunk_id=0, num_chunks=3)
    assert d.last_persisted_sequence_id("p") == -1
    assert d.check("p", 7, chunk_id=2, num_chunks=3) == NEW
    assert d.last_sequence_id("p") == 7
    d.on_persisted("p", 7, chunk_id=2, num_chunks=3)
    assert d.last_persisted_sequence_id("p") == 7
    assert d.check("p", 7, chunk_id=2, num_chunks=3) == DUPLICATE
    # earlier chunks of a resent message are let through, only the last one is judged
    assert d.check("p", 7, chunk_id=0, num_chunks=3) == NEW


def test_reset_pushed_after_failed_write() -> None:
    d = MessageDeduplication()
    d.check("p", 1)
    d.on_persisted("p", 1)
    assert d.check("p", 2) == NEW  # this write then fails
    assert d.check("p", 2) == UNKNOWN
    d.reset_pushed()
    assert d.last_sequence_id("p") == 1
    assert d.check("p", 2) == NEW


def test_persist_callback_every_entry_by_default() -> None:
    calls: list[tuple[str, int]] = []
    d = MessageDeduplication(lambda name, seq: calls.append((name, seq)))
    d.check("a", 1)
    d.on_persisted("a", 1)
    d.check("b", 0, 4)
    d.on_persisted("b", 0, 4)
    assert calls == [("a", 1), ("b", 4)]
    # nothing new persisted -> nothing flushed
    d.flush()
    assert calls == [("a", 1), ("b", 4)]


def test_persist_callback_interval() -> None:
    calls: list[tuple[str, int]] = []
    d = MessageDeduplication(lambda n, s: calls.append((n, s)), snapshot_interval=3)
    for seq in range(5):
        d.check("a", seq)
        d.on_persisted("a", seq)
        if seq == 1:
            assert calls == []
    assert calls == [("a", 2)]
    d.flush()
    assert calls == [("a", 2), ("a", 4)]
    with pytest.raises(ValueError):
        MessageDeduplication(snapshot_interval=0)


def test_snapshot_restore_round_trip() -> None:
    d = MessageDeduplication(max_producers=2)
    for name, seq in (("c", 3), ("a", 1), ("b", 2)):
        d.check(name, seq)
        d.on_persisted(name, seq)
    d.check("a", 2)  # pushed only: not in the snapshot
    assert d.snapshot() == {"a": 1, "b": 2}
    d2 = MessageDeduplication()
    d2.restore({"a": 1, "b": 2, "c": 3})
    assert d2.last_sequence_id("c") == 3
    assert d2.check("a", 1) == DUPLICATE
    assert d2.check("a", 2) == NEW
    assert d2.snapshot() == {"a": 1, "b": 2, "c": 3}


def test_replay_after_restore() -> None:
    d = MessageDeduplication()
    d.restore({"p": 5})
    d.replay("p", 6)
    d.replay("p", 7, highest_sequence_id=9)
    d.replay("q", 0)
    assert d.last_sequence_id("p") == 9
    assert d.last_persisted_sequence_id("p") == 9
    assert d.check("p", 8) == DUPLICATE
    assert d.check("q", 0) == DUPLICATE
    assert d.check("p", 10) == NEW


def test_purge_inactive_producers() -> None:
    clock = FakeClock(0)
    d = MessageDeduplication(clock=clock)
    d.restore({"old": 4})  # restored producers count as inactive
    d.check("live", 1)
    d.on_persisted("live", 1)
    d.producer_added("live")
    d.check("gone", 1)
    d.on_persisted("gone", 1)
    d.producer_added("gone")
    clock.now = 3000
    d.producer_removed("gone")
    clock.now = 5000
    assert d.purge_inactive(timeout_ms=3000) == ["old"]
    assert d.last_sequence_id("old") == -1
    clock.now = 10_000
    assert d.purge_inactive(timeout_ms=3000) == ["gone"]
    assert d.snapshot() == {"live": 1}
    # a restored producer that comes back is no longer purged
    d.restore({"back": 2})
    d.producer_added("back")
    clock.now = 10**9
    assert d.purge_inactive(timeout_ms=1) == []


@given(
    st.lists(
        st.tuples(st.sampled_from(["send", "persist_oldest", "fail"]), st.integers(0, 30)),
        max_size=80,
    )
)
def test_model_never_writes_twice(ops: list[tuple[str, int]]) -> None:
    """Against a model: an accepted sequence id is never accepted again while it is
    pending or durable, and durable ones are reported as duplicates."""
    d = MessageDeduplication()
    pending: list[int] = []
    durable: set[int] = set()
    for op, seq in ops:
        if op == "send":
            status = d.check("p", seq)
            if status == NEW:
                assert seq not in durable and seq not in pending
                assert seq > max([*pending, *durable], default=-1)
                pending.append(seq)
            elif status == DUPLICATE:
                assert seq <= max(durable)
            else:
                assert pending and seq <= max(pending)
        elif op == "persist_oldest" and pending:
            s = pending.pop(0)
            d.on_persisted("p", s)
            durable.add(s)
        elif op == "fail" and pending:
            pending.clear()  # the topic drains and resets
            d.reset_pushed()
