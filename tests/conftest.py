"""Suite-wide fixtures.

The official client frees its I/O threads' descriptors (epoll, eventfd, timerfd) only when
its Python object is collected, and a closed client often sits in a reference cycle until
the cyclic collector runs. Over the whole suite that left hundreds of descriptors open in
the test process, enough to push new sockets past 1024, where py4j's ``select()`` (the
Spark tests' callback server) fails. Collecting after each module keeps the count flat.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def _collect_closed_clients() -> Iterator[None]:
    yield
    gc.collect()
