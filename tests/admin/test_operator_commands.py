"""The admin commands a Pulsar operator types first, under pulsar-admin's names (clusters,
brokers healthcheck / get-runtime-config, topics subscriptions / peek-messages /
examine-message / get-message-by-id / create-subscription, namespaces get/set-clusters),
run in-process against a real broker (real HTTP), messages produced with the official
client over real TCP; and the REST endpoints behind them."""

from __future__ import annotations

import json
import socket
import uuid

import pulsar
import pytest

from magnetar.cli.main import main
from magnetar.testing import StandaloneBroker
from tests.admin.conftest import Api

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_clusters_commands(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--admin-url", broker.web_service_url]
    name = f"c-{uuid.uuid4().hex[:6]}"
    code, out, _ = run(capsys, "admin", *url, "clusters", "list")
    assert code == 0 and out.split() == ["standalone"]
    code, out, _ = run(capsys, "admin", *url, "clusters", "get", "standalone", "-o", "json")
    assert code == 0 and json.loads(out)["brokerServiceUrl"].startswith("pulsar://")
    assert run(capsys, "admin", *url, "clusters", "create", name, "--url", "http://h1:8080",
               "--broker-url", "pulsar://h1:6650")[0] == 0
    code, _, err = run(capsys, "admin", *url, "clusters", "create", name)
    assert code == 1 and "409" in err
    code, out, _ = run(capsys, "admin", *url, "clusters", "list", "-o", "json")
    assert json.loads(out) == sorted(["standalone", name])
    assert run(capsys, "admin", *url, "clusters", "update", name, "--url", "http://h2:8080",
               "--broker-url", "pulsar://h2:6650")[0] == 0
    code, out, _ = run(capsys, "admin", *url, "clusters", "get", name)  # table: key  value
    assert code == 0
    rows = dict(line.split(None, 1) for line in out.splitlines())
    assert rows == {"serviceUrl": "http://h2:8080", "brokerServiceUrl": "pulsar://h2:6650"}
    code, _, err = run(capsys, "admin", *url, "clusters", "update", name)
    assert code == 1 and "--url" in err
    code, _, err = run(capsys, "admin", *url, "clusters", "update", name, "--url", "pulsar://x:1")
    assert code == 1 and "400" in err and "serviceUrl" in err
    code, _, err = run(capsys, "admin", *url, "clusters", "delete", "standalone")
    assert code == 1 and "409" in err
    assert run(capsys, "admin", *url, "clusters", "delete", name)[0] == 0
    code, _, err = run(capsys, "admin", *url, "clusters", "get", name)
    assert code == 1 and "404" in err


def test_clusters_with_every_broker_and_security_fields(
        broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """Multi-broker URLs and pulsar-admin's security flags stored in the record; a
    multi-host --admin-url whose first broker cannot be reached uses the next."""
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    url = ["--admin-url", f"http://127.0.0.1:{dead},{broker.web_service_url.split('://')[1]}"]
    name = f"c-{uuid.uuid4().hex[:6]}"
    assert run(capsys, "admin", *url, "clusters", "create", name,
               "--url", "http://s1:8080,s2:8080,s3:8080",
               "--broker-url", "pulsar://s1:6650,s2:6650,s3:6650",
               "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
               "--auth-parameters", "file:///etc/magnetar/repl.jwt", "--tls-enable",
               "--broker-url-secure", "pulsar+ssl://s1:6651,s2:6651,s3:6651",
               "--tls-trust-certs-filepath", "/etc/magnetar/ca.pem",
               "--tls-certs-filepath", "/etc/magnetar/client.pem",
               "--tls-key-filepath", "/etc/magnetar/client.key")[0] == 0
    code, out, _ = run(capsys, "admin", *url, "clusters", "get", name, "-o", "json")
    assert code == 0
    assert json.loads(out) == {
        "serviceUrl": "http://s1:8080,s2:8080,s3:8080",
        "brokerServiceUrl": "pulsar://s1:6650,s2:6650,s3:6650",
        "brokerServiceUrlTls": "pulsar+ssl://s1:6651,s2:6651,s3:6651",
        "authenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "authenticationParameters": "file:///etc/magnetar/repl.jwt",
        "brokerClientTlsEnabled": True,
        "brokerClientTrustCertsFilePath": "/etc/magnetar/ca.pem",
        "brokerClientCertificateFilePath": "/etc/magnetar/client.pem",
        "brokerClientKeyFilePath": "/etc/magnetar/client.key"}
    # update replaces the record with what it is given (as pulsar-admin's does)
    assert run(capsys, "admin", *url, "clusters", "update", name,
               "--broker-url", "pulsar://s1:6650,s2:6650", "--tls-enable", "false",
               "--tls-allow-insecure")[0] == 0
    code, out, _ = run(capsys, "admin", *url, "clusters", "get", name, "-o", "json")
    assert json.loads(out) == {"brokerServiceUrl": "pulsar://s1:6650,s2:6650",
                               "brokerClientTlsEnabled": False,
                               "tlsAllowInsecureConnection": True}
    with pytest.raises(SystemExit) as bad:
        run(capsys, "admin", *url, "clusters", "update", name, "--tls-enable", "maybe")
    assert bad.value.code == 2 and "true or false" in capsys.readouterr().err
    assert run(capsys, "admin", *url, "clusters", "delete", name)[0] == 0
    code, _, err = run(capsys, "admin", "--admin-url", f"http://127.0.0.1:{dead},127.0.0.1:{dead}",
                       "clusters", "list")
    assert code == 1 and "cannot reach the admin API" in err


def test_brokers_commands(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--admin-url", broker.web_service_url]
    code, out, _ = run(capsys, "admin", *url, "brokers", "healthcheck")
    assert (code, out.strip()) == (0, "ok")
    code, out, _ = run(capsys, "admin", *url, "brokers", "get-runtime-config", "-o", "json")
    config = json.loads(out)
    assert code == 0 and config["clusterName"] == "standalone"
    assert config["statsUpdateFrequencyInSecs"] == "1"  # as the fixture's broker was started
    assert all(isinstance(v, str) for v in config.values())
    code, out, _ = run(capsys, "admin", *url, "brokers", "get-runtime-config")
    assert code == 0 and any(line.split() == ["clusterName", "standalone"] for line in out.splitlines())
    code, listed, _ = run(capsys, "admin", *url, "brokers", "list", "-o", "json")
    code2, named, _ = run(capsys, "admin", *url, "brokers", "list", "standalone", "-o", "json")
    assert code == code2 == 0 and json.loads(listed) == json.loads(named) and len(json.loads(listed)) == 1


def test_runtime_config_masks_credentials() -> None:
    from magnetar.admin.tenants import runtime_config
    from magnetar.broker.config import BrokerConfig

    config = BrokerConfig(tokenSecretKey="data:;base64,c2VjcmV0", brokerClientAuthenticationParameters="token:abc")
    shown = runtime_config(config)
    assert shown["tokenSecretKey"] == "******" and shown["brokerClientAuthenticationParameters"] == "******"
    assert shown["basicAuthConf"] == ""  # unset stays visibly unset
    assert shown["brokerDeduplicationEnabled"] in ("true", "false")


def test_topic_message_commands(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    admin = ["--admin-url", broker.web_service_url]
    topic = f"persistent://public/default/op-{uuid.uuid4().hex[:6]}"
    assert run(capsys, "admin", *admin, "topics", "create", topic)[0] == 0
    assert run(capsys, "admin", *admin, "topics", "create-subscription", topic, "-s", "early",
               "-m", "earliest")[0] == 0
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(5)]
    finally:
        client.close()
    assert run(capsys, "admin", *admin, "topics", "create-subscription", topic, "-s", "late")[0] == 0
    code, out, _ = run(capsys, "admin", *admin, "topics", "subscriptions", topic)
    assert code == 0 and out.split() == ["early", "late"]
    # the old names stay as aliases
    assert run(capsys, "admin", *admin, "subscriptions", "list", topic)[1].split() == ["early", "late"]

    code, out, _ = run(capsys, "admin", *admin, "topics", "peek-messages", topic, "-s", "early",
                       "-n", "2", "-o", "json")
    peeked = json.loads(out)
    assert code == 0 and [p["payload"] for p in peeked] == ["m0", "m1"]
    assert peeked[1]["X-Pulsar-PROPERTY-i"] == "1"
    code, out, _ = run(capsys, "admin", *admin, "topics", "peek-messages", topic, "-s", "early", "-n", "2")
    header, *rows = out.splitlines()  # table: one row per message
    assert code == 0 and "X-Pulsar-Message-ID" in header and "payload" in header and len(rows) == 2

    code, out, _ = run(capsys, "admin", *admin, "topics", "examine-message", topic,
                       "--initialPosition", "earliest", "--messagePosition", "2", "-o", "json")
    assert code == 0 and json.loads(out)["payload"] == "m1"
    code, out, _ = run(capsys, "admin", *admin, "topics", "examine-message", topic, "-o", "json")
    assert json.loads(out)["payload"] == "m4"  # default: the latest
    code, out, _ = run(capsys, "admin", *admin, "topics", "examine-message", topic, "-i", "latest",
                       "-m", "5", "-o", "json")
    assert json.loads(out)["payload"] == "m0"
    code, _, err = run(capsys, "admin", *admin, "topics", "examine-message", topic, "-m", "6")
    assert code == 1 and "404" in err
    code, _, err = run(capsys, "admin", *admin, "topics", "examine-message", topic, "-m", "0")
    assert code == 1 and "--messagePosition" in err

    third = ids[2]
    code, out, _ = run(capsys, "admin", *admin, "topics", "get-message-by-id", topic,
                       "-l", str(third.ledger_id()), "-e", str(third.entry_id()), "-o", "json")
    got = json.loads(out)
    assert code == 0 and got["payload"] == "m2"
    assert got["X-Pulsar-Message-ID"] == f"{third.ledger_id()}:{third.entry_id()}"
    code, _, err = run(capsys, "admin", *admin, "topics", "get-message-by-id", topic,
                       "-l", str(third.ledger_id()), "-e", "999")
    assert code == 1 and "404" in err

    assert run(capsys, "admin", *admin, "topics", "skip", topic, "-s", "early", "-n", "3")[0] == 0
    code, out, _ = run(capsys, "admin", *admin, "topics", "peek-messages", topic, "-s", "early", "-o", "json")
    assert [p["payload"] for p in json.loads(out)] == ["m3"]
    assert run(capsys, "admin", *admin, "topics", "unsubscribe", topic, "-s", "late")[0] == 0
    assert run(capsys, "admin", *admin, "topics", "subscriptions", topic)[1].split() == ["early"]


def test_message_endpoints(broker: StandaloneBroker, api: Api) -> None:
    """Pulsar's paths, statuses and headers; a partitioned topic as a whole is refused."""
    local = f"rest-{uuid.uuid4().hex[:6]}"
    base = f"/admin/v2/persistent/public/default/{local}"
    assert api.put(base)[0] == 204
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=QUIET)
    try:
        producer = client.create_producer(f"persistent://public/default/{local}", batching_enabled=False)
        first = producer.send(b"a", partition_key="k")
        producer.send(b"b")
    finally:
        client.close()
    status, body, headers = api.response(
        "GET", f"{base}/examinemessage?initialPosition=earliest&messagePosition=1")
    assert (status, body) == (200, b"a") and headers["X-Pulsar-partition-key"] == "k"
    assert api.response("GET", f"{base}/examinemessage")[1] == b"b"
    assert api.response("GET", f"{base}/examinemessage?initialPosition=middle")[0] == 412
    assert api.response("GET", f"{base}/examinemessage?messagePosition=x")[0] == 412
    status, body, headers = api.response(
        "GET", f"{base}/ledger/{first.ledger_id()}/entry/{first.entry_id()}")
    assert (status, body) == (200, b"a")
    assert headers["X-Pulsar-Message-ID"] == f"{first.ledger_id()}:{first.entry_id()}"
    assert api.response("GET", f"{base}/ledger/{first.ledger_id() + 1000}/entry/0")[0] == 404
    assert api.response("GET", f"{base}/ledger/x/entry/0")[0] == 400
    assert api.response("GET", "/admin/v2/persistent/public/default/none-such/examinemessage")[0] == 404
    parted = f"/admin/v2/persistent/public/default/p-{uuid.uuid4().hex[:6]}"
    assert api.put(f"{parted}/partitions", 2)[0] == 204
    assert api.response("GET", f"{parted}/examinemessage")[0] == 405
    assert api.response("GET", f"{parted}-partition-0/examinemessage")[0] == 404  # empty


def test_namespace_clusters_commands(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    admin = ["--admin-url", broker.web_service_url]
    ns = f"public/op-{uuid.uuid4().hex[:6]}"
    assert run(capsys, "admin", *admin, "namespaces", "create", ns)[0] == 0
    code, out, _ = run(capsys, "admin", *admin, "namespaces", "get-clusters", ns)
    assert code == 0 and out.split() == ["standalone"]
    code, _, err = run(capsys, "admin", *admin, "namespaces", "set-clusters", ns, "--clusters", "nowhere")
    assert code == 1 and err.startswith("magnetar admin: 4")
    assert run(capsys, "admin", *admin, "namespaces", "set-clusters", ns, "-c", "standalone")[0] == 0
    code, out, _ = run(capsys, "admin", *admin, "namespaces", "get-clusters", ns, "-o", "json")
    assert json.loads(out) == ["standalone"]
    assert run(capsys, "admin", *admin, "namespaces", "delete", ns)[0] == 0
