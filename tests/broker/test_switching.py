"""The interpreter's switch interval while a broker runs (broker/switching.py): set at
start, the shortest any running broker asked for, and put back once the last one stops."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.switching import ThreadSwitching
from tests.broker.conftest import start_broker


@pytest.fixture
def interval_before() -> Iterator[float]:
    before = sys.getswitchinterval()
    yield before
    sys.setswitchinterval(before)  # (whatever a failed test left)


def test_the_shortest_asked_holds_and_the_first_comes_back(interval_before: float) -> None:
    first, second, nothing = ThreadSwitching(800), ThreadSwitching(200), ThreadSwitching(0)
    nothing.start()
    assert sys.getswitchinterval() == interval_before  # 0: the interpreter's own
    first.start()
    first.start()  # (idempotent)
    assert sys.getswitchinterval() == pytest.approx(0.0008)
    second.start()
    assert sys.getswitchinterval() == pytest.approx(0.0002)
    second.stop()
    assert sys.getswitchinterval() == pytest.approx(0.0008)
    second.stop()  # (once only)
    first.stop()
    assert sys.getswitchinterval() == interval_before
    nothing.stop()
    assert sys.getswitchinterval() == interval_before


def test_a_running_broker_sets_the_interval_and_its_stop_puts_it_back(
        tmp_path: Path, interval_before: float) -> None:
    broker = start_broker(tmp_path, magnetarThreadSwitchIntervalMicros=300)
    try:
        assert sys.getswitchinterval() == pytest.approx(0.0003)
    finally:
        broker.stop()
    assert sys.getswitchinterval() == interval_before
    assert BrokerConfig().magnetarThreadSwitchIntervalMicros == 500  # the default


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="magnetarThreadSwitchIntervalMicros"):
        BrokerConfig.load(None, magnetarThreadSwitchIntervalMicros=-1)
