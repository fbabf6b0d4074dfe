"""Fixtures of the console tests: a broker (stats sampled every second, so the charts move
within seconds) and a headless Chromium, skipped with the reason where it is missing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from magnetar.testing import StandaloneBroker, standalone
from tests.console.browser import browser_missing_reason, chromium


@pytest.fixture(scope="module")
def broker() -> Iterator[StandaloneBroker]:
    with standalone({"statsUpdateFrequencyInSecs": 1}) as b:
        yield b


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    reason = browser_missing_reason()
    if reason:
        pytest.skip(reason)
    with chromium() as d:
        yield d
