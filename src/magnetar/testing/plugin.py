"""pytest plugin (entry point ``pytest11``: ``magnetar``): the ``magnetar_broker`` fixture.

    def test_roundtrip(magnetar_broker):
        client = pulsar.Client(magnetar_broker.service_url)

One broker per test session (see ``magnetar.testing`` for why a child process); tests
that need their own broker use ``magnetar.testing.standalone()`` directly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar.testing import StandaloneBroker, standalone


@pytest.fixture(scope="session")
def magnetar_broker() -> Iterator[StandaloneBroker]:
    """A ``magnetar standalone`` on free ports with a temporary data directory:
    ``.service_url`` (pulsar://) and ``.web_service_url`` (http://)."""
    with standalone() as broker:
        yield broker
