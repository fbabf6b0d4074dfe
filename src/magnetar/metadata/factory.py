"""`create_metadata_store`: a started `MetadataStore` for a ``metadataStoreUrl``."""

from __future__ import annotations

from .api import MetadataStore, SessionExpiredPolicy
from .local import LocalMetadataStore
from .url import parse_store_url


def open_metadata_store(url: str, *,
                        session_timeout_s: float = 30.0,
                        session_expired_policy: SessionExpiredPolicy | str =
                        SessionExpiredPolicy.RECONNECT,
                        operation_timeout_s: float = 30.0,
                        connect_timeout_s: float = 30.0) -> MetadataStore:
    """The store for ``url`` (`InvalidUrlError` if malformed), not yet started."""
    parsed = parse_store_url(url)
    policy = (session_expired_policy if isinstance(session_expired_policy, SessionExpiredPolicy)
              else SessionExpiredPolicy.parse(session_expired_policy))
    if parsed.scheme == "zk":
        from .zk import ZKMetadataStore  # kazoo is only loaded for a ZooKeeper URL

        return ZKMetadataStore(parsed, session_timeout_s=session_timeout_s,
                               session_expired_policy=policy,
                               operation_timeout_s=operation_timeout_s,
                               connect_timeout_s=connect_timeout_s)
    if parsed.scheme == "memory":
        return LocalMetadataStore(":memory:", session_expired_policy=policy)
    return LocalMetadataStore(parsed.path, session_expired_policy=policy)


async def create_metadata_store(url: str, **options: object) -> MetadataStore:
    """`open_metadata_store` and ``await store.start()``: connected (or an error naming the
    address: `StoreUnavailableError` after the retries, `InvalidUrlError`)."""
    store = open_metadata_store(url, **options)  # type: ignore[arg-type]
    await store.start()
    return store
