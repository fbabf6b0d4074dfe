"""Clusters, tenants and namespaces over HTTP, and namespaces being real for clients:
TopicNotFound outside them, their policies applied to their topics."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from tests.admin.conftest import NULL, Api


def test_cluster_and_health(api: Api) -> None:
    assert api.get("/admin/v2/clusters") == (200, ["standalone"])
    status, doc = api.get("/admin/v2/clusters/standalone")
    assert status == 200 and doc["brokerServiceUrl"].startswith("pulsar://")
    assert api.get("/admin/v2/clusters/elsewhere")[0] == 404
    assert api.get("/admin/v2/brokers/health") == (200, "ok")
    status, brokers = api.get("/admin/v2/brokers/standalone")
    assert status == 200 and len(brokers) == 1


def test_tenant_lifecycle_and_status_codes(api: Api) -> None:
    tenant = f"tn-{uuid.uuid4().hex[:8]}"
    assert "public" in api.get("/admin/v2/tenants")[1]
    assert api.get(f"/admin/v2/tenants/{tenant}")[0] == 404
    assert api.put(f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})[0] == 204
    assert api.put(f"/admin/v2/tenants/{tenant}")[0] == 409
    assert api.put(f"/admin/v2/tenants/x{tenant}", {"allowedClusters": ["nowhere"]})[0] == 412
    assert api.get(f"/admin/v2/tenants/{tenant}") == (
        200, {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    assert api.post(f"/admin/v2/tenants/{tenant}", {"adminRoles": []})[0] == 204
    assert tenant in api.get("/admin/v2/tenants")[1]
    # a tenant with a namespace cannot go
    assert api.put(f"/admin/v2/namespaces/{tenant}/ns")[0] == 204
    status, body = api.delete(f"/admin/v2/tenants/{tenant}")
    assert status == 409 and "reason" in body
    assert api.delete(f"/admin/v2/namespaces/{tenant}/ns")[0] == 204
    assert api.delete(f"/admin/v2/tenants/{tenant}")[0] == 204
    assert api.delete(f"/admin/v2/tenants/{tenant}")[0] == 404
    # bad JSON and wrong methods get Pulsar's codes and a reason
    status, body = api.call("PUT", "/admin/v2/tenants/zz", raw=b"{not json")
    assert status == 400 and "reason" in body
    assert api.call("PATCH", "/admin/v2/tenants")[0] == 405


def test_namespace_lifecycle(api: Api, client: pulsar.Client) -> None:
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert ns not in api.get("/admin/v2/namespaces/public")[1]
    assert api.put(f"/admin/v2/namespaces/{ns}")[0] == 204
    assert api.put(f"/admin/v2/namespaces/{ns}")[0] == 409
    assert api.put("/admin/v2/namespaces/no-such-tenant/ns")[0] == 404
    assert ns in api.get("/admin/v2/namespaces/public")[1]
    client.create_producer(f"persistent://{ns}/t").close()
    assert api.get(f"/admin/v2/namespaces/{ns}/topics")[1] == [f"persistent://{ns}/t"]
    assert api.delete(f"/admin/v2/namespaces/{ns}")[0] == 409  # not empty
    assert api.delete(f"/admin/v2/namespaces/{ns}?force=true")[0] == 204
    assert api.get(f"/admin/v2/namespaces/{ns}")[0] == 404
    assert api.get("/admin/v2/namespaces/nobody")[0] == 404


def test_clients_get_topic_not_found_outside_namespaces(api: Api, client: pulsar.Client) -> None:
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("persistent://public/missing-ns/t")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe("persistent://no-tenant/ns/t", "s")
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("non-persistent://public/missing-ns/t")
    assert api.get("/lookup/v2/topic/persistent/public/missing-ns/t")[0] == 404
    # once the namespace exists, the same topic works
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    api.ok("PUT", f"/admin/v2/namespaces/{ns}")
    producer = client.create_producer(f"persistent://{ns}/t")
    producer.send(b"x")
    producer.close()


def test_policies_round_trip(api: Api) -> None:
    ns = f"public/pol-{uuid.uuid4().hex[:8]}"
    base = f"/admin/v2/namespaces/{ns}"
    api.ok("PUT", base, {"message_ttl_in_seconds": 30})
    assert api.get(base + "/messageTTL") == (200, 30)
    api.ok("POST", base + "/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    assert api.get(base + "/retention") == (200, {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    api.ok("POST", base + "/messageTTL", 120)
    api.ok("POST", base + "/deduplication", True)
    api.ok("POST", base + "/backlogQuota?backlogQuotaType=destination_storage",
           {"limitSize": 1 << 20, "policy": "producer_exception"})
    api.ok("POST", base + "/backlogQuota?backlogQuotaType=message_age", {"limitTime": 3600})
    api.ok("POST", base + "/autoTopicCreation",
           {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3})
    api.ok("PUT", base + "/schemaCompatibilityStrategy", "FULL")
    api.ok("POST", base + "/maxProducersPerTopic", 2)
    api.ok("POST", base + "/maxConsumersPerTopic", 5)
    doc = api.ok("GET", base)
    assert doc["message_ttl_in_seconds"] == 120
    assert doc["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert doc["deduplicationEnabled"] is True
    assert doc["backlog_quota_map"]["destination_storage"] == {
        "limitSize": 1 << 20, "limitTime": -1, "policy": "producer_exception"}
    assert doc["backlog_quota_map"]["message_age"]["limitTime"] == 3600
    assert doc["autoTopicCreationOverride"] == {
        "allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}
    assert doc["schema_compatibility_strategy"] == "FULL"
    assert (doc["max_producers_per_topic"], doc["max_consumers_per_topic"]) == (2, 5)
    for path in ("/messageTTL", "/deduplication", "/maxProducersPerTopic",
                 "/maxConsumersPerTopic", "/retention", "/autoTopicCreation"):
        api.ok("DELETE", base + path)
        assert api.get(base + path) == NULL, path  # Pulsar's null: the broker's applies
    assert api.post(base + "/backlogQuota", {"limitSize": 1, "policy": "drop_it"})[0] == 412
    assert api.post(base + "/messageTTL", "soon")[0] == 400
    assert api.put(base + "/schemaCompatibilityStrategy", "SOMETIMES")[0] == 412
    assert api.get("/admin/v2/namespaces/public/nothing-here/retention")[0] == 404


def test_policies_apply_to_topics(api: Api, client: pulsar.Client) -> None:
    ns = f"public/apply-{uuid.uuid4().hex[:8]}"
    base = f"/admin/v2/namespaces/{ns}"
    api.ok("PUT", base)
    # max producers per topic
    api.ok("POST", base + "/maxProducersPerTopic", 1)
    topic = f"persistent://{ns}/limited"
    first = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    # max consumers per topic
    api.ok("POST", base + "/maxConsumersPerTopic", 1)
    consumer = client.subscribe(topic, "a")
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "b")
    consumer.close()
    # auto topic creation off: new topics are refused, created ones work
    api.ok("POST", base + "/autoTopicCreation", {"allowAutoTopicCreation": False})
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{ns}/never-created")
    api.ok("PUT", f"/admin/v2/persistent/{ns}/created")
    client.create_producer(f"persistent://{ns}/created").close()
    # auto creation as partitioned topics with 3 partitions
    api.ok("POST", base + "/autoTopicCreation",
           {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3})
    producer = client.create_producer(f"persistent://{ns}/auto-partitioned")
    producer.close()
    assert api.get(f"/admin/v2/persistent/{ns}/auto-partitioned/partitions") == (200, {"partitions": 3})
    # deduplication: the topic reloads with it
    api.ok("POST", base + "/deduplication", True)
    stats = api.ok("GET", f"/admin/v2/persistent/{ns}/created/stats")
    assert stats["deduplicationStatus"] == "Enabled"
    producer = client.create_producer(f"persistent://{ns}/created", producer_name="p1")
    producer.send(b"a", sequence_id=5)
    producer.send(b"dup", sequence_id=5)  # dropped by deduplication
    producer.close()
    stats = api.ok("GET", f"/admin/v2/persistent/{ns}/created/internalStats")
    assert stats["numberOfEntries"] == 1


# ------------------------------------------------------------- Pulsar's bodies, as Pulsar takes them


def test_clusters_put_creates_post_updates(api: Api) -> None:
    """``PUT clusters/{name}`` registers a cluster (409 when it exists: our own included),
    ``POST`` updates it (404 when unknown); bodies are ClusterData, checked with 400s."""
    name = f"c-{uuid.uuid4().hex[:6]}"
    data = {"serviceUrl": "http://other:8080", "brokerServiceUrl": "pulsar://other:6650",
            "brokerServiceUrlTls": "pulsar+ssl://other:6651", "someFutureField": 1}
    assert api.put("/admin/v2/clusters/standalone", data)[0] == 409
    assert api.post(f"/admin/v2/clusters/{name}", data)[0] == 404
    assert api.put(f"/admin/v2/clusters/{name}", data)[0] == 204
    assert api.put(f"/admin/v2/clusters/{name}", data)[0] == 409
    assert name in api.get("/admin/v2/clusters")[1]
    status, got = api.get(f"/admin/v2/clusters/{name}")
    assert status == 200 and got["brokerServiceUrl"] == "pulsar://other:6650"
    assert "someFutureField" not in got  # unknown fields are ignored, as Pulsar ignores them
    assert api.post(f"/admin/v2/clusters/{name}", {**data, "serviceUrl": "http://moved:8080"})[0] == 204
    assert api.get(f"/admin/v2/clusters/{name}")[1]["serviceUrl"] == "http://moved:8080"
    assert api.get(f"/admin/v2/brokers/{name}") == (200, [])  # not this broker's cluster
    for bad in ({"serviceUrl": 5}, {"brokerServiceUrl": "http://not-pulsar"}, ["a", "list"],
                {"brokerClientTlsEnabled": "yes"}):
        status, answer = api.post(f"/admin/v2/clusters/{name}", bad)
        assert status == 400 and answer["reason"], bad
    assert api.put(f"/admin/v2/clusters/{name}x")[0] == 400  # a body is required
    # a tenant may now allow it; then the cluster cannot go
    tenant = f"tc-{uuid.uuid4().hex[:6]}"
    assert api.put(f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone", name]})[0] == 204
    assert api.delete(f"/admin/v2/clusters/{name}")[0] == 409
    assert api.delete(f"/admin/v2/tenants/{tenant}")[0] == 204
    assert api.delete(f"/admin/v2/clusters/{name}")[0] == 204
    assert api.get(f"/admin/v2/clusters/{name}")[0] == 404
    assert api.delete("/admin/v2/clusters/standalone")[0] == 409


def test_tenant_bodies_are_checked(api: Api) -> None:
    tenant = f"tb-{uuid.uuid4().hex[:6]}"
    for bad in ({"adminRoles": "ops"}, {"adminRoles": [1]}, {"allowedClusters": "standalone"},
                [1, 2]):
        status, answer = api.put(f"/admin/v2/tenants/{tenant}", bad)
        assert status == 400 and answer["reason"], bad
    assert api.post(f"/admin/v2/tenants/{tenant}", {"adminRoles": []})[0] == 404
    assert api.put(f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"],
                                                   "unknownField": True})[0] == 204
    assert api.post(f"/admin/v2/tenants/{tenant}", {"adminRoles": ["ops", "dev"],
                                                    "allowedClusters": ["standalone"]})[0] == 204
    assert api.get(f"/admin/v2/tenants/{tenant}")[1]["adminRoles"] == ["ops", "dev"]
    assert api.delete(f"/admin/v2/tenants/{tenant}")[0] == 204


def test_namespace_created_with_a_policies_body(api: Api, client: pulsar.Client) -> None:
    """Every field of a Pulsar Policies body Magnetar implements is applied, as Pulsar's
    createNamespace applies it; fields at their defaults (what pulsar-admin sends) pass."""
    ns = f"public/pb-{uuid.uuid4().hex[:6]}"
    topic = f"persistent://{ns}/t"
    body = {
        "auth_policies": {"namespace_auth": {"app": ["produce", "consume"]},
                          "destination_auth": {topic: {"reader": ["consume"]}},
                          "subscription_auth_roles": {}},
        "replication_clusters": ["standalone"],
        "retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
        "message_ttl_in_seconds": 3600,
        "backlog_quota_map": {"destination_storage": {"limitSize": 1 << 30, "limitTime": -1,
                                                      "policy": "producer_exception"}},
        "deduplicationEnabled": True,
        "autoTopicCreationOverride": {"allowAutoTopicCreation": True, "topicType": "partitioned",
                                      "defaultNumPartitions": 2},
        "schema_compatibility_strategy": "FORWARD",
        "max_producers_per_topic": 3,
        "max_consumers_per_topic": 4,
        # what pulsar-admin sends for everything else: the defaults
        "bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1},
        "clusterDispatchRate": {}, "persistence": None, "encryption_required": False,
        "subscription_auth_mode": "None", "offload_threshold": -1, "deleted": False,
        "schema_auto_update_compatibility_strategy": "Full", "properties": {},
        "subscription_types_enabled": [], "latency_stats_sample_rate": {},
    }
    assert api.put(f"/admin/v2/namespaces/{ns}", body)[0] == 204
    status, doc = api.get(f"/admin/v2/namespaces/{ns}")
    assert status == 200
    assert doc["auth_policies"]["namespace_auth"] == {"app": ["consume", "produce"]}
    assert doc["auth_policies"]["destination_auth"] == {topic: {"reader": ["consume"]}}
    assert doc["replication_clusters"] == ["standalone"]
    assert doc["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert doc["message_ttl_in_seconds"] == 3600
    assert doc["backlog_quota_map"]["destination_storage"]["limitSize"] == 1 << 30
    assert doc["backlog_quota_map"]["destination_storage"]["policy"] == "producer_exception"
    assert doc["deduplicationEnabled"] is True
    assert doc["autoTopicCreationOverride"] == {"allowAutoTopicCreation": True,
                                                "topicType": "partitioned", "defaultNumPartitions": 2}
    assert doc["schema_compatibility_strategy"] == "FORWARD"
    assert (doc["max_producers_per_topic"], doc["max_consumers_per_topic"]) == (3, 4)
    assert api.get(f"/admin/v2/namespaces/{ns}/permissions")[1] == {"app": ["consume", "produce"]}
    # the auto-creation override is live: a new topic is created with 2 partitions
    client.create_producer(f"persistent://{ns}/auto").close()
    assert api.get(f"/admin/v2/persistent/{ns}/auto/partitions")[1]["partitions"] == 2
    assert api.delete(f"/admin/v2/namespaces/{ns}?force=true")[0] == 204


@pytest.mark.parametrize("body, status", [
    ({"auth_policies": {"namespace_auth": {"app": ["fly"]}}}, 400),
    ({"auth_policies": {"namespace_auth": ["app"]}}, 400),
    ({"auth_policies": {"subscription_auth_roles": {"s": ["app"]}}}, 412),
    ({"replication_clusters": "standalone"}, 400),
    ({"replication_clusters": ["nowhere"]}, 412),
    ({"retention_policies": {"retentionTimeInMinutes": "1h"}}, 400),
    ({"backlog_quota_map": {"destination_storage": {"policy": "drop_everything"}}}, 400),
    ({"backlog_quota_map": {"sideways": {}}}, 400),
    ({"deduplicationEnabled": "yes"}, 400),
    ({"schema_compatibility_strategy": "SOMETIMES"}, 400),
    ({"encryption_required": True}, 412),
    ({"persistence": {"bookkeeperEnsemble": 3}}, 412),
])
def test_namespace_policies_body_refusals(api: Api, body: dict[str, object], status: int) -> None:
    ns = f"public/pr-{uuid.uuid4().hex[:6]}"
    got, answer = api.put(f"/admin/v2/namespaces/{ns}", body)
    assert got == status and answer["reason"], answer
    assert api.get(f"/admin/v2/namespaces/{ns}")[0] == 404  # nothing was created


def test_namespace_replication_clusters(api: Api) -> None:
    ns = f"public/rc-{uuid.uuid4().hex[:6]}"
    assert api.put(f"/admin/v2/namespaces/{ns}")[0] == 204
    assert api.get(f"/admin/v2/namespaces/{ns}/replication") == (200, ["standalone"])
    status, answer = api.post(f"/admin/v2/namespaces/{ns}/replication", ["nowhere"])
    assert status == 403 and "Invalid cluster id: nowhere" in str(answer)  # as Pulsar answers
    assert api.post(f"/admin/v2/namespaces/{ns}/replication", [])[0] == 412
    assert api.post(f"/admin/v2/namespaces/{ns}/replication", "standalone")[0] == 400
    other = f"c-{uuid.uuid4().hex[:6]}"
    assert api.put(f"/admin/v2/clusters/{other}", {"serviceUrl": "http://o:8080"})[0] == 204
    assert api.post(f"/admin/v2/namespaces/{ns}/replication", [other])[0] == 403  # not allowed to public
    assert api.post(f"/admin/v2/namespaces/{ns}/replication", ["standalone"])[0] == 204
    assert api.get(f"/admin/v2/namespaces/{ns}")[1]["replication_clusters"] == ["standalone"]
    assert api.delete(f"/admin/v2/clusters/{other}")[0] == 204
    assert api.delete(f"/admin/v2/namespaces/{ns}")[0] == 204
