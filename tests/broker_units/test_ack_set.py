"""Tests for magnetar.broker.subscriptions.ack_set (wire layout and set-bit = unacknowledged)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.subscriptions import ack_set as A

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def test_full_layout_matches_java_bitset_to_long_array() -> None:
    assert A.full(0) == []
    assert A.full(1) == [1]
    assert A.full(10) == [0b11_1111_1111]
    assert A.full(63) == [INT64_MAX]
    assert A.full(64) == [-1]  # all 64 bits set is -1 as a signed int64
    assert A.full(65) == [-1, 1]
    assert A.full(128) == [-1, -1]


def test_what_a_client_sends_for_an_individual_ack() -> None:
    # client: set(0, 10); clear(3) -> toLongArray
    assert A.clear_index(A.full(10), 3) == [0b11_1111_0111]
    # client: cumulative through index 4 -> set(0, 10); clear(0, 5)
    assert A.clear_through(A.full(10), 4) == [0b11_1110_0000]


def test_signed_conversions() -> None:
    assert A.to_signed64(2**64 - 1) == -1
    assert A.to_signed64(2**63) == INT64_MIN
    assert A.to_signed64(5) == 5
    assert A.to_unsigned64(-1) == 2**64 - 1
    assert A.to_unsigned64(INT64_MIN) == 2**63
    # unsigned input words are accepted and normalised to signed
    assert A.from_words([2**64 - 1]) == [-1]


def test_trailing_zero_words_dropped() -> None:
    assert A.from_words([5, 0, 0]) == [5]
    assert A.from_words([0, 0]) == []
    assert A.and_words([-1, 1], [-1, 0]) == [-1]


def test_from_words_masks_bits_beyond_batch() -> None:
    # some clients set bit n too (n + 1 bits for a batch of n)
    assert A.from_words(A.full(11), 10) == A.full(10)
    assert A.is_all_acked([1 << 10], 10)
    assert not A.is_all_acked([1 << 10])
    assert A.count_unacked(A.full(11), 10) == 10
    assert A.unacked_indexes([0b1000_0000_0001], 10) == [0]


def test_and_is_intersection_of_unacked() -> None:
    cursor = A.clear_index(A.full(8), 1)
    incoming = A.clear_index(A.full(8), 5)
    merged = A.and_words(cursor, incoming)
    assert A.unacked_indexes(merged) == [0, 2, 3, 4, 6, 7]
    assert A.count_unacked(cursor) - A.count_unacked(merged) == 1  # acked by this ack


def test_all_acked_lifecycle() -> None:
    words = A.full(3)
    assert not A.is_all_acked(words)
    for i in range(3):
        assert A.is_unacked(words, i)
        words = A.clear_index(words, i)
        assert not A.is_unacked(words, i)
    assert words == []
    assert A.is_all_acked(words)
    assert A.count_unacked(words) == 0
    assert A.unacked_indexes(words) == []


def test_high_bit_in_second_word() -> None:
    words = A.from_int((1 << 127) | 1)
    assert words == [1, INT64_MIN]
    assert A.unacked_indexes(words) == [0, 127]
    assert A.is_unacked(words, 127)
    assert A.to_int(words) == (1 << 127) | 1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        A.full(-1)
    with pytest.raises(ValueError):
        A.clear_index([1], -1)
    with pytest.raises(ValueError):
        A.is_unacked([1], -1)
    with pytest.raises(ValueError):
        A.from_int(-1)
    assert A.clear_through([7], -1) == [7]


_INDEX_SETS = st.sets(st.integers(0, 200), max_size=60)


def _words_of(indexes: set[int]) -> list[int]:
    return A.from_int(sum(1 << i for i in indexes))


@given(a=_INDEX_SETS, b=_INDEX_SETS, n=st.integers(0, 220))
def test_model(a: set[int], b: set[int], n: int) -> None:
    wa, wb = _words_of(a), _words_of(b)
    for w in wa + wb:
        assert INT64_MIN <= w <= INT64_MAX
    if wa:
        assert wa[-1] != 0
    assert A.unacked_indexes(wa) == sorted(a)
    assert A.unacked_indexes(wa, n) == sorted(i for i in a if i < n)
    assert A.count_unacked(wa, n) == len([i for i in a if i < n])
    assert A.unacked_indexes(A.and_words(wa, wb)) == sorted(a & b)
    assert A.is_all_acked(wa, n) == (not any(i < n for i in a))
    assert A.from_words(wa) == wa
    assert A.from_words([A.to_unsigned64(w) for w in wa]) == wa
    assert A.unacked_indexes(A.clear_through(wa, 50)) == sorted(i for i in a if i > 50)
    assert A.unacked_indexes(A.full(n)) == list(range(n))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_signed_round_trip(word: int) -> None:
    assert A.to_signed64(A.to_unsigned64(word)) == word
