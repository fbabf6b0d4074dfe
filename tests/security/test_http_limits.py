"""The admin HTTP service's request rate limit (``httpRequestsLimitEnabled`` /
``httpRequestsMaxPerSecond``: 429 past the rate, then served again) and
``authenticateMetricsEndpoint`` (``/metrics`` without a credential unless it is true), on an
admin service running in the test broker's event loop."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from magnetar.admin.ratelimit import TokenBucket
from magnetar.admin.server import AdminServer
from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.cli.tokens import create_token
from tests.broker.brokerproc import wait_until
from tests.broker.conftest import ThreadedBroker

from .conftest import file_url, token_settings


@contextmanager
def admin_service(broker: ThreadedBroker) -> Iterator[str]:
    """The admin HTTP service of ``broker`` on a free port; yields its base URL."""
    assert broker.service is not None
    server = AdminServer(broker.service, "127.0.0.1", 0)
    broker.call_async(server.start)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        broker.call_async(server.stop)


def get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


# ---------------------------------------------------------------------- rate limit

def test_token_bucket() -> None:
    now = [100.0]
    bucket = TokenBucket(2.0, clock=lambda: now[0])
    assert bucket.try_take() and bucket.try_take()  # one second's worth at start
    assert not bucket.try_take()
    assert bucket.seconds_to_next() == pytest.approx(0.5)
    now[0] += 0.5
    assert bucket.try_take() and not bucket.try_take()
    now[0] += 60  # idle: at most one second's worth is stored
    assert [bucket.try_take() for _ in range(3)] == [True, True, False]
    assert bucket.refused == 3
    slow = TokenBucket(0.25, clock=lambda: now[0])  # below 1/s: one request, then one per 4 s
    assert slow.try_take() and not slow.try_take()
    assert slow.seconds_to_next() == pytest.approx(4.0)


def test_http_requests_past_the_rate_get_429_then_are_served_again(
        make_broker: Callable[..., ThreadedBroker]) -> None:
    broker = make_broker(httpRequestsLimitEnabled=True, httpRequestsMaxPerSecond=0.5)
    with admin_service(broker) as base:
        url = base + "/admin/v2/clusters"
        statuses = []
        for _ in range(50):  # one token, the next in 2 s: far fewer than 50 go through
            status, headers, body = get(url)
            statuses.append(status)
            if status == 429:
                break
        assert statuses[0] == 200 and statuses[-1] == 429, statuses
        assert "httpRequestsMaxPerSecond" in json.loads(body)["reason"]
        assert headers["Content-Type"].startswith("application/json")
        assert 1 <= int(headers["Retry-After"]) <= 2
        # every path is limited, /metrics and lookups too
        assert get(base + "/metrics")[0] == 429
        # a refused request takes no token: within about 2 s one is served again
        start = time.monotonic()
        wait_until(lambda: get(url)[0] == 200, 30, "a request to be served again")
        assert time.monotonic() - start < 30


def test_http_requests_unlimited_by_default(make_broker: Callable[..., ThreadedBroker]) -> None:
    broker = make_broker(httpRequestsMaxPerSecond=0.5)  # httpRequestsLimitEnabled=false
    with admin_service(broker) as base:
        assert [get(base + "/admin/v2/clusters")[0] for _ in range(20)] == [200] * 20


def test_http_rate_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="httpRequestsMaxPerSecond"):
        BrokerConfig.load(None, httpRequestsLimitEnabled=True, httpRequestsMaxPerSecond=0.0)
    assert BrokerConfig().httpRequestsMaxPerSecond == 100.0  # Pulsar's defaults
    assert BrokerConfig().httpRequestsLimitEnabled is False


# ---------------------------------------------------------------------- /metrics

def test_metrics_need_no_credential_by_default(make_broker: Callable[..., ThreadedBroker],
                                               keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, authorizationEnabled=True,
                                          superUserRoles="admin"))
    assert broker.config.authenticateMetricsEndpoint is False
    with admin_service(broker) as base:
        status, _, body = get(base + "/metrics")
        assert status == 200 and b"pulsar_" in body
        assert get(base + "/admin/v2/clusters")[0] == 401  # the rest still needs one


def test_metrics_need_a_credential_with_authenticate_metrics_endpoint(
        make_broker: Callable[..., ThreadedBroker], keys: dict[str, Path]) -> None:
    broker = make_broker(**token_settings(keys, authenticateMetricsEndpoint=True))
    token = create_token("someone", secret_key=file_url(keys["secret"]))
    other = create_token("someone", secret_key=file_url(keys["other-secret"]))
    with admin_service(broker) as base:
        status, _, body = get(base + "/metrics")
        assert status == 401 and "Authentication required" in json.loads(body)["reason"]
        assert get(base + "/metrics", other)[0] == 401
        status, _, body = get(base + "/metrics", token)
        assert status == 200 and b"pulsar_" in body
