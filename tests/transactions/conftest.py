"""Fixtures: ``magnetar standalone`` subprocesses with transaction coordinators (the
default, with its web service on a known port for the admin API and metrics), and one with
them off."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.client.conftest import BrokerProcess, free_port


class TxnBroker(BrokerProcess):
    """A broker whose web service listens on ``http_port`` (kept across restarts)."""

    http_port = 0

    def start(self) -> None:
        if not self.http_port:
            self.http_port = free_port()
            at = self.cmd.index("--http-port")
            self.cmd[at + 1] = str(self.http_port)
        super().start()

    def rest(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, JSON body) of an admin call; the web service may start a moment after
        the binary port: a refused connection is tried again for up to 20 s."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.http_port}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={} if body is None else {"Content-Type": "application/json"})
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    body = answer.read()
                    return answer.status, _decode(body)
            except urllib.error.HTTPError as exc:
                return exc.code, _decode(exc.read())
            except urllib.error.URLError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # the listener is starting; bounded by the deadline

    def text(self, path: str) -> str:
        self.rest("GET", "/admin/v2/brokers/health")  # waits for the listener
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}",
                                    timeout=30) as answer:
            return str(answer.read().decode())


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body.decode()


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[TxnBroker]:
    b = TxnBroker("magnetar")
    yield b
    b.stop()


@pytest.fixture
def own_txn_broker() -> Iterator[TxnBroker]:
    """A broker for one test (it may be killed and started again)."""
    b = TxnBroker("magnetar")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def no_txn_broker() -> Iterator[BrokerProcess]:
    b = BrokerProcess("magnetar", transactionCoordinatorEnabled="false")
    yield b
    b.stop()
