"""The cluster's metadata records in Pulsar's JSON shapes, and placing free bundles."""

from __future__ import annotations

from magnetar.broker.cluster.bundles import BundleRange
from magnetar.broker.cluster.placement import least_loaded
from magnetar.broker.cluster.records import (
    BrokerData,
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
    assert placed == ["a:8080", "b:8080", "a:8080", "b:8080"]
    busy = {"a:8080": BrokerData("pulsar://a:6650", num_bundles=5),
            "b:8080": BrokerData("pulsar://b:6650", num_bundles=1, cpu_usage=90.0)}
    assert least_loaded(busy) == "b:8080"
