"""Fixtures: one ``magnetar standalone`` child process per test module (magnetar.testing),
reached over real HTTP (urllib) and by the official pulsar-client over real TCP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest

from magnetar.testing import StandaloneBroker, standalone

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
#: a policy GET's answer where Pulsar's is null (a namespace or topic that sets none):
#: 204 No Content, no body, as Pulsar's REST layer sends a null
NULL = (204, "")


class Api:
    """A tiny HTTP client for the admin API: ``api.put(path, body) -> (status, json|text)``."""

    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
             ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, _decode(resp.read(), resp.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as exc:
            return exc.code, _decode(exc.read(), exc.headers.get("Content-Type", ""))

    def response(self, method: str, path: str) -> tuple[int, bytes, dict[str, str]]:
        req = urllib.request.Request(self.base + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read(), dict(resp.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), dict(exc.headers)

    def get(self, path: str) -> tuple[int, Any]:
        return self.call("GET", path)

    def put(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.call("PUT", path, body)

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.call("POST", path, body)

    def delete(self, path: str) -> tuple[int, Any]:
        return self.call("DELETE", path)

    def ok(self, method: str, path: str, body: Any = None) -> Any:
        """The answer of a call that must succeed (2xx)."""
        status, answer = self.call(method, path, body)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer


def _decode(data: bytes, content_type: str) -> Any:
    if "json" in content_type:
        return json.loads(data)
    return data.decode(errors="replace")


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Bounded poll."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def broker() -> Iterator[StandaloneBroker]:
    with standalone({"statsUpdateFrequencyInSecs": 1}) as b:
        yield b


@pytest.fixture(scope="module")
def api(broker: StandaloneBroker) -> Api:
    return Api(broker.web_service_url)


@pytest.fixture
def client(broker: StandaloneBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=QUIET)
    yield c
    c.close()


@pytest.fixture
def name() -> str:
    """A fresh local topic name."""
    return f"t-{uuid.uuid4().hex[:10]}"
