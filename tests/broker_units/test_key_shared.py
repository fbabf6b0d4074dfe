"""Tests for magnetar.broker.subscriptions.key_shared (selectors use plain int hashes)."""

from __future__ import annotations

import base64
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.subscriptions.key_shared import (
    DEFAULT_RANGE_SIZE,
    NONE_KEY,
    AutoSplitSelector,
    ConsumerAssignError,
    StickySelector,
    sticky_key,
)

# ----------------------------------------------------------------------------- sticky_key


def test_sticky_key_preference_order() -> None:
    assert sticky_key(b"pk", b"ok") == b"ok"
    assert sticky_key(b"pk", None) == b"pk"
    assert sticky_key("clé", None) == "clé".encode()
    assert sticky_key(None, None) == NONE_KEY == b"NONE_KEY"
    # a present-but-empty ordering key is still the key
    assert sticky_key(b"pk", b"") == b""


def test_sticky_key_base64_partition_key() -> None:
    raw = b"\x00\xffbinary"
    encoded = base64.b64encode(raw).decode()
    assert sticky_key(encoded, None, partition_key_b64_encoded=True) == raw
    assert sticky_key(encoded, None) == encoded.encode()
    assert sticky_key("not base64!", None, partition_key_b64_encoded=True) == NONE_KEY
    assert sticky_key(encoded, b"ok", partition_key_b64_encoded=True) == b"ok"


# ----------------------------------------------------------------------------- auto split


def test_default_range_size() -> None:
    assert DEFAULT_RANGE_SIZE == 65536
    assert AutoSplitSelector().range_size == 65536


@pytest.mark.parametrize("size", [0, 1, 3, 100, 65535])
def test_range_size_must_be_power_of_two(size: int) -> None:
    with pytest.raises(ValueError):
        AutoSplitSelector(size)


def test_empty_selects_nobody() -> None:
    assert AutoSplitSelector().select(123) is None


def test_split_sequence_matches_pulsar() -> None:
    s: AutoSplitSelector[str] = AutoSplitSelector()
    s.add_consumer("c1")
    assert s.ranges() == {"c1": [(0, 65536)]}
    s.add_consumer("c2")  # 0 -> 32768 (c2) -> 65536 (c1)
    assert s.ranges() == {"c2": [(0, 32768)], "c1": [(32769, 65536)]}
    s.add_consumer("c3")  # tie between two halves: the lower one is split
    assert s.ranges() == {
        "c3": [(0, 16384)],
        "c2": [(16385, 32768)],
        "c1": [(32769, 65536)],
    }
    s.add_consumer("c4")  # biggest is c1's upper half
    assert s.ranges() == {
        "c3": [(0, 16384)],
        "c2": [(16385, 32768)],
        "c4": [(32769, 49152)],
        "c1": [(49153, 65536)],
    }
    assert s.consumers == ["c3", "c2", "c4", "c1"]
    assert s.select(0) == "c3"
    assert s.select(16384) == "c3"
    assert s.select(16385) == "c2"
    assert s.select(49152) == "c4"
    assert s.select(49153) == "c1"
    assert s.select(65535) == "c1"
    assert s.select(65536 + 5) == "c3"  # reduced modulo the range size


def test_first_range_size_counts_from_zero() -> None:
    # the first range (0..b) is measured as b - 0, one slot less than it holds
    s: AutoSplitSelector[str] = AutoSplitSelector(8)
    for c in "abcd":
        s.add_consumer(c)
    # bounds: b=4, c=2, d=6, a=8 ; sizes: 2 (0..2), 2, 2, 2 -> first is split next
    s.add_consumer("e")
    assert s.ranges()["e"] == [(0, 1)]
    assert s.ranges()["c"] == [(2, 2)]


def test_remove_middle_goes_to_next_range_up() -> None:
    s: AutoSplitSelector[str] = AutoSplitSelector()
    for c in ("c1", "c2", "c3"):
        s.add_consumer(c)
    s.remove_consumer("c2")  # c2 owned 16385..32768; c1 (next up) takes it
    assert s.ranges() == {"c3": [(0, 16384)], "c1": [(16385, 65536)]}


def test_remove_top_range_goes_to_range_below() -> None:
    s: AutoSplitSelector[str] = AutoSplitSelector()
    for c in ("c1", "c2", "c3", "c4"):
        s.add_consumer(c)
    s.remove_consumer("c1")  # c1 had the top bound; c4 (just below) takes the top bound
    assert s.ranges() == {
        "c3": [(0, 16384)],
        "c2": [(16385, 32768)],
        "c4": [(32769, 65536)],
    }
    assert s.select(65535) == "c4"
    assert "c1" not in s
    assert len(s) == 3


def test_remove_last_and_unknown() -> None:
    s: AutoSplitSelector[str] = AutoSplitSelector()
    s.add_consumer("only")
    s.remove_consumer("ghost")  # no-op
    s.remove_consumer("only")
    assert s.select(1) is None
    assert s.ranges() == {}
    s.add_consumer("again")
    assert s.ranges() == {"again": [(0, 65536)]}


def test_duplicate_add_refused() -> None:
    s: AutoSplitSelector[str] = AutoSplitSelector()
    s.add_consumer("a")
    with pytest.raises(ConsumerAssignError):
        s.add_consumer("a")


def test_runs_out_of_ranges() -> None:
    s: AutoSplitSelector[int] = AutoSplitSelector(4)
    added = 0
    with pytest.raises(ConsumerAssignError, match="No more range can assigned"):
        for i in range(10):
            s.add_consumer(i)
            added += 1
    assert 2 <= added < 10
    assert isinstance(ConsumerAssignError("x"), ValueError)


def _owners(s: AutoSplitSelector[int]) -> list[int | None]:
    return [s.select(h) for h in range(s.range_size)]


@settings(max_examples=150)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 15)), max_size=40))
def test_auto_split_invariants(ops: list[tuple[bool, int]]) -> None:
    s: AutoSplitSelector[int] = AutoSplitSelector(64)
    present: set[int] = set()
    before = _owners(s)
    for add, c in ops:
        if add and c not in present:
            try:
                s.add_consumer(c)
            except ConsumerAssignError:
                continue
            present.add(c)
            after = _owners(s)
            # only the newcomer gains slots, and they come from a single former owner
            changed = [i for i in range(64) if before[i] != after[i]]
            assert changed and all(after[i] == c for i in changed)
            assert len({before[i] for i in changed}) == 1
        elif not add and c in present:
            s.remove_consumer(c)
            present.discard(c)
            after = _owners(s)
            # only the leaver's slots move
            changed = [i for i in range(64) if before[i] != after[i]]
            assert all(before[i] == c for i in changed)
            assert c not in after
        else:
            continue
        before = after
        # every slot is served when anyone is there; each consumer has one contiguous range
        assert set(before) == (present or {None})
        r = s.ranges()
        assert set(r) == present
        assert all(len(v) == 1 for v in r.values())
        spans = sorted(v[0] for v in r.values())
        if spans:
            assert spans[0][0] == 0 and spans[-1][1] == 64
            for (_, e1), (s2, _) in itertools.pairwise(spans):
                assert s2 == e1 + 1


# ----------------------------------------------------------------------------- sticky


def test_sticky_select_inclusive() -> None:
    s: StickySelector[str] = StickySelector()
    s.add_consumer("a", [(0, 99), (200, 299)])
    s.add_consumer("b", [(100, 199)])
    assert s.select(0) == "a"
    assert s.select(99) == "a"
    assert s.select(100) == "b"
    assert s.select(199) == "b"
    assert s.select(200) == "a"
    assert s.select(299) == "a"
    assert s.select(300) is None  # nobody declared it
    assert s.select(65536 + 150) == "b"
    assert s.ranges() == {"a": [(0, 99), (200, 299)], "b": [(100, 199)]}


def test_sticky_gap_between_own_ranges_is_not_served() -> None:
    s: StickySelector[str] = StickySelector()
    s.add_consumer("a", [(0, 10), (20, 30)])
    assert s.select(15) is None
    s.add_consumer("b", [(12, 18)])
    assert s.select(15) == "b"
    assert s.select(11) is None


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([], "Ranges for KeyShared policy must not be empty."),
        ([(10, 5)], "Fixed hash range start > end"),
        ([(50, 150)], "Range conflict with consumer a"),
        ([(0, 0)], "Range conflict with consumer a"),
        ([(99, 99)], "Range conflict with consumer a"),
        ([(300, 400), (90, 95)], "Range conflict with consumer a"),
        ([(150, 250)], "Range conflict with consumer c"),
        ([(0, 65535)], "Range conflict with consumer"),
    ],
)
def test_sticky_conflicts(ranges: list[tuple[int, int]], message: str) -> None:
    s: StickySelector[str] = StickySelector()
    s.add_consumer("a", [(0, 99)])
    s.add_consumer("c", [(200, 210)])
    with pytest.raises(ValueError, match=message):
        s.add_consumer("b", ranges)
    # all or nothing: nothing of b was registered
    assert "b" not in s
    assert s.select(300) is None


def test_sticky_adjacent_ok_and_remove() -> None:
    s: StickySelector[str] = StickySelector()
    s.add_consumer("a", [(0, 99)])
    s.add_consumer("b", [(100, 100)])
    assert s.select(100) == "b"
    s.remove_consumer("a")
    s.remove_consumer("ghost")
    assert s.select(5) is None
    s.add_consumer("c", [(0, 50)])  # freed range can be taken
    assert s.select(5) == "c"
    assert len(s) == 2


def test_sticky_own_overlaps_merged() -> None:
    s: StickySelector[str] = StickySelector()
    s.add_consumer("a", [(0, 100), (10, 20), (90, 150)])
    assert s.ranges() == {"a": [(0, 150)]}
    assert s.select(120) == "a"
    with pytest.raises(ConsumerAssignError):
        s.add_consumer("a", [(500, 600)])


@settings(max_examples=150)
@given(
    decls=st.lists(
        st.lists(st.tuples(st.integers(0, 127), st.integers(0, 20)), min_size=1, max_size=4),
        max_size=8,
    )
)
def test_sticky_model(decls: list[list[tuple[int, int]]]) -> None:
    s: StickySelector[int] = StickySelector(128)
    owner: dict[int, int] = {}
    for cid, decl in enumerate(decls):
        ranges = [(a, min(a + w, 127)) for a, w in decl]
        slots = {h for a, b in ranges for h in range(a, b + 1)}
        clash = slots & owner.keys()
        if clash:
            with pytest.raises(ConsumerAssignError, match="Range conflict"):
                s.add_consumer(cid, ranges)
        else:
            s.add_consumer(cid, ranges)
            owner.update(dict.fromkeys(slots, cid))
    for h in range(128):
        assert s.select(h) == owner.get(h)
