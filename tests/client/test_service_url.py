"""Service URLs a user may type wrongly are refused before any connection, with a hint."""

from __future__ import annotations

import pytest

from magnetar.client.pool import check_service_url


@pytest.mark.parametrize("url", ["pulsar://localhost:6650", "pulsar+ssl://h:6651", "http://h:8080",
                                 "https://h:8443", "pulsar://h1:6650,h2:6650"])
def test_good_urls(url: str) -> None:
    assert check_service_url(url) == url


@pytest.mark.parametrize(("url", "words"), [
    ("localhost:6650", "no scheme: use pulsar://localhost:6650"),
    ("", "empty"),
    ("kafka://h:9092", "unsupported service URL"),
    ("pulsar://h:99999", "invalid port"),
    ("pulsar://:6650", "no host"),
])
def test_bad_urls_say_what_to_write(url: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        check_service_url(url)
