"""Namespace policies fall back to broker defaults and persist in the metadata store."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.namespaces.policies import PolicyStore
from magnetar.storage import MemoryMetadataStore


def test_defaults_then_overrides_then_cleared() -> None:
    store = MemoryMetadataStore()
    config = BrokerConfig(defaultRetentionTimeInMinutes=10, ttlDurationDefaultInSeconds=0)
    policies = PolicyStore(store, config)
    assert policies.get("public/default").retention_time_seconds == 600
    policies.set("public/default", retention_time_minutes=-1, message_ttl_seconds=30)
    p = policies.get("public/default")
    assert (p.retention_time_seconds, p.message_ttl_seconds) == (-1, 30)
    assert policies.get("other/ns").message_ttl_seconds == 0
    assert PolicyStore(store, config).get("public/default").message_ttl_seconds == 30  # persisted
    policies.set("public/default", message_ttl_seconds=None, retention_time_minutes=None)
    assert policies.get("public/default").retention_time_seconds == 600


def test_bad_policies_are_refused() -> None:
    policies = PolicyStore(MemoryMetadataStore(), BrokerConfig())
    with pytest.raises(ConfigError):
        policies.set("public/default", backlog_quota_policy="drop_everything")
    with pytest.raises(ConfigError):
        policies.set("public/default", no_such_policy=1)
