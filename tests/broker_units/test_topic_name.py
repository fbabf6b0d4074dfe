"""Tests for magnetar.broker.topic_name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.topic_name import TopicName, namespace_of


@pytest.mark.parametrize(
    ("given_name", "full"),
    [
        ("my-topic", "persistent://public/default/my-topic"),
        ("tenant/ns/topic", "persistent://tenant/ns/topic"),
        ("persistent://t/n/x", "persistent://t/n/x"),
        ("non-persistent://t/n/x", "non-persistent://t/n/x"),
        ("PERSISTENT://t/n/x", "persistent://t/n/x"),
        ("Non-Persistent://t/n/x", "non-persistent://t/n/x"),
        ("persistent://t/c/n/x", "persistent://t/c/n/x"),
        ("topic with space", "persistent://public/default/topic with space"),
    ],
)
def test_normalisation(given_name: str, full: str) -> None:
    assert str(TopicName.parse(given_name)) == full


def test_short_name_properties() -> None:
    t = TopicName.parse("my-topic")
    assert t.domain == "persistent"
    assert t.tenant == "public"
    assert t.namespace == "public/default"
    assert t.namespace_portion == "default"
    assert t.local_name == "my-topic"
    assert t.partition_index == -1
    assert not t.is_partition
    assert t.partitioned_base == "persistent://public/default/my-topic"
    assert t.is_persistent
    assert t.is_v2
    assert t.cluster is None


def test_non_persistent() -> None:
    t = TopicName.parse("non-persistent://acme/app/events")
    assert not t.is_persistent
    assert t.domain == "non-persistent"
    assert t.namespace == "acme/app"
    assert namespace_of("non-persistent://acme/app/events") == "acme/app"


def test_legacy_cluster_form() -> None:
    t = TopicName.parse("persistent://prop/us-west/ns/t")
    assert t.cluster == "us-west"
    assert t.namespace == "prop/us-west/ns"
    assert not t.is_v2
    assert t.local_name == "t"


def test_partitions() -> None:
    t = TopicName.parse("persistent://t/n/orders-partition-3")
    assert t.partition_index == 3
    assert t.is_partition
    assert t.partitioned_base == "persistent://t/n/orders"
    assert t.base == TopicName.parse("persistent://t/n/orders")
    assert t.schema_name == "t/n/orders"
    base = TopicName.parse("t/n/orders")
    p = base.partition(7)
    assert str(p) == "persistent://t/n/orders-partition-7"
    assert p.partition_index == 7
    # -1 and already-partitioned names give back the same name, as in Pulsar
    assert base.partition(-1) is base
    assert t.partition(5) is t
    with pytest.raises(ValueError):
        base.partition(-2)


@pytest.mark.parametrize(
    "local",
    ["t-partition-01", "t-partition--1", "t-partition-x", "t-partition-", "t-partition-+1",
     "t-partition-99999999999", "t-partition-1 "],
)
def test_not_a_partition(local: str) -> None:
    t = TopicName.parse(f"persistent://a/b/{local}")
    assert t.partition_index == -1
    assert t.partitioned_base == f"persistent://a/b/{local}"


def test_last_partition_suffix_wins() -> None:
    t = TopicName.parse("a/b/x-partition-1-partition-2")
    assert t.partition_index == 2
    assert t.partitioned_base == "persistent://a/b/x-partition-1"


def test_partition_zero_and_max() -> None:
    assert TopicName.parse("a/b/t-partition-0").partition_index == 0
    assert TopicName.parse("a/b/t-partition-2147483647").partition_index == 2147483647
    assert TopicName.parse("a/b/t-partition-2147483648").partition_index == -1


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("", "empty topic local name"),
        ("a/b", "Invalid short topic name"),
        ("a/b/c/d", "Invalid short topic name"),
        ("bogus://t/n/x", "unknown domain"),
        ("persistent://t/n", "expected"),
        ("persistent://t/n/", "empty topic local name"),
        ("persistent:///n/x", "empty tenant"),
        ("persistent://t//x", "empty namespace"),
        ("persistent://te nant/n/x", "tenant 'te nant'"),
        ("persistent://t/n$s/x", "namespace 'n$s'"),
        ("persistent://t/ünï/x", "namespace"),
        ("persistent://t//n/x", "empty cluster"),
    ],
)
def test_invalid_names(bad: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        TopicName.parse(bad)
    assert fragment in str(info.value)
    assert not TopicName.is_valid(bad)


def test_non_str_rejected() -> None:
    with pytest.raises(TypeError):
        TopicName.parse(b"x")  # type: ignore[arg-type]


def test_equality_and_hash() -> None:
    a = TopicName.parse("x")
    b = TopicName.parse("persistent://public/default/x")
    assert a == b
    assert hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert repr(a) == "TopicName('persistent://public/default/x')"


def test_schema_name_shared_across_domains() -> None:
    assert (
        TopicName.parse("non-persistent://t/n/x-partition-2").schema_name
        == TopicName.parse("t/n/x").schema_name
        == "t/n/x"
    )


# "." and ".." alone are refused (not usable as metadata path segments)
_ENTITY = st.text(alphabet="abcXYZ019_-=:.", min_size=1, max_size=12).filter(
    lambda s: s not in (".", ".."))
_LOCAL = st.text(
    alphabet=st.characters(blacklist_characters="/", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


@given(
    domain=st.sampled_from(["persistent", "non-persistent"]),
    tenant=_ENTITY,
    ns=_ENTITY,
    local=_LOCAL,
)
def test_round_trip(domain: str, tenant: str, ns: str, local: str) -> None:
    full = f"{domain}://{tenant}/{ns}/{local}"
    t = TopicName.parse(full)
    assert str(t) == full
    assert TopicName.parse(str(t)) == t
    assert t.namespace == f"{tenant}/{ns}"
    assert t.local_name == local


@given(local=_LOCAL.filter(lambda s: "-partition-" not in s), idx=st.integers(0, 10_000))
def test_partition_round_trip(local: str, idx: int) -> None:
    base = TopicName.parse(f"persistent://t/n/{local}")
    part = base.partition(idx)
    assert part.partition_index == idx
    assert part.partitioned_base == str(base)
    assert part.base == base
