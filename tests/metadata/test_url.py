"""``metadataStoreUrl`` parsing: Pulsar's forms, and a clear error for malformed ones."""

from __future__ import annotations

import pytest

from magnetar.metadata import (
    InvalidUrlError,
    LocalMetadataStore,
    open_metadata_store,
    parse_store_url,
)


def test_zk_forms() -> None:
    url = parse_store_url("zk:zk1:2181,zk2:2182/pulsar/a")
    assert url.scheme == "zk" and url.hosts == (("zk1", 2181), ("zk2", 2182))
    assert url.chroot == "/pulsar/a" and str(url) == "zk:zk1:2181,zk2:2182/pulsar/a"
    assert parse_store_url("zookeeper://127.0.0.1:2181").hosts == (("127.0.0.1", 2181),)
    assert parse_store_url("localhost:2181").scheme == "zk"  # Pulsar's legacy bare form
    assert parse_store_url("zk:[::1]:2181/").chroot == ""


def test_local_forms(tmp_path) -> None:
    assert parse_store_url(f"sqlite:{tmp_path}/m.db").path == f"{tmp_path}/m.db"
    assert parse_store_url("memory:").scheme == "memory"
    assert isinstance(open_metadata_store("memory:"), LocalMetadataStore)


@pytest.mark.parametrize("url, says", [
    ("", "empty"),
    ("zk:", "is not host:port"),
    ("zk:zk1", "'zk1' is not host:port"),
    ("zk:zk1:abc", "is not host:port"),
    ("zk:zk1:99999", "port 99999 out of range"),
    ("zk:zk1:2181,,zk2:2181", "'' is not host:port"),
    ("zk:zk1:2181/a//b", "malformed chroot"),
    ("etcd://e1:2379", "expected zk:host:port"),
    ("sqlite:", "needs a file path"),
    ("just words", "expected zk:host:port"),
])
def test_malformed_urls_are_clear_errors(url: str, says: str) -> None:
    with pytest.raises(InvalidUrlError, match=f"metadataStoreUrl.*{says}|{says}") as err:
        parse_store_url(url)
    assert isinstance(err.value, ValueError)
    with pytest.raises(InvalidUrlError):
        open_metadata_store(url)


def test_bad_session_policy() -> None:
    with pytest.raises(ValueError, match="shutdown or reconnect"):
        open_metadata_store("memory:", session_expired_policy="restart")
