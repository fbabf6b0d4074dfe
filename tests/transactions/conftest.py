"""Fixtures: a ``magnetar standalone`` subprocess with transaction coordinators (the
default), and one with them off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.client.conftest import BrokerProcess


@pytest.fixture(scope="module")
def txn_broker() -> Iterator[BrokerProcess]:
    b = BrokerProcess("magnetar")
    yield b
    b.stop()


@pytest.fixture(scope="module")
def no_txn_broker() -> Iterator[BrokerProcess]:
    b = BrokerProcess("magnetar", transactionCoordinatorEnabled="false")
    yield b
    b.stop()
