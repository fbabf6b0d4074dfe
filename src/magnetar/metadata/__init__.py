"""The metadata layer: cluster-wide state in a versioned, watchable key store.

Below the broker and beside storage; knows nothing of the wire. The contract (see
`magnetar.metadata.api` for the whole of it, modelled on Pulsar's ``MetadataStore``)::

    store = await create_metadata_store("zk:zk1:2181,zk2:2181/pulsar")  # or "sqlite:/path"
    got = await store.get("/admin/policies/public")         # (bytes, Stat) or None
    stat = await store.put(path, b"...", expected_version=-1)   # create; BadVersionError
    await store.put(path, b"...", stat.version)                 # compare-and-set
    await store.put("/loadbalance/brokers/b1:8080", b"...", ephemeral=True)
    await store.delete(path, expected_version=None)
    names = await store.get_children("/admin/policies")
    store.register_listener(on_notification)         # Notification(type, path)
    store.register_session_listener(on_session)      # SessionEvent
    cache = MetadataCache(store)                     # JSON values, invalidated by notifications
    policies = await cache.get("/admin/policies/public/default")

`IdBlocks` hands out cluster-wide unique ids in blocks from one counter key (ledger ids).

Backends: `LocalMetadataStore` (SQLite, the embedded default) and `ZKMetadataStore`
(ZooKeeper through kazoo). ``kv`` keeps the broker's older flat key/JSON stores.
"""

from .api import (
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
    SessionExpiredPolicy,
    Stat,
)
from .cache import MISSING, MetadataCache, json_decode, json_encode
from .counter import IdBlocks
from .errors import (
    BadVersionError,
    InvalidPathError,
    InvalidUrlError,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    StoreClosedError,
    StoreUnavailableError,
)
from .factory import create_metadata_store, open_metadata_store
from .kv import KeyValueStore, MemoryKeyValueStore, SqliteKeyValueStore
from .local import LocalMetadataStore
from .url import StoreUrl, parse_store_url

__all__ = [
    "MISSING",
    "BadVersionError",
    "IdBlocks",
    "InvalidPathError",
    "InvalidUrlError",
    "KeyValueStore",
    "LocalMetadataStore",
    "MemoryKeyValueStore",
    "MetadataCache",
    "MetadataStore",
    "MetadataStoreError",
    "NotEmptyError",
    "NotFoundError",
    "Notification",
    "NotificationType",
    "SessionEvent",
    "SessionExpiredPolicy",
    "SqliteKeyValueStore",
    "Stat",
    "StoreClosedError",
    "StoreUnavailableError",
    "StoreUrl",
    "create_metadata_store",
    "json_decode",
    "json_encode",
    "open_metadata_store",
    "parse_store_url",
]
