"""The cluster's metadata records in Pulsar's JSON shapes, and placing free bundles."""

from __future__ import annotations

from magnetar.broker.cluster.bundles import BundleRange
from magnetar.broker.cluster.placement import least_loaded
from magnetar.broker.cluster.records import (
    BrokerData,
    BundleStats,
    LeaderData,
    ListenerUrls,
    OwnerData,
    broker_path,
    owner_path,
    parse_owner_path,
)


def test_paths_are_pulsars() -> None:
    b = BundleRange.parse("0x40000000_0x80000000")
    assert broker_path("10.0.0.5:8080") == "/loadbalance/brokers/10.0.0.5:8080"
    assert owner_path("public/default", b) == "/namespace/public/default/0x40000000_0x80000000"
    assert parse_owner_path(owner_path("public/default", b)) == ("public/default", b)
    for other in ("/namespace/public/default", "/loadbalance/leader", "/namespace/x/0x1"):
        assert parse_owner_path(other) is None


def test_owner_data_round_trips_pulsars_fields() -> None:
    owner = OwnerData("pulsar://a:6650", "", "http://a:8080", "",
                      {"external": ListenerUrls("pulsar://a.example.com:6650")}, disabled=True)
    data = owner.to_json()
    assert data["nativeUrl"] == "pulsar://a:6650" and data["httpUrl"] == "http://a:8080"
    assert data["disabled"] is True
    assert data["advertisedListeners"] == {
        "external": {"brokerServiceUrl": "pulsar://a.example.com:6650"}}
    assert OwnerData.from_json(data) == owner
    assert owner.urls_for("external").service_url == "pulsar://a.example.com:6650"
    assert owner.urls_for(None).service_url == "pulsar://a:6650"
    # records from a newer writer: unknown fields are ignored
    assert OwnerData.from_json({**data, "somethingNew": 1}) == owner


def test_broker_data_is_a_local_broker_data() -> None:
    b = BrokerData("pulsar://b:6650", "", "http://b:8080", "", cpu_usage=50.0, cpu_limit=200.0,
                   msg_rate_in=10.5, num_bundles=3, num_topics=7, bundles=("public/default/x",),
                   last_update=123)
    data = b.to_json()
    assert data["pulsarServiceUrl"] == "pulsar://b:6650"
    assert data["webServiceUrl"] == "http://b:8080"
    assert data["cpu"] == {"usage": 50.0, "limit": 200.0}
    assert (data["numBundles"], data["numTopics"], data["msgRateIn"]) == (3, 7, 10.5)
    assert BrokerData.from_json(data) == b
    assert b.cpu_percent == 25.0
    assert b.owner_data().service_url == "pulsar://b:6650"
    assert LeaderData.from_json(LeaderData("b:8080", "http://b:8080").to_json()).broker_id == "b:8080"


def test_least_loaded_spreads_bundles_placed_in_a_row() -> None:
    assert least_loaded({}) is None
    brokers = {i: BrokerData(f"pulsar://{i}:6650") for i in ("a:8080", "b:8080")}
    pending: dict[str, int] = {}
    placed = []
    for _ in range(4):
        choice = least_loaded(brokers, pending)
        assert choice is not None
        pending[choice] = pending.get(choice, 0) + 1
        placed.append(choice)
    assert placed[0] != placed[1] and placed[:2] == placed[2:]  # alternating
    # ties go by a hash of the bundle with the broker id: the same answer at every broker,
    # different brokers for different bundles
    firsts = {least_loaded(brokers, None, 85.0, f"public/default/b{i}") for i in range(16)}
    assert firsts == {"a:8080", "b:8080"}
    assert all(least_loaded(brokers, None, 85.0, f"public/default/b{i}")
               == least_loaded(dict(reversed(brokers.items())), None, 85.0,
                               f"public/default/b{i}") for i in range(16))
    few = {"a:8080": BrokerData("pulsar://a:6650", num_bundles=5),
           "b:8080": BrokerData("pulsar://b:6650", num_bundles=1, cpu_usage=50.0)}
    assert least_loaded(few) == "b:8080"  # idle brokers: the one with fewer bundles


def test_least_loaded_weighs_message_rates_and_avoids_overloaded_brokers() -> None:
    busy = BrokerData("pulsar://a:6650", msg_rate_in=900.0, msg_rate_out=900.0, num_bundles=1,
                      bundles=("p/d/0x00000000_0x80000000",))
    idle = BrokerData("pulsar://b:6650", msg_rate_in=10.0, num_bundles=3,
                      bundles=("p/d/0x80000000_0xc0000000", "q/d/x", "r/d/y"))
    assert least_loaded({"a:8080": busy, "b:8080": idle}) == "b:8080"  # rate beats count
    # a bundle just placed on b counts as the average rate per bundle (1810 / 4) there
    assert least_loaded({"a:8080": busy, "b:8080": idle}, {"b:8080": 4}) == "a:8080"
    # b's memory is over the threshold: the busy broker still gets the bundle
    full = BrokerData("pulsar://b:6650", memory_usage=900.0, memory_limit=1000.0)
    assert least_loaded({"a:8080": busy, "b:8080": full}) == "a:8080"
    assert least_loaded({"a:8080": busy, "b:8080": full}, overload_threshold=95) == "b:8080"
    # everyone overloaded: the rest decides
    hot = BrokerData("pulsar://a:6650", cpu_usage=99.0, msg_rate_in=5.0)
    assert least_loaded({"a:8080": hot, "b:8080": full}) == "b:8080"


def test_load_report_carries_resources_and_per_bundle_stats() -> None:
    stats = {"p/d/0x00000000_0x80000000": BundleStats(10.0, 20.0, 1000.0, 2000.0, 1, 2, 3)}
    b = BrokerData("pulsar://b:6650", memory_usage=512.0, memory_limit=2048.0,
                   bandwidth_in_usage=10.0, bandwidth_in_limit=100.0,
                   bandwidth_out_usage=40.0, bandwidth_out_limit=100.0, cpu_usage=30.0,
                   bundle_stats=stats, bundles=tuple(stats))
    data = b.to_json()
    assert data["memory"] == {"usage": 512.0, "limit": 2048.0}
    assert data["bandwidthOut"] == {"usage": 40.0, "limit": 100.0}
    assert data["lastStats"]["p/d/0x00000000_0x80000000"] == {
        "msgRateIn": 10.0, "msgRateOut": 20.0, "msgThroughputIn": 1000.0,
        "msgThroughputOut": 2000.0, "producerCount": 1, "consumerCount": 2, "topics": 3,
        "cacheSize": 0}
    assert BrokerData.from_json(data) == b
    # the load is the most used resource: bandwidth out at 40 % beats CPU at 30 %
    assert b.usages == {"cpu": 30.0, "memory": 25.0, "bandwidthIn": 10.0, "bandwidthOut": 40.0}
    assert b.max_resource_usage == 40.0
    # a resource without a known limit does not count
    assert BrokerData("x", bandwidth_in_usage=1e9).max_resource_usage == 0.0
