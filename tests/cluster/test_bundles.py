"""Namespace bundles against facts of Apache Pulsar: CRC-32 topic hashes, the default four
bundles, bundle names, lookups at the edges and the split algorithms."""

from __future__ import annotations

import pytest

from magnetar.broker.cluster.bundles import (
    FULL_UPPER,
    BundleRange,
    NamespaceBundles,
    split_points,
    topic_hash,
)


def crc32_bitwise(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320) computed bit by bit, as an
    independent check of the table-driven one the module uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_topic_hash_is_unsigned_crc32_of_the_full_name() -> None:
    assert topic_hash("123456789") == 0xCBF43926  # the CRC-32 check value
    for name in ("persistent://public/default/my-topic",
                 "persistent://public/default/orders-partition-3",
                 "non-persistent://tenant/ns/ünïcode"):
        assert topic_hash(name) == crc32_bitwise(name.encode())
    # partitions hash by their own names, so they land in different bundles
    assert topic_hash("persistent://t/ns/a-partition-0") != topic_hash("persistent://t/ns/a")


def test_default_four_bundles_have_pulsars_boundaries_and_names() -> None:
    bundles = NamespaceBundles.evenly()
    assert [r.name for r in bundles.ranges] == [
        "0x00000000_0x40000000", "0x40000000_0x80000000",
        "0x80000000_0xc0000000", "0xc0000000_0xffffffff"]
    assert bundles.to_json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4}
    assert NamespaceBundles.from_json(bundles.to_json()) == bundles
    assert NamespaceBundles.from_json({"numBundles": 1}).ranges == [
        BundleRange(0, FULL_UPPER)]
    # an uneven count: every step is 2**32 // n, the last boundary is 0xffffffff
    assert NamespaceBundles.evenly(3).boundaries == (0, 0x55555555, 0xAAAAAAAA, FULL_UPPER)


def test_find_is_lower_closed_upper_open_except_the_top() -> None:
    b = NamespaceBundles.evenly()
    assert b.find(0).name == "0x00000000_0x40000000"
    assert b.find(0x3FFFFFFF).name == "0x00000000_0x40000000"
    assert b.find(0x40000000).name == "0x40000000_0x80000000"
    assert b.find(FULL_UPPER).name == "0xc0000000_0xffffffff"
    topic = "persistent://public/default/my-topic"
    assert b.bundle_of(topic).contains(topic_hash(topic))
    with pytest.raises(ValueError):
        b.find(1 << 32)


def test_bundle_names_parse_and_reject_garbage() -> None:
    r = BundleRange.parse("0x40000000_0x80000000")
    assert (r.lower, r.upper, str(r)) == (0x40000000, 0x80000000, "0x40000000_0x80000000")
    for bad in ("0x4_", "40000000_80000000", "0x80000000_0x40000000", "0x1_0x1", "x"):
        with pytest.raises(ValueError):
            BundleRange.parse(bad)
    with pytest.raises(ValueError):
        NamespaceBundles((0, 0x10, 0x10, FULL_UPPER))
    with pytest.raises(ValueError):
        NamespaceBundles((1, FULL_UPPER))


def test_range_equally_divide_halves_as_pulsar_does() -> None:
    # Pulsar's own expectation: the full range splits at 0x7fffffff, then 0x3fffffff ...
    full = NamespaceBundles.evenly(1)
    whole = full.ranges[0]
    assert split_points("range_equally_divide", whole) == [0x7FFFFFFF]
    two = full.split(whole, [0x7FFFFFFF])
    assert [r.name for r in two.ranges] == ["0x00000000_0x7fffffff", "0x7fffffff_0xffffffff"]
    assert split_points("range_equally_divide", two.ranges[0]) == [0x3FFFFFFF]
    assert split_points("range_equally_divide", two.ranges[1]) == [0xBFFFFFFF]
    four = NamespaceBundles.evenly()
    first = four.ranges[0]
    points = split_points("range_equally_divide", first, parts=4)
    assert points == [0x10000000, 0x20000000, 0x30000000]
    after = four.split(first, points)
    assert len(after) == 7 and after.ranges[3].name == "0x30000000_0x40000000"
    # topics of the split bundle now fall in its pieces, the others are unchanged
    for i in range(200):
        topic = f"persistent://public/default/t-{i}"
        old, new = four.bundle_of(topic), after.bundle_of(topic)
        assert new == old if old != first else (first.lower <= new.lower < first.upper)


def test_topic_count_and_specified_positions() -> None:
    bundle = BundleRange(0, FULL_UPPER)
    topics = [f"persistent://t/ns/x{i}" for i in range(4)]
    hashes = sorted(topic_hash(t) for t in topics)
    (point,) = split_points("topic_count_equally_divide", bundle, topics=topics)
    assert point == hashes[1] + (hashes[2] - hashes[1]) // 2
    halves = NamespaceBundles.evenly(1).split(bundle, [point])
    assert sorted(len([t for t in topics if halves.bundle_of(t) == r])
                  for r in halves.ranges) == [2, 2]
    with pytest.raises(ValueError):
        split_points("topic_count_equally_divide", bundle, topics=topics[:1])
    assert split_points("specified_positions_divide", bundle,
                        positions=[5, 0, FULL_UPPER, 3]) == [3, 5]
    with pytest.raises(ValueError):
        split_points("specified_positions_divide", bundle, positions=[0])
    with pytest.raises(ValueError):
        split_points("no_such_algorithm", bundle)
    with pytest.raises(ValueError):
        split_points("range_equally_divide", BundleRange(4, 5))
    with pytest.raises(ValueError):
        NamespaceBundles.evenly().split(bundle, [7])  # not one of its bundles
