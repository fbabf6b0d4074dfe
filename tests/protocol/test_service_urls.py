"""Multi-host service URLs split into one URL per host."""

from __future__ import annotations

import pytest

from magnetar.protocol.service_urls import split_service_url


@pytest.mark.parametrize("url, hosts", [
    ("http://s1:8080,s2:8080,s3:8080", ["http://s1:8080", "http://s2:8080", "http://s3:8080"]),
    ("http://s1:8080,http://s2:8080/", ["http://s1:8080", "http://s2:8080"]),
    ("https://a:8443,b:8443/base/", ["https://a:8443/base", "https://b:8443/base"]),
    ("pulsar://a:6650, b:6650", ["pulsar://a:6650", "pulsar://b:6650"]),
    ("http://one:8080", ["http://one:8080"]),
    ("", []),
])
def test_each_host_gets_its_own_url(url: str, hosts: list[str]) -> None:
    assert split_service_url(url) == hosts
