"""advertisedListeners: lookups (binary and HTTP) answer with the listener the client names,
and refuse a listener the broker does not have, as Pulsar does."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.testing import standalone
from tests.admin.conftest import QUIET, Api
from tests.ports import free_port


def test_lookups_follow_the_listener_name() -> None:
    port = free_port()
    listeners = f"internal:pulsar://127.0.0.1:{port},external:pulsar://localhost:{port}"
    with standalone({"advertisedListeners": listeners, "internalListenerName": "internal"},
                    broker_port=port) as broker:
        api = Api(broker.web_service_url)
        path = "/lookup/v2/topic/persistent/public/default/l"
        assert api.ok("GET", path)["brokerUrl"] == f"pulsar://127.0.0.1:{port}"
        assert api.ok("GET", path + "?listenerName=external")["brokerUrl"] == f"pulsar://localhost:{port}"
        status, answer = api.get(path + "?listenerName=elsewhere")
        assert status == 503 and "elsewhere" in answer["reason"]
        for name in ("internal", "external"):
            client = pulsar.Client(broker.service_url, listener_name=name, logger=QUIET,
                                   operation_timeout_seconds=10)
            client.create_producer(f"listener-{name}").send(b"x")
            client.close()
        client = pulsar.Client(broker.service_url, listener_name="elsewhere", logger=QUIET,
                               operation_timeout_seconds=2)
        with pytest.raises(pulsar.PulsarException):
            client.create_producer("listener-refused")
        client.close()


def test_listener_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="advertisedListeners"):
        BrokerConfig.load(None, advertisedListeners="internal-without-url")
    with pytest.raises(ConfigError, match="internalListenerName"):
        BrokerConfig.load(None, advertisedListeners="a:pulsar://h:1", internalListenerName="b")
    assert BrokerConfig.load(None, advertisedListeners="a:pulsar://h:1,a:pulsar+ssl://h:2")
