"""Parsing ``metadataStoreUrl`` / ``configurationMetadataStoreUrl`` (Pulsar's forms).

- ``zk:host1:2181,host2:2181/chroot`` (also ``zookeeper://...`` and, as Pulsar accepts
  for old configurations, a bare ``host:2181,...``): ZooKeeper, through kazoo;
- ``sqlite:/path/metadata.db``: the embedded SQLite store (Magnetar's own scheme; Pulsar
  has ``rocksdb:`` for its embedded one);
- ``memory:`` (``memory:name``): SQLite in memory, for tests.

A malformed URL raises `InvalidUrlError` naming the URL and what is wrong with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidUrlError

_HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


@dataclass(frozen=True)
class StoreUrl:
    scheme: str  # "zk", "sqlite" or "memory"
    hosts: tuple[tuple[str, int], ...] = ()
    chroot: str = ""
    path: str = ""

    @property
    def connect_string(self) -> str:
        """kazoo's ``hosts`` argument: ``h1:p1,h2:p2/chroot``."""
        return ",".join(f"{h}:{p}" for h, p in self.hosts) + self.chroot

    def __str__(self) -> str:
        if self.scheme == "zk":
            return "zk:" + self.connect_string
        return f"{self.scheme}:{self.path}"


def parse_store_url(url: str) -> StoreUrl:
    text = (url or "").strip()
    if not text:
        raise InvalidUrlError("metadataStoreUrl is empty")
    if text.startswith("sqlite:"):
        path = text[len("sqlite:"):]
        if path.startswith("//"):
            path = path[2:]
        if not path:
            raise InvalidUrlError(f"metadataStoreUrl {url!r}: sqlite: needs a file path")
        return StoreUrl("sqlite", path=path)
    if text.startswith("memory:") or text == "memory":
        return StoreUrl("memory", path=text.partition(":")[2])
    for prefix in ("zookeeper://", "zk://", "zk:"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    else:
        if "://" in text or not _HOST.match(text.split("/", 1)[0].split(",")[0]):
            raise InvalidUrlError(
                f"metadataStoreUrl {url!r}: expected zk:host:port[,host:port...][/chroot],"
                " sqlite:/path or memory:")
    hosts_part, slash, chroot = text.partition("/")
    hosts: list[tuple[str, int]] = []
    for item in hosts_part.split(","):
        match = _HOST.match(item.strip())
        if not match:
            raise InvalidUrlError(
                f"metadataStoreUrl {url!r}: {item.strip()!r} is not host:port")
        port = int(match.group(2))
        if not 0 < port < 65536:
            raise InvalidUrlError(f"metadataStoreUrl {url!r}: port {port} out of range")
        hosts.append((match.group(1), port))
    root = ""
    if slash:
        root = "/" + chroot
        if root == "/":
            root = ""
        elif root.endswith("/") or "//" in root or any(
                part in (".", "..") for part in root.split("/")[1:]):
            raise InvalidUrlError(f"metadataStoreUrl {url!r}: malformed chroot {root!r}")
    return StoreUrl("zk", tuple(hosts), root)
